"""`matching-evaluate ckpt=<path> [split=dev|test|<split name>] [input=<file>] [out=<file.json>] [overrides]`
(conf/evaluate.yaml).

Rebuilds the model from the run directory beside the checkpoint (saved config and vocabulary; no need to
repeat the training overrides), evaluates it under the run's `trainer` config on the task's dev splits
(`split=dev`, the default), test splits (`split=test`) or one named split, prints a small metrics table and
writes the metrics as JSON (`<run dir>/eval_<split>.json` unless `out=` says otherwise). `input=<file>` evaluates a
labelled file of one's own instead, read as the run read its training data (its format and `task.columns`): the
task's metrics over that file, logged as `input/<metric>` into `<run dir>/eval_<file name>.json`. Any key of the run's
config can be overridden, e.g. `paths.data_dir=/corpora` or `task.splits.test.path=/elsewhere/test.jsonl`.
"""

from __future__ import annotations

import copy
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, open_dict

from matching.cli import command
from matching.errors import MissingFileError, RunError
from matching.files import existing, write_json
from matching.saved.run_folder import find_checkpoint

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from matching.data.tasks import Task
    from matching.model.assembly import TrainedModel

log = logging.getLogger(__name__)


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
    from matching.training.build import evaluation_data
    from matching.training.datamodule import split_prefix
    from matching.training.metrics import TaskMetrics, chance_warnings
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


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """The `evaluate` command on a composed config (conf/evaluate.yaml over the run's saved config)."""
    # Imported here, not at the top: torch and Lightning load only after Hydra has read the arguments, so that
    # a typo is answered in under a second (benchmarks/bench_cli_errors.py).
    from matching.saved.run_folder import load_run

    backend, quantize = str(cfg.get("backend") or "torch"), cfg.get("quantize")
    if backend not in ("torch", "onnx") or quantize not in (None, "int8"):
        raise RunError(f"evaluate takes backend=torch|onnx and quantize=int8 or null, got backend={backend} "
                       f"quantize={quantize}")  # fmt: skip
    if cfg.get("input"):
        run = load_run(find_checkpoint(cfg.ckpt), with_input_split(cfg))
        return evaluate_run(run, INPUT_SPLIT, cfg.out, backend, quantize)
    return evaluate_run(load_run(find_checkpoint(cfg.ckpt), cfg), str(cfg.split), cfg.out, backend, quantize)


#: The split a labelled file of one's own (`evaluate input=<file>`) is evaluated as; its metrics are `input/<name>`.
INPUT_SPLIT = "input"


def with_input_split(cfg: DictConfig) -> DictConfig:
    """The run's config with the file `input=` names as one more split of its task, read by the task's own reader
    (the format and columns the run was trained on). A relative path is taken from the working directory."""
    if str(cfg.split) not in ("dev", INPUT_SPLIT):
        raise RunError(f"give input=<file> or split={cfg.split}, not both: input= evaluates that file alone")
    path = Path(str(cfg.input)).expanduser()
    if existing(path) is None:
        raise MissingFileError(
            f"input={cfg.input}: no such file or folder (looked for {path.absolute()} and its .gz); give a labelled "
            "file of pairs in the format the run was trained on"
        )
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.task.splits[INPUT_SPLIT] = {"path": str(path.absolute()), "start": None, "stop": None}
    return cfg


main = command("evaluate", evaluate, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
