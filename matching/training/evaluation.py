"""Evaluating a trained run on a split as its validation did: the same data module, batches, metrics and per-unit
scores, through an evaluation-only MatchingSystem around the trained model (on PyTorch, or on the run's ONNX Runtime
graph). The `evaluate` command (matching/evaluate.py) and a study's test evaluation (matching.studies.protocol) call
`evaluate_run`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from matching.errors import RunError
from matching.files import write_json

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from matching.data.tasks import Task
    from matching.model.assembly import TrainedModel

log = logging.getLogger(__name__)

#: The split a labelled file of one's own (`evaluate input=<file>`) is evaluated as; its metrics are `input/<name>`.
INPUT_SPLIT = "input"


def splits_for(requested: str, task: Task) -> list[str]:
    if requested == INPUT_SPLIT and INPUT_SPLIT in task.named_splits:
        return [INPUT_SPLIT]
    if requested == "dev":
        return task.active_eval_splits
    if requested == "test":
        if not task.active_test_splits:
            raise RunError("this task has no test split with labels (e.g. MNLI); evaluate split=dev instead")
        return task.active_test_splits
    if requested not in task.named_splits:
        valid = ["dev", "test", *[s for s in task.named_splits if s not in ("dev", "test")]]
        raise RunError(f"unknown split {requested!r}; choose one of {valid}")
    return [requested]


def evaluation_trainer(cfg: DictConfig) -> pl.Trainer:
    """The run's own trainer settings (accelerator, precision, determinism), on one device, writing nothing."""
    from hydra.utils import instantiate

    return instantiate(
        cfg.trainer, devices=1, num_nodes=1, strategy="auto", logger=False, enable_checkpointing=False,
        enable_model_summary=False, deterministic=bool(cfg.get("deterministic", False)),
    )  # fmt: skip


def evaluate_run(run: TrainedModel, split: str = "dev", out: str | None = None, backend: str = "torch",
                 quantize: str | None = None) -> dict[str, float]:  # fmt: skip
    """Score the run on `split` as its validation did (the same batches, metrics and per-unit scores), through
    its data module and an evaluation-only LightningModule around the trained model."""
    from matching.data.tasks import split_prefix
    from matching.training.build import evaluation_data
    from matching.training.metrics import TaskMetrics
    from matching.training.question_scores import chance_warnings
    from matching.training.scores import write_recorded
    from matching.training.system import MatchingSystem

    data = evaluation_data(run)
    names = splits_for(split, data.task)
    scorer = onnx_scorer(run, quantize) if backend == "onnx" or quantize else None  # before the splits are read
    data.prepare_splits(names)
    prefixes = [split_prefix(s) for s in names]
    evaluated = TaskMetrics(tuple(run.labels), run.kind, tuple(prefixes), (), positive_label=data.task.positive_label)
    system = MatchingSystem(run.model, None, None, evaluated, compute_dtype=str(run.cfg.get("dtype", "fp32")),
                            scorer=scorer, record_predictions=True)  # fmt: skip
    metrics: dict[str, float] = {}
    loaders = [data.loader(s) for s in names]
    for result in evaluation_trainer(run.cfg).validate(system, dataloaders=loaders, verbose=False):
        metrics |= {k: float(v) for k, v in result.items()}
    # Another backend's scores go beside the run's own (<run>/onnx-int8/scores/), never over them: a study and
    # `report` compare the scores of <run>/scores/, the model's on PyTorch.
    tag = "" if scorer is None else ("onnx-int8" if quantize else "onnx")
    scores = write_recorded(run.run_dir / tag, system.recorded, data, run.labels, run.kind)
    named = Path(data.task.splits[INPUT_SPLIT].path).name.split(".")[0] if split == INPUT_SPLIT else split
    path = Path(out) if out else run.run_dir / f"eval_{named}{'_' + tag if tag else ''}.json"
    record = {
        "checkpoint": str(run.weights_file),
        "split": split,
        **({"input": data.task.splits[INPUT_SPLIT].path} if split == INPUT_SPLIT else {}),
        "pairs": {s: len(data.splits[s]) for s in names},
        "backend": tag or "torch",
        "metrics": metrics,
    }
    positive = system.positive if run.kind == "classify" else None
    if positive is not None:  # what f1, precision, recall, ap and auroc are of
        record["positive_label"] = run.labels[positive]
    write_json(path, record)
    if run.kind == "rank":
        for warning in chance_warnings(data.task.name, system.recorded, metrics):
            log.warning(warning)
    width = max(len(k) for k in metrics)
    print(f"{data.task.name} · {run.weights_file}" + ("" if scorer is None else f" · {record['backend']}"))
    if positive is not None:
        print(f"  (f1, precision, recall, ap, auroc: of the positive label {run.labels[positive]!r})")
    for key in sorted(metrics):
        print(f"  {key:<{width}}  {metrics[key]:.4f}")
    print(f"wrote {path} and the per-{'question' if run.kind == 'rank' else 'example'} scores in {scores[0].parent}")
    return metrics


def onnx_scorer(run: TrainedModel, quantize: str | None):
    """The logits of an evaluation batch from the run's ONNX Runtime graph (float32, or int8 weights): the same
    splits, batches and metrics as the PyTorch evaluation, another backend."""
    import numpy as np
    import torch

    from matching.inference.onnx_backend import OnnxBackend

    if run.source.reads_every_word:
        raise RunError(
            "evaluate backend=onnx takes a model over static word vectors; a contextual run's evaluation batches carry "
            "the encoder's cached word states, which its ONNX graph does not take. Evaluate it with backend=torch, or "
            "score a file with matching-predict backend=onnx"
        )
    # The graph's own runtime, not a Predictor's Backend: evaluation's batches are already made (the ids of the
    # splits as training batches them), so they go straight to the session (OnnxBackend.run).
    backend = OnnxBackend.from_trained(run, device="cpu", threads=0, quantize=quantize)

    def score(batch: dict) -> torch.Tensor:
        a, b = batch["a"].numpy(), batch["b"].numpy()
        tokens = int(np.count_nonzero(a) + np.count_nonzero(b))
        return torch.from_numpy(backend.run({"a": a, "b": b}, tokens))

    return score
