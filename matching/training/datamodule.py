"""PairDataModule: read → tokenise → vocabulary → ids → length-bucketed, per-batch-padded batches.

The vocabulary holds the training split's words and, with pretrained vectors, every other word that has a vector
(see `matching.model.embeddings.PretrainedVectors`); any other word hashes to an OOV bucket.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from matching.data import cache as corpus_cache
from matching.data.encoding import EncodedSplit, encode_split, keep_answered_questions
from matching.data.negatives import NegativeMiner
from matching.data.pairs import Pair
from matching.data.preparation import BATCH_CELLS, BATCH_TOKENS, Budget
from matching.data.sources import read_split, resolve_path
from matching.data.tasks import Task
from matching.data.vocab import Tokenizer, Vocabulary
from matching.errors import ConfigError, DataFormatError
from matching.model.embeddings import EmbeddingSource
from matching.model.pipeline import TextPipeline
from matching.training.batching import BucketBatchSampler, PadCollator, TrainingBatches, TrainLoader
from matching.training.callbacks import batches_trained

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSettings:
    """How a run reads and batches its pairs: the `data` node of its config (`_target_`), checked once here.

    Args:
        data_dir: root that relative split paths are resolved against.
        cache_dir: where downloads and caches go.
        batch_size, eval_batch_size: pairs per training batch, and per evaluation batch (None: twice batch_size).
        num_workers: loader processes (0: batches are made in the training process).
        bucket_batches: pairs are sorted by length within chunks of this many batches.
        lowercase: the tokeniser lower-cases text.
        max_length: texts longer than this many tokens are cut (counted and reported); None keeps them whole.
        oov_buckets: words out of the vocabulary hash to one of this many vectors.
        seed: the seed of batch order (and of loader processes).
        on_bad_example: a pair with an unknown label or an empty text: 'error' (with file and line) or 'skip'.
        cache: keep prepared splits in `cache_dir/corpora`.
        batch_cells, batch_tokens: the memory Budget of every batch (alignment cells B · La · Lb, padded tokens
            B · (La + Lb)); None leaves a limit out.
        pad_to: round each batch's lengths up to a multiple of this (a compiled model then sees few shapes).
    """

    data_dir: str | os.PathLike
    cache_dir: str | os.PathLike | None
    batch_size: int
    eval_batch_size: int | None = None
    num_workers: int = 0
    bucket_batches: int = 50
    lowercase: bool = True
    max_length: int | None = None
    oov_buckets: int = 100
    seed: int = 0
    on_bad_example: str = "error"
    cache: bool = True
    batch_cells: int | None = BATCH_CELLS
    batch_tokens: int | None = BATCH_TOKENS
    pad_to: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_size", "eval_batch_size", "max_length", "batch_cells", "batch_tokens", "pad_to"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"data.{name} must be a positive whole number, got {value!r}")
        if self.on_bad_example not in ("error", "skip"):
            raise ConfigError(f"data.on_bad_example must be 'error' or 'skip', got {self.on_bad_example!r}")
        if self.eval_batch_size is None:
            object.__setattr__(self, "eval_batch_size", 2 * self.batch_size)

    @property
    def budget(self) -> Budget:
        return Budget(self.batch_cells, self.batch_tokens)

    def tokenizer(self, task: Task) -> Tokenizer:
        """The tokeniser of the task's texts under these settings."""
        return Tokenizer(self.lowercase, keep_tokens=task.keep_tokens)


class PairDataModule(pl.LightningDataModule):
    """Builds every split of a task once (`setup`), with the vocabulary from the training split only.

    Args:
        task: the task (reader, labels, splits, protocol).
        settings: how pairs are read and batched (the config's `data` node).
        vectors: the embedding source; with pretrained vectors, the vocabulary built here also holds every word
            of the other splits read with `train`, and the vectors file's most frequent words, that have a vector.
        vocab: an existing vocabulary (evaluation of a trained model); None builds one from `train`.
        miner: completes the splits of a task with `task.negatives` (matching.data.negatives); None for the others.
        training_batches: how training batches are formed (whole queries; indices for a replayed step), which the
            training side decides (matching.training.batching.TrainingBatches).
    """

    def __init__(self, task: Task, settings: DataSettings, vectors: EmbeddingSource | None = None,
                 vocab: Vocabulary | None = None, miner: NegativeMiner | None = None,
                 training_batches: TrainingBatches | None = None):  # fmt: skip
        super().__init__()
        self.task, self.settings, self.vectors, self.miner = task, settings, vectors, miner
        self.training_batches = training_batches or TrainingBatches()
        self.builds_vocabulary = vocab is None  # a training run's, from its splits and its source
        self.text = TextPipeline(task, settings.tokenizer(task), settings.max_length, settings.budget, vectors, vocab)
        self.splits: dict[str, EncodedSplit] = {}

    @property
    def vocab(self) -> Vocabulary | None:
        return self.text.vocab

    @property
    def tokenizer(self) -> Tokenizer:
        return self.text.tokenizer

    @property
    def max_length(self) -> int | None:
        return self.text.max_length

    @property
    def budget(self) -> Budget:
        return self.text.budget

    @property
    def labels(self) -> list[str]:
        return self.task.labels

    @property
    def eval_splits(self) -> list[str]:
        return self.task.active_eval_splits

    @property
    def test_splits(self) -> list[str]:
        return self.task.active_test_splits

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
        hit = corpus_cache.load(entry) if entry and self._cached_by_source(wanted) else None
        if hit is not None:
            words, splits = hit
            if self.vocab is None:
                self.text.adopt_vocabulary(Vocabulary(words, self.settings.oov_buckets))
            self.splits.update({name: EncodedSplit(name, **fields) for name, fields in splits.items()})
            sizes = ", ".join(f"{k} {len(self.splits[k]):,}" for k in wanted)
            log.info("%s loaded from cache in %.1fs: %s pairs (%s)", self.task.name, time.perf_counter() - started,
                     sizes, entry)  # fmt: skip
            self._attach_source(wanted)
            return
        built_vocab = self.vocab is None
        raw = {}
        for name in wanted:
            pairs = self.read_pairs(name)
            if name == "train" and self.task.train_questions == "answered":
                pairs = keep_answered_questions(pairs, self.labels[1], f"{self.task.name} train")
            if not pairs:
                where = resolve_path(self.task.splits[name].path, self.settings.data_dir)
                raise DataFormatError(
                    f"{self.task.name} {name} split is empty: {where} holds no pair with a label (an empty file, or "
                    f"a [start, stop) slice that selects nothing); check task.splits.{name}"
                )
            raw[name] = (pairs, self.text.tokenize(name, pairs))
        if self.vocab is None:
            self.text.adopt_vocabulary(self._build_vocabulary(raw))
        for name, (pairs, tokens) in raw.items():
            source = str(resolve_path(self.task.splits[name].path, self.settings.data_dir))
            self.splits[name] = encode_split(
                name, pairs, tokens, self.vocab, self.labels, self.max_length, source, self.settings.on_bad_example
            )
        sizes = ", ".join(f"{k} {len(self.splits[k]):,}" for k in raw)
        log.info("%s ready in %.1fs: %s pairs", self.task.name, time.perf_counter() - started, sizes)

        if entry:
            corpus_cache.save(entry, self.vocab.words if built_vocab else None, {k: self.splits[k] for k in wanted})
        self._attach_source(wanted)

    def read_pairs(self, name: str) -> list[Pair]:
        """A split's pairs as the run sees them: read, then completed with the negatives of `task.negatives`."""
        pairs = read_split(self.task, name, self.settings.data_dir, self.settings.cache_dir)
        if self.miner is not None:
            pairs = self.miner.complete(name, pairs, self.split_key(name))
        return pairs

    def split_key(self, name: str) -> dict[str, Any]:
        """What a split's preparation depends on besides the source: its file, slice and text preparation (the key
        of what an embedding source caches for it)."""
        split = self.task.splits[name]
        where = resolve_path(split.path, self.settings.data_dir)
        return {
            # the split's name only where it changes the pairs (mined negatives: train's k or eval_k); else two
            # splits of one file share what is cached for it (`evaluate input=<the dev file>` reuses dev's states)
            "task": self.task.name, "split": name if self.miner is not None else None,
            # by content (a copy finds it too); a split read from the hub by its name
            "file": corpus_cache.file_content(where, self.settings.cache_dir) or str(where),
            "slice": (split.start, split.stop),
            "train_questions": self.task.train_questions if name == "train" else None,
            "text": [self.tokenizer.lowercase, self.task.text_settings(), self.max_length],
            "labels": self.labels, "on_bad": self.settings.on_bad_example,
        } | self._negatives_key()  # fmt: skip

    def _negatives_key(self) -> dict[str, Any]:
        """What mined negatives depend on (in the cache keys only when there are some: older keys stay valid)."""
        return (
            {"negatives": self.task.negatives.identity(self.miner.corpus, self.settings.cache_dir)}
            if self.miner is not None
            else {}
        )

    def _source_cache(self) -> Path:
        return Path(self.settings.cache_dir if self.settings.cache_dir is not None else "data/cache")

    def _cached_by_source(self, names: Sequence[str]) -> bool:
        """Whether the splits can come from the corpus cache, as far as the embedding source is concerned."""
        if self.vectors is None:
            return True
        return self.vectors.caches_with_corpus(self._source_keys(names), self._source_cache())

    def _attach_source(self, names: Sequence[str]) -> None:
        """Give each split what its batches need from the embedding source (a table: nothing but the ids)."""
        splits = {f"{self.task.name}-{n}": self.splits[n] for n in names}
        if self.vectors is None:
            for split in splits.values():
                split.words_taken()
            return
        self.vectors.attach(splits, self._source_keys(names), self._source_cache())

    def _source_keys(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Each split's key (`split_key`) under the label the source caches it by: `<task>-<split>`."""
        return {f"{self.task.name}-{n}": self.split_key(n) for n in names}

    def _build_vocabulary(self, raw: Mapping[str, tuple[Sequence[Pair], list[tuple[list[str], list[str]]]]]):
        vocab = Vocabulary.build((t for ab in raw["train"][1] for t in ab), self.settings.oov_buckets)
        log.info("vocabulary: %d words from the %s training split", len(vocab.words), self.task.name)
        if self.vectors is None:
            return vocab
        others = (w for name, (_, tokens) in raw.items() if name != "train" for ab in tokens for t in ab for w in t)
        extra = self.vectors.extra_words(vocab.words, list(dict.fromkeys(others)))
        return Vocabulary(vocab.words + extra, self.settings.oov_buckets)

    def _cache_entry(self, wanted: list[str]) -> Path | None:
        """Where the prepared `wanted` splits are cached; None when caching is off or a split is not local, and for a
        task with mined negatives: each run keeps (or mines) its own lists in its folder and logs what they are, which
        a run whose splits came from the shared cache would not."""
        if not self.settings.cache or self.settings.cache_dir is None or self.miner is not None:
            return None
        splits = {n: self.split_key(n) for n in wanted}
        if not all(isinstance(key["file"], dict) for key in splits.values()):  # by content: local files only
            return None
        vectors = self.vectors if self.builds_vocabulary else None  # the words they add are the vocabulary's
        cache_dir = self.settings.cache_dir
        vocab = None if self.vocab is None else hashlib.sha256("\n".join(self.vocab.tokens).encode()).hexdigest()
        key = corpus_cache.cache_key(
            {"splits": splits, "oov_buckets": self.settings.oov_buckets, "vocab": vocab,
             "pretrained": corpus_cache.by_content(vectors.identity(), cache_dir) if vectors else None}
        )  # fmt: skip
        return Path(self.settings.cache_dir) / "corpora" / f"{self.task.name}-{key}.npz"

    def loader(self, split: str, train: bool = False) -> DataLoader:
        data = self.splits[split]
        size = self.settings.batch_size if train else self.settings.eval_batch_size
        trainer = getattr(self, "trainer", None)
        replicas, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sides = data.sides()
        self.budget.check(sides, f"{self.task.name} {split}")
        options = {"seed": self.settings.seed, "bucket_batches": self.settings.bucket_batches,
                   "num_replicas": replicas, "rank": rank, "sides": sides, "budget": self.budget}  # fmt: skip
        if train:
            sampler = self.training_batches.sampler(data, sides, size, options)
        else:
            sampler = BucketBatchSampler(sides.sum(1), size, shuffle=False, groups=data.groups, **options)
        # Without loader processes, a GPU run keeps the split's ids on the GPU and gathers each batch there.
        device = trainer.strategy.root_device if trainer is not None and self.settings.num_workers == 0 else None
        device = device if device and device.type == "cuda" else None
        if train:
            collate = self.training_batches.collator(data, self.vectors, device, self.settings.pad_to)
        else:
            collate = PadCollator(data, self.vectors, device, self.settings.pad_to)
        # A generator of its own for the seed that each iterator draws (for loader processes): drawn from the global
        # one, it would put each epoch's and each evaluation's draw between the dropout masks, so that a run resumed
        # in the middle of an epoch (one iterator more than a run never stopped) would get other masks.
        generator = torch.Generator().manual_seed(self.settings.seed)
        options = {"batch_sampler": sampler, "collate_fn": collate, "num_workers": self.settings.num_workers,
                   "persistent_workers": self.settings.num_workers > 0, "generator": generator}  # fmt: skip
        if train and trainer is not None:
            return TrainLoader(data, trained=lambda: batches_trained(trainer), **options)
        return DataLoader(data, **options)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", train=True)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        # PadCollator gathers a batch on the training device already: a batch whose tensors are all there is used
        # as it is, instead of Lightning walking it and calling .to() on each tensor (~20 µs a step on a CPU).
        if isinstance(batch, dict) and all(
            v.device == device if isinstance(v, torch.Tensor) else isinstance(v, tuple) for v in batch.values()
        ):  # an IndexCollator's batch carries its widths, a tuple
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def val_dataloader(self) -> list[DataLoader]:
        return [self.loader(s, train=False) for s in self.eval_splits]

    def test_dataloader(self) -> list[DataLoader]:
        return [self.loader(s, train=False) for s in self.test_splits]
