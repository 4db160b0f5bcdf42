"""A split as the model's inputs: each pair's words (cut to the run's maximum length), their ids, the label ids and
the question (group) ids; and the errors of a pair that cannot be used."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from matching.data.pairs import Pair
from matching.data.preparation import BadExampleError, model_words, pair_sides
from matching.data.vocab import Vocabulary
from matching.errors import ConfigError

log = logging.getLogger(__name__)


class LabelError(BadExampleError):
    """A pair carries a label outside the task's label space."""


class EmptyTextError(BadExampleError):
    """A pair has an empty (or whitespace-only) text."""


@dataclass
class EncodedSplit(Dataset):
    """Token ids of both sides, label ids and optional group ids of one split, ready for batching."""

    name: str
    a: list[np.ndarray]
    b: list[np.ndarray]
    labels: np.ndarray  # (N,) int64
    groups: np.ndarray  # (N,) int64 question/context id (order of first appearance); -1 when ungrouped
    group_names: list[str]  # group id -> the corpus's own question id
    truncated: int = 0
    # The words of each text as the model sees them, kept until the embedding source has taken what it needs
    # (EmbeddingSource.attach: a table needs none; an encoder encodes them), and what the source keeps for the
    # split's batches (an encoder's cached word states).
    words: tuple[list[list[str]], list[list[str]]] | None = None
    source_data: Any = None

    def words_taken(self, source_data: Any = None) -> None:
        """The embedding source has taken what it needs of the words (EmbeddingSource.attach): they go, and what
        the source keeps for the split's batches (`source_data`) stays."""
        self.words, self.source_data = None, source_data

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> int:
        return i  # the collate function gathers and pads a whole batch at once

    def __getitems__(self, indices: list[int]) -> list[int]:
        """A batch's items at once (what DataLoader asks a dataset that has this, instead of calling __getitem__
        once per index): the indices themselves, for the collate function."""
        return indices

    def lengths(self) -> np.ndarray:
        return self.sides().sum(1)

    def packed(self, device: torch.device | str = "cpu") -> PackedSplit:
        """The split as a few flat tensors on `device` (built once per device), from which a batch is gathered."""
        device = torch.device(device)
        cache = self.__dict__.setdefault("_packed", {})
        if device not in cache:
            cpu = cache.get(torch.device("cpu")) or PackedSplit.of(self)
            cache[device] = cpu.to(device)
        return cache[device]

    def sides(self) -> np.ndarray:
        """(N, 2) token counts of both texts."""
        return pair_sides(self.a, self.b)


def keep_answered_questions(pairs: Sequence[Pair], match_label: str, name: str = "train") -> list[Pair]:
    """The pairs of questions (groups) with at least one correct candidate (`task.train_questions=answered`).

    In WikiQA 59 % of the training questions have no correct answer; they give only negatives, and the filtered
    evaluation protocol skips such questions, so training on them mostly teaches the model to say "no match".
    """
    answered = {p.group for p in pairs if p.label == match_label}
    kept = [p for p in pairs if p.group in answered]
    questions = len({p.group for p in pairs})
    log.info(
        "%s: training on the %d pairs of the %d questions with a correct candidate; left out %d pairs of %d "
        "questions without one (task.train_questions=answered)",
        name, len(kept), len(answered), len(pairs) - len(kept), questions - len(answered),
    )  # fmt: skip
    return kept


def encode_split(
    name: str,
    pairs: Sequence[Pair],
    tokens: Sequence[tuple[list[str], list[str]]],
    vocab: Vocabulary,
    labels: Sequence[str],
    max_length: int | None,
    source: str = "",
    on_bad: str = "error",
) -> EncodedSplit:
    """Ids of a split. A pair with an unknown label or an empty text raises (on_bad="error") or is counted
    and skipped (on_bad="skip")."""
    if on_bad not in ("error", "skip"):
        raise ConfigError(f"data.on_bad_example must be 'error' or 'skip', got {on_bad!r}")
    label_ids = {label: i for i, label in enumerate(labels)}
    skipped: dict[str, list[int]] = {}
    keep = []
    for i, (p, (ta, tb)) in enumerate(zip(pairs, tokens, strict=True)):
        if p.label not in label_ids:
            error, reason = LabelError, f"label {p.label!r} is outside the task's label space {list(labels)}"
        elif not ta or not tb:
            error, reason = EmptyTextError, f"the {'first' if not ta else 'second'} text is empty"
        else:
            keep.append(i)
            continue
        if on_bad == "error":
            where = f"{source or name}, line {p.line}" if p.line else f"{source or name}, example {i + 1}"
            raise error(
                f"{where}: {reason}. Fix that line, set task.labels to the corpus's labels if they differ, or run "
                f"with data.on_bad_example=skip to count and skip such pairs."
            )
        skipped.setdefault(reason, []).append(p.line or i + 1)
    for reason, lines in skipped.items():
        log.warning("%s: skipped %d pairs because %s (lines %s%s)", source or name, len(lines), reason,
                    ", ".join(map(str, lines[:5])), ", ..." if len(lines) > 5 else "")  # fmt: skip
    if skipped:
        pairs = [pairs[i] for i in keep]
        tokens = [tokens[i] for i in keep]
    words_a, words_b, truncated = model_words(tokens, max_length)
    a, b = [vocab.encode(t) for t in words_a], [vocab.encode(t) for t in words_b]
    if truncated:
        log.warning("%s: %d pairs had a side longer than max_length=%d and were truncated", name, truncated, max_length)
    y = np.fromiter((label_ids[p.label] for p in pairs), np.int64, len(pairs))
    group_ids: dict[str, int] = {}
    groups = np.fromiter(
        (-1 if p.group is None else group_ids.setdefault(p.group, len(group_ids)) for p in pairs), np.int64, len(pairs)
    )
    return EncodedSplit(name, a, b, y, groups, list(group_ids), truncated, words=(words_a, words_b))


@dataclass(frozen=True)
class PackedSide:
    """The texts of one side one after another: text i is ids[start[i] : start[i] + length[i]]."""

    ids: torch.Tensor  # (total,) int64
    start: torch.Tensor  # (N,) int64
    length: torch.Tensor  # (N,) int64
    host_length: np.ndarray  # (N,) the same lengths on the host, where a batch's width is read without a sync

    @classmethod
    def of(cls, texts: Sequence[np.ndarray]) -> PackedSide:
        length = np.fromiter(map(len, texts), np.int64, len(texts))
        start = np.zeros(len(texts), np.int64)
        np.cumsum(length[:-1], out=start[1:])
        ids = np.concatenate(texts).astype(np.int64) if len(texts) else np.zeros(0, np.int64)
        return cls(torch.from_numpy(ids), torch.from_numpy(start), torch.from_numpy(length), length)

    def to(self, device: torch.device) -> PackedSide:
        return PackedSide(self.ids.to(device), self.start.to(device), self.length.to(device), self.host_length)

    def batch(self, host: np.ndarray, index: torch.Tensor, pad_to: int = 1) -> torch.Tensor:
        """(B, longest) ids of the texts `index` (the same indices on the host: `host`), 0-padded on the right;
        the width is rounded up to a multiple of `pad_to`."""
        lengths = self.host_length[host]
        longest = _round_up(int(lengths.max()), pad_to)
        if self.ids.device.type == "cpu":  # NumPy: a few microseconds where each torch call costs several
            width = np.arange(longest)
            # Positions past a text's end read its neighbour's ids (past the last text: the last id, "clip"), then
            # are zeroed: two passes over (B, L) fewer than masking the positions first.
            out = np.take(self.ids.numpy(), self.start.numpy()[host][:, None] + width, mode="clip")
            out *= width < lengths[:, None]
            return torch.from_numpy(out)
        return self.gather(index, longest)

    def gather(self, index: torch.Tensor, width: int) -> torch.Tensor:
        """(B, width) ids of the texts `index` (on the split's device), 0-padded on the right, in torch operations
        alone: the same operations for every batch of one width, with no host read, so that they can be captured in
        a CUDA graph (matching.training.replay). `width` must be at least the longest of these texts."""
        positions = torch.arange(width, device=self.ids.device)
        position = self.start[index].unsqueeze(1) + positions  # (B, L)
        inside = positions < self.length[index].unsqueeze(1)
        return torch.where(inside, self.ids[position.clamp_max(len(self.ids) - 1)], 0)

    def width(self, host: np.ndarray, pad_to: int = 1) -> int:
        """The longest of the texts `host` (indices on the host), rounded up to a multiple of `pad_to`."""
        return _round_up(int(self.host_length[host].max()), pad_to)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class PackedSplit:
    """An EncodedSplit as flat tensors, so that a batch is a few gathers (on the training device, when the split
    lives there) instead of a Python loop over its pairs and a copy of each tensor to the device."""

    a: PackedSide
    b: PackedSide
    labels: torch.Tensor  # (N,) int64
    groups: torch.Tensor  # (N,) int64

    @classmethod
    def of(cls, split: EncodedSplit) -> PackedSplit:
        labels, groups = torch.as_tensor(split.labels, dtype=torch.int64), torch.as_tensor(split.groups)
        return cls(PackedSide.of(split.a), PackedSide.of(split.b), labels, groups)

    def to(self, device: torch.device) -> PackedSplit:
        return PackedSplit(self.a.to(device), self.b.to(device), self.labels.to(device), self.groups.to(device))

    def gather(self, index: torch.Tensor, widths: tuple[int, int]) -> dict[str, torch.Tensor]:
        """The training batch of the pairs `index` with both sides padded to `widths` (torch operations on the
        split's device, capturable: PackedSide.gather)."""
        return {"a": self.a.gather(index, widths[0]), "b": self.b.gather(index, widths[1]),
                "label": self.labels[index], "group": self.groups[index], "index": index}  # fmt: skip
