"""A trained model's parts from its config and files, for training and inference alike: the task, the embedding
source, the text pipeline, the model (with its trained weights, checked against the config), and where a saved run
keeps them. Nothing here imports Lightning: training (matching.training.build) adds the data module and the
LightningModule around these parts; inference (matching.inference), export and evaluation use them alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from matching.configs import build
from matching.data.preparation import BATCH_CELLS, BATCH_TOKENS, Budget
from matching.data.tasks import Task
from matching.data.vocab import Tokenizer, Vocabulary
from matching.errors import RunError
from matching.model.decomposable import DecomposableAttention
from matching.model.embeddings import EmbeddingSource
from matching.model.pipeline import TextPipeline


def build_task(node: DictConfig) -> Task:
    """The task its config node (`cfg.task`) describes."""
    task = build(node)
    if not isinstance(task, Task):
        raise RunError(
            f"the task config {node.get('name', '')!r} is not a Task node (_target_: matching.data.tasks.Task); "
            "it was probably saved by an older version of matching: retrain, or start from conf/task/<name>.yaml"
        )
    return task


def build_model(
    cfg: DictConfig, vectors: torch.Tensor, num_classes: int, source: EmbeddingSource | None = None
) -> DecomposableAttention:
    """The model over a vector table (`vectors`) and what the embedding source adds (`source.model_arguments`;
    None: a table of word vectors alone)."""
    intra = instantiate(cfg.intra) if cfg.get("intra") else None
    model = instantiate(
        cfg.model,
        vectors=vectors,
        num_classes=num_classes,
        aligner=instantiate(cfg.aligner),
        intra_aligner=intra,
        **(source.model_arguments() if source is not None else {}),
    )
    # What the source records about itself, saved in checkpoints (MatchingSystem.on_save_checkpoint)
    model.source_record = source.checkpoint_record() if source is not None else None
    return model


def text_pipeline(
    cfg: DictConfig, task: Task, source: EmbeddingSource | None, vocab: Vocabulary | None
) -> TextPipeline:
    """How the run prepares text (`data.lowercase`, `data.max_length`, `data.batch_cells`, `data.batch_tokens`, the
    task's kept tokens and trim), with the vocabulary once there is one."""
    data = cfg.data
    tokenizer = Tokenizer(data.get("lowercase", True), keep_tokens=task.keep_tokens)
    budget = Budget(data.get("batch_cells", BATCH_CELLS), data.get("batch_tokens", BATCH_TOKENS))
    return TextPipeline(task, tokenizer, data.get("max_length"), budget, source, vocab)


@dataclass
class TrainedModel:
    """A trained model, what prepares its input, and where it came from: what every use of a saved model starts
    from (inference's backends, `export`, `evaluate`, `visualize`); built by `trained_model` (from a run folder:
    matching.saved.run_folder.load_run)."""

    model: DecomposableAttention
    task: Task
    source: EmbeddingSource
    text: TextPipeline
    kind: str  # "classify" or "rank"
    cfg: DictConfig  # the config it was built from (a run's saved one, with a command's overrides)
    run_dir: Path  # its run directory or shared folder
    weights_file: Path  # its checkpoint or safetensors file

    @property
    def labels(self) -> list[str]:
        return list(self.task.labels)

    @property
    def vocab(self) -> Vocabulary:
        return self.text.vocab


def trained_model(
    cfg: DictConfig, run_dir: Path, weights_file: Path, vocab: Vocabulary, weights: dict[str, torch.Tensor], meta: dict
) -> TrainedModel:
    """The model of a saved run from its parts, checked against each other: the config, the vocabulary, the
    `weights` (keys `model.*`) and what the checkpoint says about itself (`meta`: task, labels, kind, encoder; see
    MatchingSystem.on_save_checkpoint). `weights_file` names the weights in messages."""
    try:
        task = build_task(cfg.task)
        source = build(cfg.embeddings)
    except (InstantiationException, TypeError) as err:  # e.g. a config key this version no longer has
        raise another_version(run_dir, err) from err
    labels = list(task.labels)
    if meta.get("task") not in (None, task.name):
        raise RunError(
            f"checkpoint {weights_file} was trained on task {meta['task']!r} but its run config says "
            f"{task.name!r}; the checkpoint does not belong to this run directory"
        )
    if meta.get("labels") is not None and list(meta["labels"]) != labels:
        raise RunError(
            f"label space mismatch: checkpoint {weights_file} predicts {meta['labels']} but task.labels is {labels}; "
            f"evaluate with the labels the model was trained on"
        )
    if meta.get("kind") not in (None, task.kind):
        raise RunError(
            f"checkpoint {weights_file} is a {meta['kind']!r} model but task.kind is {task.kind!r}; a model is "
            "evaluated as the kind of task it was trained on"
        )
    rows = weights.get("model.embedding.weight")
    if rows is None:
        raise RunError(f"checkpoint {weights_file} holds no DecomposableAttention weights (model.embedding.weight)")
    mismatch = source.check_trained(weights_file, meta.get("encoder"), rows.shape[0], vocab)
    if mismatch:
        raise RunError(mismatch.replace("vocab.txt", str(run_dir / "vocab.txt"), 1))
    try:
        model = build_model(cfg, torch.zeros_like(rows), num_classes=len(labels), source=source)
    except (InstantiationException, TypeError, ValueError) as err:  # e.g. an option this version no longer has
        raise another_version(run_dir, err) from err
    model.load_state_dict({k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")})
    model.eval()
    source.use_trained(model)
    text = text_pipeline(cfg, task, source, vocab)
    return TrainedModel(model, task, source, text, meta.get("kind", task.kind), cfg, run_dir, weights_file)


def read_checkpoint(checkpoint: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """A checkpoint's weights (the system's state dict) and what it says about itself (`matching`)."""
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        return state["state_dict"], state.get("matching", {})
    except Exception as err:  # truncated file, not a checkpoint, pickle garbage: same advice
        raise RunError(
            f"cannot read checkpoint {checkpoint} ({type(err).__name__}: {err}); the file is corrupt or not a "
            f"checkpoint of matching. Use another one from {checkpoint.parent} (e.g. last.ckpt) or retrain."
        ) from err


def read_vocabulary(run_dir: Path) -> Vocabulary:
    vocab_file = run_dir / "vocab.txt"
    if not vocab_file.exists():
        raise RunError(f"{run_dir} has no vocab.txt; the run directory is incomplete (was training interrupted early?)")
    return Vocabulary.load(vocab_file)


def another_version(run_dir: Path, err: Exception) -> RunError:
    cause = err.__cause__ or err  # Hydra wraps the constructor's own error
    return RunError(
        f"cannot rebuild the model of {run_dir} from its config.yaml ({cause}); the run was probably made by "
        f"another version of matching. Retrain it, or edit config.yaml to the current options (see conf/)."
    )
