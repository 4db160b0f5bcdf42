"""Batches: a split packed into flat tensors, the length-bucketed batch sampler
(resumable mid-epoch, distributed), and the collator that gathers and pads a batch."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from matching.data.encoding import EncodedSplit
from matching.data.preparation import Budget
from matching.errors import ConfigError
from matching.model.embeddings import EmbeddingSource

log = logging.getLogger(__name__)


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
        if shuffle:
            self._prepare_training()

    def _prepare_training(self) -> None:
        """What every training epoch's batches are cut from, set once: the long pairs' own batches, by the budget."""
        if self.budget:
            sides, limit = self.sides, self.budget.long_side(self.batch_size)
            long = (sides[:, 0] > limit) | (sides[:, 1] > limit)
            self.short = np.flatnonzero(~long)
            ordered = np.flatnonzero(long)[np.argsort(self.lengths[long], kind="stable")]
            self.long_batches = self.budget.batches(ordered, sides, self.batch_size)

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
        return math.ceil(self._training_batch_count() / self.num_replicas)

    def _training_batch_count(self) -> int:
        return math.ceil(len(self.short) / self.batch_size) + len(self.long_batches)

    def _training_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        """One epoch's training batches, in the order they come (before they are dealt to processes)."""
        order = self.short[rng.permutation(len(self.short))]
        chunk = self.batch_size * self.bucket_batches
        batches = []
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches += [part[i : i + self.batch_size] for i in range(0, len(part), self.batch_size)]
        batches += self.long_batches
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            for batch in self._eval_batches():
                yield batch.tolist()
            return
        batches = self._training_batches(np.random.default_rng([self.seed, self.epoch]))
        if self.num_replicas > 1:
            batches += batches[: (-len(batches)) % self.num_replicas]
            batches = batches[self.rank :: self.num_replicas]
        resume, self._resume = self._resume, None
        if resume is not None and resume[0] == self.epoch:
            batches = batches[resume[1] :]
        for batch in batches:
            yield batch.tolist()


class QueryBatchSampler(BucketBatchSampler):
    """Training batches of whole queries, for the losses that compare a query's candidates (`loss=pairwise` or
    `listwise`, matching.training.losses): every query's candidates come in one batch, never spread over several.

    The queries (`groups`; a pair without one is a query of its own) are sorted by their longest text and packed in
    that order, whole, into batches of at most `batch_size` pairs that fit the memory `budget`; each epoch shuffles
    the order of the batches (seeded by `seed` and the epoch), so their number is the same every epoch. A query with
    more candidates than one batch holds (over `batch_size`, or over the budget with its texts' lengths) is split,
    the one case where a query spans batches: into parts that each hold all of its positives (`labels` == 1) and
    the next share of its negatives in file order, as many as fit; a query whose positives alone leave no room for a
    negative is cut into consecutive runs of its candidates. Both are logged. Resuming and several processes work
    as for BucketBatchSampler."""

    def __init__(self, lengths: np.ndarray, batch_size: int, labels: np.ndarray, groups: np.ndarray, **kwargs):
        self.labels = labels
        super().__init__(lengths, batch_size, shuffle=True, groups=groups, **kwargs)

    def _prepare_training(self) -> None:
        """The packed batches of whole queries (or of a long query's parts), set once."""
        lengths, batch_size, labels, groups = self.lengths, self.batch_size, self.labels, self.groups
        sides = self.sides if self.sides is not None else np.stack([lengths, np.zeros_like(lengths)], 1)
        budget = self.budget or Budget()
        alone = np.flatnonzero(groups < 0)
        grouped = np.flatnonzero(groups >= 0)
        order = grouped[np.argsort(groups[grouped], kind="stable")]
        queries = np.split(order, np.flatnonzero(np.diff(groups[order])) + 1) if len(order) else []
        queries += [alone[i : i + 1] for i in range(len(alone))]
        units, split, cut, unranked = [], 0, 0, 0
        for query in queries:
            positive = labels[query] == 1
            unranked += int(positive.all() or not positive.any())
            parts, how = self._parts(query, positive, sides, budget, batch_size)
            split += how != "whole"
            cut += how == "cut"
            units += parts
        if split:
            log.info(
                "%d of %d training queries have more candidates than one batch holds (data.batch_size=%d, "
                "data.batch_cells / data.batch_tokens): each is split into parts that hold all its positives and a "
                "share of its negatives%s",
                split, len(queries), batch_size,
                f" ({cut} with too many positives for that: cut into runs of candidates)" if cut else "",
            )  # fmt: skip
        if unranked:
            log.info(
                "%d of %d training queries lack a positive or a negative candidate: they add nothing to a pairwise "
                "or listwise loss",
                unranked, len(queries),
            )  # fmt: skip
        longest = np.array([int(sides[u].max()) if len(u) else 0 for u in units])
        packed, batch, top_a, top_b = [], [], 0, 0
        for k in np.argsort(longest, kind="stable").tolist():
            unit = units[k]
            la, lb = max(top_a, int(sides[unit, 0].max())), max(top_b, int(sides[unit, 1].max()))
            pairs = sum(len(u) for u in batch) + len(unit)
            if batch and (pairs > batch_size or not budget.fits(pairs, la, lb)):
                packed.append(np.concatenate(batch))
                batch, la, lb = [], int(sides[unit, 0].max()), int(sides[unit, 1].max())
            batch.append(unit)
            top_a, top_b = la, lb
        if batch:
            packed.append(np.concatenate(batch))
        self.packed = packed

    @staticmethod
    def _parts(query: np.ndarray, positive: np.ndarray, sides: np.ndarray, budget: Budget, batch_size: int):
        """The query whole when it fits one batch, else the parts of the class docstring."""

        def fits(members: np.ndarray) -> bool:
            return len(members) <= batch_size and budget.fits(
                len(members), int(sides[members, 0].max()), int(sides[members, 1].max())
            )

        if fits(query):
            return [query], "whole"
        positives, negatives = query[positive], query[~positive]
        parts, start = [], 0
        if len(negatives) and len(positives) and fits(np.r_[positives, negatives[:1]]):
            while start < len(negatives):
                stop = start + 1
                while stop < len(negatives) and fits(np.r_[positives, negatives[start : stop + 1]]):
                    stop += 1
                parts.append(np.r_[positives, negatives[start:stop]])
                start = stop
            return parts, "split"
        return budget.batches(query, sides, batch_size), "cut"

    def _training_batch_count(self) -> int:
        return len(self.packed)

    def _training_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        return [self.packed[i] for i in rng.permutation(len(self.packed))]


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


def batch_indices(indices: list[int], device: torch.device) -> tuple[np.ndarray, torch.Tensor]:
    """A batch's indices on the host (NumPy) and on `device`: on a GPU copied from pinned memory (a copy from
    pageable memory waits for the GPU)."""
    host = np.asarray(indices, dtype=np.int64)
    index = torch.from_numpy(host)
    if device.type == "cuda":
        index = index.pin_memory().to(device, non_blocking=True)
    return host, index


class PadCollator:
    """Gathers a batch of indices from an EncodedSplit and pads both sides to the batch's own maximum; the
    embedding `source` adds what the model takes besides ids (an encoder's word states or word pieces).

    With a `device` (a GPU, in the loading process) the split's ids live there and the batch is gathered there:
    one small copy of the indices per batch instead of one per tensor. `pad_to` rounds the batch's lengths up to a
    multiple (compiled models see fewer shapes).
    """

    def __init__(self, split: EncodedSplit, source: EmbeddingSource | None = None, device=None, pad_to: int = 1):
        self.split, self.source = split, source
        self.device = torch.device(device or "cpu")
        self.pad_to = pad_to

    def __call__(self, indices: list[int]) -> dict[str, Any]:
        s = self.split
        packed = s.packed(self.device)
        host, index = batch_indices(indices, self.device)
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
        if self.source is not None:
            self.source.collate(s, indices, host, batch)
        return batch


class IndexCollator:
    """A training batch of the replayed step (`capture=true`, matching.training.replay): the pairs' indices on the
    training device (one copy from pinned memory) and both sides' widths, the batch's longest text rounded up to a
    multiple of `pad_to`, read from the lengths on the host; the step gathers the ids itself (PackedSplit.gather)."""

    def __init__(self, split: EncodedSplit, device=None, pad_to: int = 1):
        self.split, self.pad_to = split, pad_to
        self.device = torch.device(device or "cpu")

    def __call__(self, indices: list[int]) -> dict[str, Any]:
        packed = self.split.packed("cpu")
        host, index = batch_indices(indices, self.device)
        return {"index": index, "widths": (packed.a.width(host, self.pad_to), packed.b.width(host, self.pad_to))}


@dataclass(frozen=True)
class TrainingBatches:
    """How a run's training batches are formed, which the training side decides and the data module follows:

    - `whole_queries`: every query's candidates in one batch (QueryBatchSampler), for the losses that compare them
      (`loss=pairwise` or `listwise`); else pairs of similar length (BucketBatchSampler, shuffled);
    - `as_indices`: batches are the pairs' indices and padded widths (IndexCollator), gathered inside the replayed
      training step (`capture=true`, matching.training.replay); else padded ids (PadCollator).

    Evaluation batches are the same whatever these are."""

    whole_queries: bool = False
    as_indices: bool = False

    def sampler(self, split: EncodedSplit, sides: np.ndarray, batch_size: int,
                options: dict[str, Any]) -> BucketBatchSampler:  # fmt: skip
        """The sampler of the training split `split` (`sides`: its pairs' lengths; `options`: the sampler's others)."""
        if self.whole_queries:
            match = (split.labels == 1).astype(int)  # label 1 is the match of a ranking task
            return QueryBatchSampler(sides.sum(1), batch_size, labels=match, groups=split.groups, **options)
        return BucketBatchSampler(sides.sum(1), batch_size, shuffle=True, groups=split.groups, **options)

    def collator(self, split: EncodedSplit, source: EmbeddingSource | None, device,
                 pad_to: int) -> PadCollator | IndexCollator:  # fmt: skip
        """What turns the training split's batches of indices into what a training step takes."""
        return IndexCollator(split, device, pad_to) if self.as_indices else PadCollator(split, source, device, pad_to)
