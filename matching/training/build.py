"""A training run's parts built from its config: the data module (and the vocabulary it builds), the training loss
(given the training split's label counts and, to distil, its teacher's logits), the LightningModule instantiated
from the `system` node with the model, loss, optimiser and metrics, and the checkpoint writer; and the data module
of a trained run, which `evaluate` and `visualize` read a split through. The model itself is assembled by
matching.model.assembly, for training and every use of a trained model alike.
"""

from __future__ import annotations

import inspect
import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.plugins.io import TorchCheckpointIO
from omegaconf import DictConfig

from matching.configs import build
from matching.data.negatives import MeanWordVectors, NegativeMiner
from matching.data.pairs import Pair
from matching.data.sources import labels_from_data, resolve_path
from matching.data.tasks import Task, split_prefix
from matching.data.vocab import Vocabulary
from matching.errors import (
    ConfigError,
    RunError,
)
from matching.files import write_atomic
from matching.model.assembly import (
    TrainedModel,
    another_version,
    build_task,
)
from matching.model.decomposable import DecomposableAttention
from matching.model.embeddings import EmbeddingSource, PretrainedVectors, embeddings_choice
from matching.saved.run_folder import find_checkpoint
from matching.training.batching import TrainingBatches
from matching.training.datamodule import DataSettings, PairDataModule
from matching.training.distillation import teacher_logits
from matching.training.losses import Distillation, DistilledLoss, TrainingLoss, compares_candidates, loss_class
from matching.training.metrics import TaskMetrics
from matching.training.replay import StepReplay
from matching.training.system import MatchingSystem

log = logging.getLogger(__name__)


def command_line_overrides() -> list[str]:
    """The overrides the run was started with (Hydra's), or none when the config was not composed by Hydra."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def build_datamodule(cfg: DictConfig, vocab: Vocabulary | None = None, run_dir: Path | None = None) -> PairDataModule:
    """The run's data module, built from its `datamodule` node (conf/train.yaml; a run saved before the node, and a
    shared folder, are given the package's: matching.saved) with what the run decides: how training batches are
    formed (whole queries for a loss that compares a query's candidates; indices for a replayed step) and whether
    batch shapes are compiled. Without `vocab` (a training run) the log says which embeddings it uses, and why.
    `run_dir` (default: `paths.output_dir`, a training run's folder) keeps what a positives-only task mines
    (matching.data.negatives)."""
    capture = bool(cfg.get("capture"))  # checked with the source before (config_checks.check_capture)
    batches = TrainingBatches(whole_queries=compares_candidates(cfg, str(cfg.task.kind)), as_indices=capture)
    if vocab is None:  # a training run: which embeddings, and why (before building them, which may fail)
        log.info(embeddings_choice(cfg.get("choices") or {}, command_line_overrides()))
    return build(cfg.datamodule, vocab=vocab, run_dir=run_dir or cfg.paths.get("output_dir"), training_batches=batches,
                 compiled=bool(cfg.get("compile")) or capture)  # fmt: skip


def pair_data_module(task: DictConfig, data: DictConfig, embeddings: DictConfig, vocab: Vocabulary | None = None,
                     run_dir: str | os.PathLike | None = None, training_batches: TrainingBatches | None = None,
                     compiled: bool = False) -> PairDataModule:  # fmt: skip
    """The data module of a task (`task`, its node), read and batched as `data` says, over the embedding source of
    `embeddings`: what the `datamodule` node builds. Without `vocab` it builds the vocabulary (training words, plus
    every word with a pretrained vector among the dev splits and the vectors file's first `embeddings.top_words`
    words), and the source's files are checked before any corpus is read; a generic task (task=pairs) takes its
    label names from the data. `compiled`: batch lengths are rounded up to a multiple of 8 unless `data.pad_to`
    says otherwise (a compiled model or a replayed step then sees few shapes)."""
    built = build_task(task)
    if not built.labels:  # a generic task (task=pairs): the data's label names (the run keeps them in its config)
        built.labels = labels_from_data(built, data.data_dir, data.cache_dir)
    vectors = build(embeddings)
    if vocab is None:
        vectors.check_available()
    settings = build(data, pad_to=data.get("pad_to") or (8 if compiled else 1))
    miner = negative_miner(built, settings, vectors, run_dir)
    return PairDataModule(built, settings, vectors, vocab, miner, training_batches)


def negative_miner(task: Task, settings: DataSettings, vectors: EmbeddingSource,
                   run_dir: str | os.PathLike | None) -> NegativeMiner | None:  # fmt: skip
    """What completes the splits of a task with `task.negatives` (None for any other task): mined candidates kept in
    `run_dir`, scored as the task says (with a static source's mean word vectors, or a trained run's logits)."""
    if task.negatives is None:
        return None
    lookup = None
    if isinstance(vectors, PretrainedVectors):
        tokenizer = settings.tokenizer(task)
        lookup = MeanWordVectors(vectors, tokenizer, settings.oov_buckets, settings.seed, settings.cache_dir)
    corpus = resolve_path(task.negatives.corpus, settings.data_dir) if task.negatives.corpus else None
    return NegativeMiner(task.negatives, task.labels, corpus, run_dir, lookup, trained_logits, settings.cache_dir)


def trained_logits(path: str) -> Callable[[list[Pair]], np.ndarray]:
    """The (N, 2) logits of pairs under the trained ranking run at `path` (its directory or a checkpoint): how
    `task.negatives.method=ckpt` scores the candidates it mines (matching.data.negatives)."""
    from matching.inference import load

    predictor = load(find_checkpoint(path), backend="torch")
    if predictor.kind != "rank":
        raise ConfigError(f"task.negatives.ckpt={path} is a {predictor.kind} model; mining needs a ranking run")
    return lambda pairs: predictor.logits(pairs, "mining candidates")


def build_loss(cfg: DictConfig, dm: PairDataModule, run_dir: Path) -> TrainingLoss:
    """The run's training loss, built from its `loss` node (conf/loss/) with what it needs from the data (a loss that
    takes `label_counts` is given the training split's pairs per label: `loss.class_weights=balanced`); with a
    teacher (`distill.teacher`), wrapped in DistilledLoss with the teacher's logits of the training pairs (computed
    once, cached: matching.training.distillation), written into `run_dir`."""
    given = {}
    if "label_counts" in inspect.signature(loss_class(cfg.loss)).parameters:
        counts = np.bincount(dm.splits["train"].labels, minlength=len(dm.labels))
        given["label_counts"] = dict(zip(dm.labels, counts.tolist(), strict=True))
    distillation = Distillation.of(cfg, dm.task.kind)
    teacher = None if distillation is None else teacher_logits(cfg, dm, run_dir, list(distillation.teachers))
    loss = build(cfg.loss, **given)
    return loss if distillation is None else DistilledLoss(loss, torch.from_numpy(teacher), distillation)


def task_metrics(dm: PairDataModule) -> TaskMetrics:
    """What a system evaluates on the data module's task: its labels and kind, and its evaluation splits' prefixes."""
    val, test = tuple(split_prefix(s) for s in dm.eval_splits), tuple(split_prefix(s) for s in dm.test_splits)
    return TaskMetrics(tuple(dm.labels), dm.task.kind, val, test, dm.task.name, dm.task.positive_label)


def build_systems(cfg: DictConfig, model: DecomposableAttention, dm: PairDataModule,
                  run_dir: Path) -> tuple[MatchingSystem, MatchingSystem]:  # fmt: skip
    """The run's two LightningModules around `model`, both from its `system` node and computing in its `dtype`: the
    one that trains it (the run's loss, `build_loss`, and the `optim` optimiser; with `capture=true` its steps
    replayed on the training split, set up before) and the one that evaluates its best checkpoint at the end, keeping
    every pair's prediction (no loss, no optimiser), both evaluating on `dm`'s task."""
    metrics, dtype = task_metrics(dm), str(cfg.get("dtype", "fp32"))
    replay = StepReplay(dm.splits["train"], dm.settings.batch_size) if cfg.get("capture") else None
    optimizer = instantiate(cfg.optim)
    loss = build_loss(cfg, dm, run_dir)
    training = build(cfg.system, model=model, loss=loss, optimizer=optimizer, metrics=metrics, compute_dtype=dtype,
                     replay=replay)  # fmt: skip
    evaluation = build(cfg.system, model=model, loss=None, optimizer=None, metrics=metrics, compute_dtype=dtype,
                       record_predictions=True)  # fmt: skip
    return training, evaluation


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer through :func:`matching.files.write_atomic`, so that a run killed while
    saving keeps its previous checkpoint intact instead of a truncated one that breaks `evaluate` or resume."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        write_atomic(path, lambda tmp: torch.save(checkpoint, tmp))


def check_writable(folder: Path) -> None:
    """Fail early, before any work, when outputs cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test.{platform.node()}.{os.getpid()}"  # the nodes of a run share its folder
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise RunError(
            f"cannot write to the output directory {folder} ({err.strerror or err}); choose a writable place with "
            f"paths.output_root=<dir> (runs go under it) or hydra.run.dir=<dir>"
        ) from err


def evaluation_data(trained: TrainedModel) -> PairDataModule:
    """The data module of a trained run (its vocabulary and text preparation; no corpus read yet): what
    evaluating a split or drawing its matrices reads the split through, prepared exactly as in training."""
    try:
        return build_datamodule(trained.cfg, vocab=trained.vocab, run_dir=trained.run_dir)
    except (InstantiationException, TypeError) as err:  # e.g. a config key this version no longer has
        raise another_version(trained.run_dir, err) from err
