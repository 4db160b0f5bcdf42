"""Runs: build a run's parts from its config, and load a trained run back from its directory.

`train` builds; `evaluate`, `predict`, `visualize` and `export` load. A run directory holds `config.yaml`
(resolved), `vocab.txt`, `checkpoints/*.ckpt` and `metrics.json`; that is all a trained model needs, offline.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.plugins.io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf, open_dict

from matching.configs import build
from matching.data.pairs import Pair
from matching.data.pipeline import PreparedPairs, TextPipeline
from matching.data.sources import labels_from_data
from matching.data.tasks import Task
from matching.data.vocab import Vocabulary
from matching.errors import (
    ConfigError,
    RunError,  # noqa: F401  (imported from here by the commands and tests, as before)
)
from matching.files import write_atomic
from matching.model.assembly import (
    another_version,
    build_model,  # noqa: F401  (training's model, built from the parts inference uses)
    build_task,
    read_checkpoint,
    read_vocabulary,
    trained_model,
)
from matching.model.decomposable import DecomposableAttention, MatchOutput
from matching.model.embeddings import EmbeddingSource, embeddings_choice
from matching.saved.run_folder import check_checkpoint, find_checkpoint, find_run_dir
from matching.training.datamodule import PairDataModule, split_prefix
from matching.training.losses import distill_settings
from matching.training.system import MatchingSystem

log = logging.getLogger(__name__)


def command_line_overrides() -> list[str]:
    """The overrides the run was started with (Hydra's), or none when the config was not composed by Hydra."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def build_datamodule(cfg: DictConfig, vocab: Vocabulary | None = None, run_dir: Path | None = None) -> PairDataModule:
    """The task's data module with its embedding source; without `vocab` it builds the vocabulary (training words,
    plus every word with a pretrained vector among the dev splits and the vectors file's first
    `embeddings.top_words` words), and the source's files are checked before any corpus is read. `run_dir` (default:
    `paths.output_dir`, a training run's folder) keeps what a positives-only task mines
    (matching.training.negatives)."""
    task = build_task(cfg)
    if not task.labels:  # a generic task (task=pairs): the data's label names, kept in the config the run saves
        task.labels = labels_from_data(task, cfg.paths.data_dir, cfg.paths.cache_dir)
        with open_dict(cfg):
            cfg.task.labels = list(task.labels)
    if vocab is None:  # a training run: which embeddings, and why (before building them, which may fail)
        log.info(embeddings_choice(cfg.get("choices") or {}, command_line_overrides()))
    vectors = build(cfg.embeddings)
    if vocab is None:
        vectors.check_available()
    pad_to = cfg.data.get("pad_to") or (8 if cfg.get("compile") else 1)
    distill = distill_settings(cfg, task.kind)
    # the ranking losses (and distillation's margin_mse and listwise_kl) compare the candidates of a query
    whole_queries = loss_kind(cfg) != "pointwise" or (distill is not None and distill["loss"] != "kl")
    run_dir = run_dir or cfg.paths.get("output_dir")
    return build(cfg.data, task=task, vocab=vocab, vectors=vectors, pad_to=pad_to, whole_queries=whole_queries,
                 run_dir=run_dir, trained_logits=trained_logits)  # fmt: skip


def trained_logits(path: str) -> Callable[[list[Pair]], np.ndarray]:
    """The (N, 2) logits of pairs under the trained ranking run at `path` (its directory or a checkpoint): how
    `task.negatives.method=ckpt` scores the candidates it mines (matching.training.negatives)."""
    run = load_trained(find_checkpoint(path))
    if run.data.task.kind != "rank":
        raise ConfigError(f"task.negatives.ckpt={path} is a {run.data.task.kind} model; mining needs a ranking run")
    return lambda pairs: run.logits(pairs, "mining candidates").numpy()


def class_weights(cfg: DictConfig, dm: PairDataModule) -> list[float] | None:
    """`loss.class_weights`: null (plain cross-entropy), "balanced" (n / (classes · count of the class) over the
    training split, as in scikit-learn) or one weight per label."""
    choice = cfg.get("loss", {}).get("class_weights")
    if choice is None:
        return None
    if choice == "balanced":
        counts = np.bincount(dm.splits["train"].labels, minlength=len(dm.labels)).astype(float)
        weights = (counts.sum() / (len(counts) * np.maximum(counts, 1))).tolist()
        log.info("class weights (balanced over the training split): %s", dict(zip(dm.labels, weights, strict=True)))
        return weights
    if isinstance(choice, str):
        raise ConfigError(f"loss.class_weights must be null, 'balanced' or a list of {len(dm.labels)} numbers")
    return [float(w) for w in choice]


def build_system(cfg: DictConfig, model: DecomposableAttention, dm: PairDataModule) -> MatchingSystem:
    return MatchingSystem(
        model,
        optimizer=instantiate(cfg.optim),
        labels=dm.labels,
        kind=dm.task.kind,
        val_prefixes=[split_prefix(s) for s in dm.eval_splits],
        test_prefixes=[split_prefix(s) for s in dm.test_splits],
        task=dm.task.name,
        class_weights=class_weights(cfg, dm),
        compute_dtype=cfg.get("dtype", "fp32"),
        positive_label=dm.task.positive_label,
        loss_kind=loss_kind(cfg),
        margin=float(cfg.get("loss", {}).get("margin", 1.0)),
        distill=distill_settings(cfg, dm.task.kind),
    )


def loss_kind(cfg: DictConfig) -> str:
    """`loss.kind`: pointwise (the default, and what a run saved before ranking losses trained with) | pairwise |
    listwise."""
    return str(cfg.get("loss", {}).get("kind") or "pointwise")


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


@dataclass
class TrainedRun:
    """A trained model with everything needed to use it: the run's config, its data module (vocabulary and text
    preparation, no corpus read yet) and an evaluation-only MatchingSystem in eval mode."""

    run_dir: Path
    checkpoint: Path
    cfg: DictConfig  # the run's saved config, with the caller's overrides applied
    data: PairDataModule
    system: MatchingSystem
    truncated: int = 0  # new pairs cut to data.max_length by `logits`

    @property
    def vocab(self) -> Vocabulary:
        return self.data.vocab

    @property
    def model(self) -> DecomposableAttention:
        return self.system.model

    @property
    def labels(self) -> list[str]:
        return self.system.labels

    @property
    def kind(self) -> str:
        return self.system.kind

    @property
    def task(self) -> Task:
        return self.data.task

    @property
    def columns(self) -> dict[str, str | None]:
        """The columns the run read its pairs from (`task.columns`: a, b, label, group; empty for a benchmark, whose
        reader knows its format): what new pairs are read by first (matching.data.tables.read_new_pairs)."""
        columns = self.cfg.task.get("columns") or {}
        return {k: None if v is None else str(v) for k, v in columns.items()}

    @property
    def text(self) -> TextPipeline:
        """How the run prepares a pair: tokens, words, ids and batches (matching.data.pipeline)."""
        return self.data.text

    @property
    def source(self) -> EmbeddingSource:
        return self.data.vectors

    def batch(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        """New pairs as one model batch, prepared exactly as the training data was."""
        prepared = self.text.prepare(pairs)
        self.text.check(prepared, "input")
        return self.text.batch(prepared)

    def logits(self, pairs: Sequence[Pair], source: str = "input") -> torch.Tensor:
        """(N, C) float32 logits of new pairs, in their order (see `logits_of`)."""
        return self.logits_of(self.text.prepare(pairs), source)

    @torch.inference_mode()
    def logits_of(self, prepared: PreparedPairs, source: str = "input") -> torch.Tensor:
        """(N, C) float32 logits of prepared pairs, in their order. The pairs are run in batches of similar length
        that fit the run's memory budget (`data.batch_cells`, `data.batch_tokens`), so one long text cannot inflate
        a batch; a pair too long to fit alone is an error naming its line, raised before anything is allocated.
        `self.truncated` counts the pairs cut to `data.max_length`."""
        self.truncated += prepared.cut
        self.text.check(prepared, source)
        out = torch.empty(len(prepared), len(self.labels))
        for index, batch in self.text.batches(prepared):
            out[torch.from_numpy(index)] = self.predict(batch).logits.float().cpu()
        return out

    @torch.inference_mode()
    def predict(self, batch: dict[str, torch.Tensor]) -> MatchOutput:
        """The one inference path of every command: MatchingSystem.predict_step (on the model's device)."""
        device = self.system.device
        if device.type != "cpu":  # nested too: a fine-tuned encoder's word pieces are dicts of tensors
            batch = move_data_to_device(batch, device)
        return self.system.predict_step(batch, 0)


def load_trained(checkpoint: str | os.PathLike, cfg: DictConfig | None = None) -> TrainedRun:
    """Rebuild a trained run from its directory alone (no vectors file or training data needed). `cfg` is the
    run's config as a command composed it (the saved one with the command line's overrides); None reads the
    saved one as it is."""
    checkpoint = check_checkpoint(checkpoint)
    run_dir = find_run_dir(checkpoint)
    cfg = OmegaConf.load(run_dir / "config.yaml") if cfg is None else cfg
    vocab = read_vocabulary(run_dir)
    weights, meta = read_checkpoint(checkpoint)
    return assemble_run(run_dir, checkpoint, cfg, vocab, weights, meta)


def assemble_run(
    run_dir: Path, checkpoint: Path, cfg: DictConfig, vocab: Vocabulary, weights: dict[str, torch.Tensor], meta: dict
) -> TrainedRun:
    """A TrainedRun from its parts (matching.model.assembly.trained_model checks them against each other), with the data
    module and an evaluation-only MatchingSystem around the model: what evaluating a split and exporting need."""
    trained = trained_model(cfg, run_dir, checkpoint, vocab, weights, meta)
    try:
        data = build_datamodule(cfg, vocab=vocab, run_dir=run_dir)
    except (InstantiationException, TypeError) as err:  # e.g. a config key this version no longer has
        raise another_version(run_dir, err) from err
    system = MatchingSystem(trained.model, None, data.labels, kind=trained.kind, task=data.task.name,
                            val_prefixes=(), test_prefixes=(), compute_dtype=cfg.get("dtype", "fp32"),
                            positive_label=data.task.positive_label)  # fmt: skip
    system.eval()
    return TrainedRun(run_dir, checkpoint, cfg, data, system)
