"""PairDataModule: read → tokenise → vocabulary → ids → length-bucketed, per-batch-padded batches.

The vocabulary holds the training split's words and, with pretrained vectors, every other word that has a vector
(see `matching.data.embeddings.PretrainedVectors`); any other word hashes to an OOV bucket.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm.auto import tqdm

from matching.callbacks import batches_trained
from matching.data import cache as corpus_cache
from matching.data.cache import file_stamp
from matching.data.contextual import ContextualEncoder, SplitStates, cached_states, encode_states
from matching.data.embeddings import PretrainedVectors, RandomVectors
from matching.data.readers import Pair
from matching.data.sources import read_split, resolve_path
from matching.data.tasks import Task
from matching.data.vocab import Tokenizer, Vocabulary
from matching.errors import ConfigError, DataFormatError, UserError

log = logging.getLogger(__name__)


class BadExampleError(UserError, ValueError):
    """A pair that cannot be used; the message names its file and line and what to do."""


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
    # Contextual embedders only: the words of each text exactly as encoded (while the states are built, or
    # throughout when the encoder is fine-tuned), and the cached word states of a frozen encoder.
    words: tuple[list[list[str]], list[list[str]]] | None = None
    states: SplitStates | None = None

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
        longest = -(-int(lengths.max()) // pad_to) * pad_to
        if self.ids.device.type == "cpu":  # NumPy: a few microseconds where each torch call costs several
            width = np.arange(longest)
            # Positions past a text's end read its neighbour's ids (past the last text: the last id, "clip"), then
            # are zeroed: two passes over (B, L) fewer than masking the positions first.
            out = np.take(self.ids.numpy(), self.start.numpy()[host][:, None] + width, mode="clip")
            out *= width < lengths[:, None]
            return torch.from_numpy(out)
        width = torch.arange(longest, device=self.ids.device)
        position = self.start[index].unsqueeze(1) + width  # (B, L)
        inside = width < self.length[index].unsqueeze(1)
        return torch.where(inside, self.ids[position.clamp_max(len(self.ids) - 1)], 0)


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


def pair_sides(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> np.ndarray:
    """(N, 2) int64 token counts of the two texts of N pairs."""
    out = np.empty((len(a), 2), np.int64)
    out[:, 0] = np.fromiter(map(len, a), np.int64, len(a))
    out[:, 1] = np.fromiter(map(len, b), np.int64, len(b))
    return out


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


def model_words(
    tokens: Sequence[tuple[list[str], list[str]]], max_length: int | None
) -> tuple[list[list[str]], list[list[str]], int]:
    """The words of both sides as the model sees them (cut to `max_length`), and how many pairs were cut."""
    a, b, truncated = [], [], 0
    for ta, tb in tokens:
        if max_length and (len(ta) > max_length or len(tb) > max_length):
            truncated += 1
            ta, tb = ta[:max_length], tb[:max_length]
        # An empty side would make the sentence all padding; an OOV word keeps it a (meaningless) one-token text.
        a.append(ta or ["<empty>"])
        b.append(tb or ["<empty>"])
    return a, b, truncated


def to_ids(
    tokens: Sequence[tuple[list[str], list[str]]], vocab: Vocabulary, max_length: int | None
) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Token ids of both sides (cut to `max_length`), and how many pairs were cut."""
    a, b, truncated = model_words(tokens, max_length)
    return [vocab.encode(t) for t in a], [vocab.encode(t) for t in b], truncated


def pad_batch(seqs: Sequence[np.ndarray]) -> torch.Tensor:
    """(B, max length) int64 ids, 0-padded on the right."""
    out = np.zeros((len(seqs), max(len(s) for s in seqs)), dtype=np.int64)
    for row, s in zip(out, seqs, strict=True):
        row[: len(s)] = s
    return torch.from_numpy(out)


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


class BatchTooLargeError(BadExampleError):
    """A pair that alone exceeds the batch budget; the message names it and the settings that fix it."""


@dataclass(frozen=True)
class Budget:
    """What one batch may hold, whatever the input: at most `cells` alignment cells (B · La · Lb, the size of the
    (B, La, Lb) matrices) and at most `tokens` padded tokens (B · (La + Lb), what every activation scales with).
    None leaves a limit out. Batches are cut by these and by a pair count, so one long text cannot inflate its
    batch; a pair that does not fit even alone is an error raised before anything is allocated."""

    cells: int | None = None
    tokens: int | None = None

    def __bool__(self) -> bool:
        return bool(self.cells or self.tokens)

    def fits(self, pairs: int, la: int, lb: int) -> bool:
        return (not self.cells or pairs * la * lb <= self.cells) and (
            not self.tokens or pairs * (la + lb) <= self.tokens
        )

    def long_side(self, batch_size: int) -> int:
        """The longest side with which any `batch_size` pairs fit together."""
        limits = [math.isqrt(self.cells // batch_size)] if self.cells else []
        limits += [self.tokens // (2 * batch_size)] if self.tokens else []
        return min(limits) if limits else sys.maxsize

    def batches(self, order: np.ndarray, sides: np.ndarray, max_pairs: int) -> list[np.ndarray]:
        """Consecutive runs of `order` with at most `max_pairs` pairs that fit. `sides`: (N, 2) lengths."""
        batches, start, top_a, top_b = [], 0, 0, 0
        for k, i in enumerate(order.tolist()):
            la, lb = max(top_a, int(sides[i, 0])), max(top_b, int(sides[i, 1]))
            if k > start and (k - start + 1 > max_pairs or not self.fits(k - start + 1, la, lb)):
                batches.append(order[start:k])
                start, la, lb = k, int(sides[i, 0]), int(sides[i, 1])
            top_a, top_b = la, lb
        if start < len(order):
            batches.append(order[start:])
        return batches

    def check(self, sides: np.ndarray, where: str, lines: Sequence[int] | None = None) -> None:
        """BatchTooLargeError naming the worst pair when a pair alone does not fit."""
        if not self or not len(sides):
            return
        cells = sides[:, 0] * sides[:, 1]
        too_big = np.zeros(len(sides), bool)  # the same test as fits(1, La, Lb), for every pair at once
        if self.cells:
            too_big |= cells > self.cells
        if self.tokens:
            too_big |= sides.sum(1) > self.tokens
        over = np.flatnonzero(too_big)
        if len(over):
            worst = int(over[np.argmax(cells[over])])
            la, lb = int(sides[worst, 0]), int(sides[worst, 1])
            which = f"line {lines[worst]}" if lines is not None and lines[worst] else f"pair {worst + 1}"
            raise BatchTooLargeError(
                f"{where}: {len(over)} pair(s) are too long to align even alone: {which} has {la} x {lb} tokens "
                f"({la * lb:,} alignment cells), over data.batch_cells={self.cells} / data.batch_tokens="
                f"{self.tokens}. Truncate long texts with data.max_length=<tokens>, or raise the budget if memory "
                "allows."
            )


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length: shuffle, sort within chunks of `bucket_batches` batches, shuffle batches.

    With `shuffle=False` the whole split is sorted by length (fast, deterministic evaluation). The order
    depends only on `seed` and the epoch (set by Lightning through `set_epoch`).

    Memory `budget` (with `sides`, the (N, 2) lengths of both texts): every batch fits it, so one long text cannot
    inflate its batch. For training, the pairs with a side longer than `budget.long_side(batch_size)` (512 tokens
    at batch 64 with the defaults, which is `data.max_length`: none then) are set apart once and batched by the
    budget, and the others by count as above: the number of batches is the same every epoch (Lightning reads it
    once) and any `batch_size` of the others fit. Evaluation batches are cut by count and budget.

    Distributed (`num_replicas` > 1): for training, every process takes every `num_replicas`-th batch of the
    same global order, the list padded with its first batches so all processes run the same number of steps.
    For evaluation, whole questions (`groups`) go to one process each and nothing is padded or repeated, so
    every example is scored exactly once and no question is split between processes.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        bucket_batches: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
        groups: np.ndarray | None = None,
        sides: np.ndarray | None = None,
        budget: Budget | None = None,
    ):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be positive, got {batch_size}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} outside 0..{num_replicas - 1}")
        self.lengths, self.batch_size, self.shuffle = lengths, batch_size, shuffle
        self.seed, self.bucket_batches, self.epoch = seed, bucket_batches, 0
        self.num_replicas, self.rank, self.groups = num_replicas, rank, groups
        self.sides, self.budget = sides, budget if (sides is not None and budget) else None
        self.long_batches: list[np.ndarray] = []
        self._eval_cache: list[np.ndarray] | None = None
        self._resume: tuple[int, int] | None = None  # (epoch, batches of it already trained): see resume_at
        self.short = np.arange(len(lengths))
        if self.budget and shuffle:
            limit = self.budget.long_side(batch_size)
            long = (sides[:, 0] > limit) | (sides[:, 1] > limit)
            self.short = np.flatnonzero(~long)
            ordered = np.flatnonzero(long)[np.argsort(lengths[long], kind="stable")]
            self.long_batches = self.budget.batches(ordered, sides, batch_size)

    @property
    def sampler(self) -> BucketBatchSampler:
        """This batch sampler itself: Lightning calls `set_epoch` on a loader's `sampler` and on its
        `batch_sampler.sampler`, never on the batch sampler, so without this every epoch had the first one's order."""
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, batches: int) -> None:
        """The next iteration, if it is of `epoch`, leaves out that epoch's first `batches` batches (those a run
        stopped in the middle of the epoch had trained on): the rest come in the order they would have come."""
        self._resume = (epoch, batches)

    def _eval_indices(self) -> np.ndarray:
        index = np.arange(len(self.lengths))
        if self.num_replicas == 1:
            return index
        owner = index if self.groups is None else np.where(self.groups >= 0, self.groups, index)
        return index[owner % self.num_replicas == self.rank]

    def _eval_batches(self) -> list[np.ndarray]:
        """The evaluation batches: they depend on nothing that changes, so they are cut once (len and iter)."""
        if self._eval_cache is None:
            mine = self._eval_indices()
            order = mine[np.argsort(self.lengths[mine], kind="stable")]
            if self.budget:
                self._eval_cache = self.budget.batches(order, self.sides, self.batch_size)
            else:
                self._eval_cache = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return self._eval_cache

    def __len__(self) -> int:
        if not self.shuffle:
            return len(self._eval_batches())
        total = math.ceil(len(self.short) / self.batch_size) + len(self.long_batches)
        return math.ceil(total / self.num_replicas)

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            for batch in self._eval_batches():
                yield batch.tolist()
            return
        rng = np.random.default_rng([self.seed, self.epoch])
        order = self.short[rng.permutation(len(self.short))]
        chunk = self.batch_size * self.bucket_batches
        batches = []
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches += [part[i : i + self.batch_size] for i in range(0, len(part), self.batch_size)]
        batches += self.long_batches
        batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.num_replicas > 1:
            batches += batches[: (-len(batches)) % self.num_replicas]
            batches = batches[self.rank :: self.num_replicas]
        resume, self._resume = self._resume, None
        if resume is not None and resume[0] == self.epoch:
            batches = batches[resume[1] :]
        for batch in batches:
            yield batch.tolist()


class TrainLoader(DataLoader):
    """The training DataLoader, resumable in the middle of an epoch: Lightning saves its `state_dict` in every
    checkpoint and gives it back to `load_state_dict` when a run resumes, so that a run stopped after k batches of an
    epoch (a scheduler's signal) continues with batch k + 1 of the same order, not with a new pass over the epoch.
    `trained()` is the number of batches of the current epoch that have been trained on (the trainer's count: the
    sampler cannot know it, loader processes fetch ahead)."""

    def __init__(self, *args, trained, **kwargs):
        super().__init__(*args, **kwargs)
        self.trained = trained

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.batch_sampler.epoch, "batches": int(self.trained())}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batch_sampler.resume_at(int(state["epoch"]), int(state["batches"]))


class PadCollator:
    """Gathers a batch of indices from an EncodedSplit and pads both sides to the batch's own maximum; with a
    contextual embedder, adds the word states of both sides (frozen: read from the split's cache) or the encoder's
    inputs (fine-tuned: `a_pieces`, `b_pieces`, run by the model).

    With a `device` (a GPU, in the loading process) the split's ids live there and the batch is gathered there:
    one small copy of the indices per batch instead of one per tensor. `pad_to` rounds the batch's lengths up to a
    multiple (compiled models see fewer shapes).
    """

    def __init__(self, split: EncodedSplit, encoder: ContextualEncoder | None = None, device=None, pad_to: int = 1):
        self.split, self.encoder = split, encoder
        self.device = torch.device(device or "cpu")
        self.pad_to = pad_to

    def __call__(self, indices: list[int]) -> dict[str, Any]:
        s = self.split
        packed = s.packed(self.device)
        host = np.asarray(indices, dtype=np.int64)
        index = torch.from_numpy(host)
        if self.device.type == "cuda":  # from pinned memory: a copy from pageable memory waits for the GPU
            index = index.pin_memory().to(self.device, non_blocking=True)
        if self.device.type == "cpu":  # NumPy's gathers: a microsecond where torch's indexing takes several
            label, group = (torch.from_numpy(t.numpy()[host]) for t in (packed.labels, packed.groups))
        else:
            label, group = packed.labels[index], packed.groups[index]
        batch = {
            "a": packed.a.batch(host, index, self.pad_to),
            "b": packed.b.batch(host, index, self.pad_to),
            "label": label,
            "group": group,
            "index": index,
        }
        if s.states is not None:
            for side, ids, start in (("a", batch["a"], s.states.a_start), ("b", batch["b"], s.states.b_start)):
                states = s.states.gather(start[host], getattr(packed, side).host_length[host].tolist())
                batch[f"{side}_states"] = F.pad(states, (0, 0, 0, ids.shape[1] - states.shape[1]))
        elif self.encoder is not None and s.words is not None:
            batch["a_pieces"] = self.encoder.pieces([s.words[0][i] for i in indices])
            batch["b_pieces"] = self.encoder.pieces([s.words[1][i] for i in indices])
        return batch


def split_prefix(split: str) -> str:
    """Logged-key prefix of a split: dev -> val, dev_mismatched -> val_mismatched, test -> test."""
    return "val" + split[3:] if split.startswith("dev") else split


class PairDataModule(pl.LightningDataModule):
    """Builds every split of a task once (`setup`), with the vocabulary from the training split only.

    Built from the `data` node of the config (`_target_`), with the task and the embedding source given at run
    time.

    Args:
        task: the task (reader, labels, splits, protocol).
        data_dir: root that relative split paths are resolved against.
        cache_dir: where downloads and caches go.
        vocab: an existing vocabulary (evaluation of a trained model); None builds one from `train`.
        vectors: the embedding source; with pretrained vectors, the vocabulary built here also holds every word
            of the other splits read with `train`, and the vectors file's most frequent words, that have a vector.
        cache: keep prepared splits in `cache_dir/corpora`.
        max_length: texts longer than this many tokens are cut (counted and reported); None keeps them whole.
        batch_cells, batch_tokens: the memory Budget of every batch (alignment cells B · La · Lb, padded tokens
            B · (La + Lb)); None leaves a limit out.
        pad_to: round each batch's lengths up to a multiple of this (a compiled model then sees few shapes).
    """

    def __init__(
        self,
        task: Task,
        data_dir: str | os.PathLike,
        cache_dir: str | os.PathLike,
        batch_size: int,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        bucket_batches: int = 50,
        lowercase: bool = True,
        max_length: int | None = None,
        oov_buckets: int = 100,
        seed: int = 0,
        vocab: Vocabulary | None = None,
        on_bad_example: str = "error",
        cache: bool = True,
        vectors: PretrainedVectors | RandomVectors | None = None,
        batch_cells: int | None = 16_777_216,
        batch_tokens: int | None = 65_536,
        pad_to: int = 1,
    ):
        super().__init__()
        self.task, self.data_dir, self.cache_dir = task, data_dir, cache_dir
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or 2 * batch_size
        self.num_workers, self.bucket_batches, self.seed = num_workers, bucket_batches, seed
        self.tokenizer = Tokenizer(lowercase, keep_tokens=task.keep_tokens)
        for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size),
                            ("max_length", max_length), ("batch_cells", batch_cells),
                            ("batch_tokens", batch_tokens), ("pad_to", pad_to)):  # fmt: skip
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"data.{name} must be a positive whole number, got {value!r}")
        if on_bad_example not in ("error", "skip"):
            raise ConfigError(f"data.on_bad_example must be 'error' or 'skip', got {on_bad_example!r}")
        self.max_length, self.oov_buckets = max_length, oov_buckets
        self.budget = Budget(batch_cells, batch_tokens)
        self.pad_to = pad_to
        self.vocab = vocab
        self.on_bad_example = on_bad_example
        self.use_cache = cache
        self.vectors = vectors
        self.contextual: ContextualEncoder | None = vectors if getattr(vectors, "contextual", False) else None
        self.splits: dict[str, EncodedSplit] = {}

    @property
    def labels(self) -> list[str]:
        return self.task.labels

    @property
    def eval_splits(self) -> list[str]:
        return self.task.active_eval_splits

    @property
    def test_splits(self) -> list[str]:
        return self.task.active_test_splits

    def encode_pairs(self, pairs: Sequence[Pair]) -> tuple[list[np.ndarray], list[np.ndarray], int]:
        """Token ids of new pairs, prepared exactly as the training data was (needs the vocabulary), and how many
        pairs had a text cut to `max_length`."""
        a, b, cut, _ = self.prepare_pairs(pairs)
        return a, b, cut

    def prepare_pairs(
        self, pairs: Sequence[Pair]
    ) -> tuple[list[np.ndarray], list[np.ndarray], int, tuple[list[list[str]], list[list[str]]]]:
        """`encode_pairs`, and the words of both sides as the model sees them (what a contextual embedder
        encodes; see `batch_of`)."""
        if self.vocab is None:
            raise RuntimeError("encode_pairs needs a vocabulary: set up the training split or pass vocab=")
        words_a, words_b, cut = model_words(self.tokenize("input", pairs, quiet=True), self.max_length)
        return [self.vocab.encode(t) for t in words_a], [self.vocab.encode(t) for t in words_b], cut, (words_a, words_b)

    def batch_of(
        self, a: Sequence[np.ndarray], b: Sequence[np.ndarray], words: tuple[Sequence, Sequence] | None = None
    ) -> dict[str, torch.Tensor]:
        """A model batch of new pairs (ids from `prepare_pairs`; `words` the matching words, which a contextual
        embedder encodes on the fly)."""
        batch = {"a": pad_batch(a), "b": pad_batch(b)}
        encoder = self.contextual
        if encoder is not None:
            if words is None:
                raise ValueError("a contextual run needs the words of new pairs (see prepare_pairs)")
            if encoder.trainable_layers:  # the model runs the (fine-tuned) encoder itself
                batch["a_pieces"], batch["b_pieces"] = encoder.pieces(words[0]), encoder.pieces(words[1])
            else:
                batch["a_states"], batch["b_states"] = encoder.batch_states(words[0]), encoder.batch_states(words[1])
            encoder.report("input")
        return batch

    def tokenize(self, name: str, pairs: Sequence[Pair], quiet: bool = False) -> list[tuple[list[str], list[str]]]:
        tok = self.tokenizer
        bar = tqdm(
            pairs, desc=f"tokenising {self.task.name} {name}", unit=" pairs", disable=quiet or len(pairs) < 50_000
        )
        tokens = [(tok(p.a), tok(p.b)) for p in bar]
        trim = self.task.trim_a
        if trim is not None:  # e.g. dialogue contexts: keep the most recent turns
            cut = 0
            for i, (ta, tb) in enumerate(tokens):
                kept = trim(ta)
                if len(kept) < len(ta):
                    tokens[i] = (kept, tb)
                    cut += 1
            if not quiet:
                log.info("%s %s: %d first texts trimmed by task.trim_a", self.task.name, name, cut)
        return tokens

    def _needed(self, stage: str | None) -> list[str]:
        """Splits a stage needs: fit reads train and dev, validate dev, test the test splits (None: all)."""
        wanted = ["train"] if self.vocab is None or stage in (None, "fit") else []
        if stage in (None, "fit", "validate"):
            wanted += self.eval_splits
        if stage in (None, "test"):
            wanted += self.test_splits
        return [s for s in dict.fromkeys(wanted) if s not in self.splits]

    def setup(self, stage: str | None = None) -> None:
        self.prepare_splits(self._needed(stage))

    def prepare_splits(self, names: Sequence[str]) -> None:
        """Read, tokenise and encode the named splits (with train first when there is no vocabulary yet)."""
        wanted = [
            s for s in dict.fromkeys((["train"] if self.vocab is None else []) + list(names)) if s not in self.splits
        ]
        if not wanted:
            return
        started = time.perf_counter()
        entry = self._cache_entry(wanted)
        hit = corpus_cache.load(entry) if entry and self._states_cached(wanted) else None
        if hit is not None:
            words, splits = hit
            if self.vocab is None:
                self.vocab = Vocabulary(words, self.oov_buckets)
            self.splits.update({name: EncodedSplit(name, **fields) for name, fields in splits.items()})
            sizes = ", ".join(f"{k} {len(self.splits[k]):,}" for k in wanted)
            log.info("%s loaded from cache in %.1fs: %s pairs (%s)", self.task.name, time.perf_counter() - started,
                     sizes, entry)  # fmt: skip
            self._attach_states(wanted)
            return
        built_vocab = self.vocab is None
        raw = {}
        for name in wanted:
            pairs = read_split(self.task, name, self.data_dir, self.cache_dir)
            if name == "train" and self.task.train_questions == "answered":
                pairs = keep_answered_questions(pairs, self.labels[1], f"{self.task.name} train")
            if not pairs:
                where = resolve_path(self.task.splits[name].path, self.data_dir)
                raise DataFormatError(
                    f"{self.task.name} {name} split is empty: {where} holds no pair with a label (an empty file, or "
                    f"a [start, stop) slice that selects nothing); check task.splits.{name}"
                )
            raw[name] = (pairs, self.tokenize(name, pairs))
        if self.vocab is None:
            self.vocab = self._build_vocabulary(raw)
        for name, (pairs, tokens) in raw.items():
            source = str(resolve_path(self.task.splits[name].path, self.data_dir))
            self.splits[name] = encode_split(
                name, pairs, tokens, self.vocab, self.labels, self.max_length, source, self.on_bad_example
            )
        sizes = ", ".join(f"{k} {len(self.splits[k]):,}" for k in raw)
        log.info("%s ready in %.1fs: %s pairs", self.task.name, time.perf_counter() - started, sizes)

        if entry:
            corpus_cache.save(entry, self.vocab.words if built_vocab else None, {k: self.splits[k] for k in wanted})
        self._attach_states(wanted)

    def _states_key(self, name: str) -> dict[str, Any]:
        """What a split's contextual states depend on besides the encoder: its file, slice and text preparation."""
        split = self.task.splits[name]
        where = resolve_path(split.path, self.data_dir)
        return {
            "task": self.task.name, "split": name, "file": file_stamp(where) or str(where),
            "slice": (split.start, split.stop),
            "train_questions": self.task.train_questions if name == "train" else None,
            "text": [self.tokenizer.lowercase, self.task.text_settings(), self.max_length],
            "labels": self.labels, "on_bad": self.on_bad_example,
        }  # fmt: skip

    def _states_folder(self) -> Path:
        return Path(self.cache_dir if self.cache_dir is not None else "data/cache") / "contextual"

    def _states_cached(self, names: Sequence[str]) -> bool:
        """Whether the splits can come from the corpus cache: yes without a contextual embedder; with a frozen one,
        when their states are cached too (building them needs the words); never with a fine-tuned one."""
        encoder = self.contextual
        if encoder is None:
            return True
        if encoder.trainable_layers:
            return False
        folder = self._states_folder()
        return all(
            cached_states(encoder, self._states_key(n), folder, f"{self.task.name}-{n}", check_only=True) for n in names
        )

    def _attach_states(self, names: Sequence[str]) -> None:
        """Frozen contextual embedder: give each split its cached word states (encoded now where missing) and drop
        its words; otherwise drop the words unless the fine-tuned encoder needs them per batch."""
        encoder = self.contextual
        for name in names:
            split = self.splits[name]
            if encoder is not None and not encoder.trainable_layers and split.states is None:
                key, label = self._states_key(name), f"{self.task.name}-{name}"
                split.states = cached_states(encoder, key, self._states_folder(), label, len(split))
                if split.states is None:
                    split.states = encode_states(encoder, key, self._states_folder(), label, *split.words)
            if encoder is None or not encoder.trainable_layers:
                split.words = None
            else:  # fine-tuned: the model encodes every batch; say now what the windows and pieces will do
                for side in split.words:
                    encoder.pieces.pieces(side)
                encoder.report(f"{self.task.name}-{name}")

    def _build_vocabulary(self, raw: Mapping[str, tuple[Sequence[Pair], list[tuple[list[str], list[str]]]]]):
        vocab = Vocabulary.build((t for ab in raw["train"][1] for t in ab), self.oov_buckets)
        log.info("vocabulary: %d words from the %s training split", len(vocab.words), self.task.name)
        if self.vectors is None:
            return vocab
        others = (w for name, (_, tokens) in raw.items() if name != "train" for ab in tokens for t in ab for w in t)
        extra = self.vectors.extra_words(vocab.words, list(dict.fromkeys(others)))
        return Vocabulary(vocab.words + extra, self.oov_buckets)

    def _cache_entry(self, wanted: list[str]) -> Path | None:
        """Where the prepared `wanted` splits are cached; None when caching is off or a split is not local."""
        if not self.use_cache or self.cache_dir is None:
            return None
        splits = self.task.splits
        stamps = {n: file_stamp(resolve_path(splits[n].path, self.data_dir)) for n in wanted}
        if not all(stamps.values()):
            return None
        key = corpus_cache.cache_key(
            {
                "task": self.task.name,
                "files": stamps,
                "slices": {n: (splits[n].start, splits[n].stop) for n in wanted},
                "train_questions": self.task.train_questions,
                "text": [self.tokenizer.lowercase, self.task.text_settings(), self.max_length],
                "labels": self.labels,
                "on_bad": self.on_bad_example,
                "oov_buckets": self.oov_buckets,
                "pretrained": None if self.vectors is None else self.vectors.identity(),
                "vocab": None if self.vocab is None else hashlib.sha256("\n".join(self.vocab.tokens).encode()).hexdigest(),  # noqa: E501
            }
        )  # fmt: skip
        return Path(self.cache_dir) / "corpora" / f"{self.task.name}-{key}.npz"

    def loader(self, split: str, train: bool = False) -> DataLoader:
        data = self.splits[split]
        size = self.batch_size if train else self.eval_batch_size
        trainer = getattr(self, "trainer", None)
        replicas, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sides = data.sides()
        self.budget.check(sides, f"{self.task.name} {split}")
        sampler = BucketBatchSampler(
            sides.sum(1), size, shuffle=train, seed=self.seed, bucket_batches=self.bucket_batches,
            num_replicas=replicas, rank=rank, groups=data.groups, sides=sides, budget=self.budget,
        )  # fmt: skip
        # Without loader processes, a GPU run keeps the split's ids on the GPU and gathers each batch there.
        device = trainer.strategy.root_device if trainer is not None and self.num_workers == 0 else None
        collate = PadCollator(data, self.contextual, device if device and device.type == "cuda" else None, self.pad_to)
        # A generator of its own for the seed that each iterator draws (for loader processes): drawn from the global
        # one, it would put each epoch's and each evaluation's draw between the dropout masks, so that a run resumed
        # in the middle of an epoch (one iterator more than a run never stopped) would get other masks.
        generator = torch.Generator().manual_seed(self.seed)
        options = {"batch_sampler": sampler, "collate_fn": collate, "num_workers": self.num_workers,
                   "persistent_workers": self.num_workers > 0, "generator": generator}  # fmt: skip
        if train and trainer is not None:
            return TrainLoader(data, trained=lambda: batches_trained(trainer), **options)
        return DataLoader(data, **options)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", train=True)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        # PadCollator gathers a batch on the training device already: a batch whose tensors are all there is used
        # as it is, instead of Lightning walking it and calling .to() on each tensor (~20 µs a step on a CPU).
        if isinstance(batch, dict) and all(isinstance(v, torch.Tensor) and v.device == device for v in batch.values()):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def val_dataloader(self) -> list[DataLoader]:
        return [self.loader(s, train=False) for s in self.eval_splits]

    def test_dataloader(self) -> list[DataLoader]:
        return [self.loader(s, train=False) for s in self.test_splits]
