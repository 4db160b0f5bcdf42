"""Runs: build a run's parts from its config, and load a trained run back from its directory.

`train` builds; `evaluate`, `predict`, `visualize` and `export` load. A run directory holds `config.yaml`
(resolved), `vocab.txt`, `checkpoints/*.ckpt` and `metrics.json`; that is all a trained model needs, offline.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.plugins.io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf

from matching.data.datamodule import PairDataModule, split_prefix
from matching.data.embeddings import PretrainedWords, load_vectors
from matching.data.vocab import Vocabulary
from matching.files import write_atomic
from matching.model import DecomposableAttention
from matching.system import MatchingSystem

log = logging.getLogger(__name__)


def build_datamodule(cfg: DictConfig, vocab: Vocabulary | None = None) -> PairDataModule:
    """The task's data module; without `vocab` it builds the vocabulary (training words, plus every word with a
    pretrained vector among the dev splits and the vectors file's first `embeddings.top_words` words)."""
    task = OmegaConf.to_container(cfg.task, resolve=True)
    d, emb = cfg.data, cfg.embeddings
    pretrained = None
    if vocab is None and emb.kind == "pretrained":
        pretrained = PretrainedWords(emb.path, emb.format, emb.dim, emb.get("top_words", 0))
    return PairDataModule(
        task,
        data_dir=cfg.paths.data_dir,
        cache_dir=cfg.paths.cache_dir,
        batch_size=d.batch_size,
        eval_batch_size=d.eval_batch_size,
        num_workers=d.num_workers,
        bucket_batches=d.bucket_batches,
        lowercase=d.lowercase,
        max_length=d.max_length,
        oov_buckets=d.oov_buckets,
        seed=cfg.seed,
        vocab=vocab,
        on_bad_example=d.get("on_bad_example", "error"),
        use_cache=d.get("cache", True),
        pretrained=pretrained,
    )


def build_embedding_matrix(cfg: DictConfig, vocab: Vocabulary) -> torch.Tensor:
    """Pretrained rows for the vocabulary's words (OOV buckets elsewhere), or random trainable ones."""
    emb = cfg.embeddings
    if emb.kind == "random":
        return torch.from_numpy(vocab.embedding_matrix(None, None, emb.dim, cfg.seed))
    if emb.kind != "pretrained":
        raise ValueError(f"embeddings.kind must be 'pretrained' or 'random', got {emb.kind!r}")
    vectors, found = load_vectors(emb.path, vocab.words, format=emb.format, dim=emb.dim, cache_dir=cfg.paths.cache_dir)
    log.info(
        "pretrained vectors for %d of %d vocabulary words (%.1f%%); the rest, and words outside the vocabulary, "
        "hash to %d OOV vectors",
        found.sum(),
        len(found),
        100 * found.mean() if len(found) else 0.0,
        vocab.oov_buckets,
    )
    return torch.from_numpy(vocab.embedding_matrix(vectors, found, emb.dim, cfg.seed))


def build_model(cfg: DictConfig, vectors: torch.Tensor, num_classes: int) -> DecomposableAttention:
    intra = instantiate(cfg.intra) if cfg.get("intra") else None
    return instantiate(
        cfg.model,
        vectors=vectors,
        num_classes=num_classes,
        aligner=instantiate(cfg.aligner),
        intra_aligner=intra,
    )


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
        raise ValueError(f"loss.class_weights must be null, 'balanced' or a list of {len(dm.labels)} numbers")
    return [float(w) for w in choice]


def build_system(cfg: DictConfig, model: DecomposableAttention, dm: PairDataModule) -> MatchingSystem:
    return MatchingSystem(
        model,
        optimizer=instantiate(cfg.optim),
        labels=dm.labels,
        kind=dm.task["kind"],
        val_prefixes=[split_prefix(s) for s in dm.eval_splits],
        test_prefixes=[split_prefix(s) for s in dm.test_splits],
        task=dm.task["name"],
        class_weights=class_weights(cfg, dm),
    )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer through :func:`matching.files.write_atomic`, so that a run killed while
    saving keeps its previous checkpoint intact instead of a truncated one that breaks `evaluate` or resume."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        write_atomic(path, lambda tmp: torch.save(checkpoint, tmp))


def check_writable(folder: Path) -> None:
    """Fail early, before any work, when outputs cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise RunError(
            f"cannot write to the output directory {folder} ({err.strerror or err}); choose a writable place with "
            f"paths.output_root=<dir> (runs go under it) or hydra.run.dir=<dir>"
        ) from err


class RunError(ValueError):
    """A checkpoint or run directory cannot be used; the message says what is wrong and what to do."""


@dataclass
class TrainedRun:
    run_dir: Path
    checkpoint: Path
    cfg: DictConfig  # the run's saved config with the caller's overrides applied
    vocab: Vocabulary
    model: DecomposableAttention  # weights loaded, in eval mode
    labels: list[str]
    kind: str


def apply_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """`key=value` overrides on a saved config; a key that does not exist is an error listing its siblings."""
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key:
            raise RunError(f"override {item!r} is not of the form key=value (e.g. paths.data_dir=/corpora)")
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        new_split = parent.startswith("task.splits") and parent.count(".") <= 2
        if not isinstance(node, DictConfig) or (leaf not in node and not new_split):
            siblings = sorted(node.keys()) if isinstance(node, DictConfig) else []
            raise RunError(f"unknown config key {key!r}; valid keys at {parent or 'the top level'}: {siblings}")
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))


def parse_cli(argv: Sequence[str], options: dict[str, str | None]) -> tuple[dict[str, str | None], list[str]]:
    """Split `key=value` arguments into the command's own options and overrides of the run config."""
    values, overrides = dict(options), []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            raise RunError(f"argument {arg!r} is not key=value; usage: {' '.join(f'{k}=...' for k in options)}")
        if key in options:
            values[key] = value
        else:
            overrides.append(arg)
    return values, overrides


def run_cli(command: Callable[[list[str]], None], argv: Sequence[str] | None, level: int = logging.WARNING) -> int:
    """The commands' shared entry point: a user error prints one `error:` line and exits with status 2."""
    logging.basicConfig(level=level, format="%(message)s")
    try:
        command(sys.argv[1:] if argv is None else list(argv))
    except (RunError, FileNotFoundError, ValueError) as err:  # DataFormatError and LabelError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def find_run_dir(checkpoint: Path) -> Path:
    for folder in (checkpoint.parent, checkpoint.parent.parent):
        if (folder / "config.yaml").exists():
            return folder
    raise RunError(
        f"no config.yaml beside {checkpoint} or in its parent folder: a checkpoint is used from inside its run "
        f"directory (outputs/runs/<task>/<aligner>/<time>/checkpoints/best.ckpt), which holds config.yaml and vocab.txt"
    )


def load_trained(checkpoint: str | os.PathLike, overrides: list[str] | tuple[str, ...] = ()) -> TrainedRun:
    """Rebuild a trained model from its run directory alone (no vectors file or training data needed)."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        hint = (
            f"; checkpoints there: {sorted(p.name for p in checkpoint.parent.glob('*.ckpt'))}"
            if checkpoint.parent.is_dir()
            else ""
        )
        raise RunError(f"no checkpoint file at {checkpoint}{hint}")
    run_dir = find_run_dir(checkpoint)
    cfg = apply_overrides(OmegaConf.load(run_dir / "config.yaml"), list(overrides))
    vocab_file = run_dir / "vocab.txt"
    if not vocab_file.exists():
        raise RunError(f"{run_dir} has no vocab.txt; the run directory is incomplete (was training interrupted early?)")
    vocab = Vocabulary.load(vocab_file)
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        weights = state["state_dict"]
    except Exception as err:  # truncated file, not a checkpoint, pickle garbage: same advice
        raise RunError(
            f"cannot read checkpoint {checkpoint} ({type(err).__name__}: {err}); the file is corrupt or not a "
            f"checkpoint of matching. Use another one from {checkpoint.parent} (e.g. last.ckpt) or retrain."
        ) from err
    meta = state.get("matching", {})
    labels = list(cfg.task.labels)
    if meta.get("task") not in (None, cfg.task.name):
        raise RunError(
            f"checkpoint {checkpoint} was trained on task {meta['task']!r} but its run config says {cfg.task.name!r}; "
            f"the checkpoint does not belong to this run directory"
        )
    if meta.get("labels") is not None and list(meta["labels"]) != labels:
        raise RunError(
            f"label space mismatch: checkpoint {checkpoint} predicts {meta['labels']} but task.labels is {labels}; "
            f"evaluate with the labels the model was trained on"
        )
    rows = weights.get("model.embedding.weight")
    if rows is None:
        raise RunError(f"checkpoint {checkpoint} holds no DecomposableAttention weights (model.embedding.weight)")
    if rows.shape[0] != len(vocab):
        raise RunError(
            f"vocabulary mismatch: {vocab_file} has {len(vocab)} entries but checkpoint {checkpoint} has "
            f"{rows.shape[0]} embedding rows; the checkpoint and vocab.txt come from different runs"
        )
    try:
        model = build_model(cfg, torch.zeros_like(rows), num_classes=len(labels))
    except (InstantiationException, TypeError, ValueError) as err:  # e.g. an option this version no longer has
        cause = err.__cause__ or err  # Hydra wraps the constructor's own error
        raise RunError(
            f"cannot rebuild the model of {run_dir} from its config.yaml ({cause}); the run was probably made by "
            f"another version of matching. Retrain it, or edit config.yaml to the current options (see conf/aligner/)."
        ) from err
    model.load_state_dict({k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")})
    model.eval()
    return TrainedRun(run_dir, checkpoint, cfg, vocab, model, labels, meta.get("kind", cfg.task.kind))
