"""`python -m matching.evaluate ckpt=<path> [split=dev|test|<split name>] [out=<file.json>] [overrides]`.

Rebuilds the model from the run directory beside the checkpoint (saved config and vocabulary; no need to
repeat the training overrides), evaluates it on the task's dev splits (`split=dev`, the default), test splits
(`split=test`) or one named split, prints a small metrics table and writes the metrics as JSON
(`<run dir>/eval_<split>.json` unless `out=` says otherwise). Any other `key=value` overrides the saved config,
e.g. `paths.data_dir=/corpora` or `task.splits.test.path=/elsewhere/test.jsonl`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import lightning.pytorch as pl

from matching.data.datamodule import split_prefix
from matching.files import write_json
from matching.runs import RunError, build_datamodule, load_trained, parse_cli, run_cli
from matching.system import MatchingSystem

log = logging.getLogger(__name__)


def splits_for(requested: str, task_splits: dict, eval_splits: list[str], test_splits: list[str]) -> list[str]:
    if requested == "dev":
        return eval_splits
    if requested == "test":
        if not test_splits:
            raise RunError("this task has no test split with labels (e.g. MNLI); evaluate split=dev instead")
        return test_splits
    if not task_splits.get(requested):
        valid = ["dev", "test", *[k for k, v in task_splits.items() if v]]
        raise RunError(f"unknown split {requested!r}; choose one of {valid}")
    return [requested]


def evaluate(
    checkpoint: str | os.PathLike, split: str = "dev", overrides: Sequence[str] = (), out: str | None = None
) -> dict[str, float]:
    run = load_trained(checkpoint, tuple(overrides))
    dm = build_datamodule(run.cfg, vocab=run.vocab)
    names = splits_for(split, dict(dm.task["splits"]), dm.eval_splits, dm.test_splits)
    dm.prepare_splits(names)
    prefixes = [split_prefix(s) for s in names]
    system = MatchingSystem(run.model, None, run.labels, kind=run.kind, val_prefixes=prefixes, test_prefixes=())
    trainer = pl.Trainer(
        accelerator="auto", devices=1, logger=False, enable_checkpointing=False, enable_model_summary=False,
        enable_progress_bar=False, deterministic=bool(run.cfg.get("deterministic", False)),
    )  # fmt: skip
    metrics: dict[str, float] = {}
    for result in trainer.validate(system, dataloaders=[dm.loader(s) for s in names], verbose=False):
        metrics |= {k: float(v) for k, v in result.items()}
    path = Path(out) if out else run.run_dir / f"eval_{split}.json"
    record = {
        "checkpoint": str(run.checkpoint),
        "split": split,
        "pairs": {s: len(dm.splits[s]) for s in names},
        "metrics": metrics,
    }
    write_json(path, record)
    width = max(len(k) for k in metrics)
    print(f"{run.cfg.task.name} · {run.checkpoint}")
    for key in sorted(metrics):
        print(f"  {key:<{width}}  {metrics[key]:.4f}")
    print(f"wrote {path}")
    return metrics


def _command(argv: list[str]) -> None:
    options, overrides = parse_cli(argv, {"ckpt": None, "split": "dev", "out": None})
    if not options["ckpt"]:
        raise RunError(
            "missing ckpt=<path to a .ckpt file>, e.g. ckpt=outputs/runs/snli/coda/<time>/checkpoints/best.ckpt"
        )
    evaluate(options["ckpt"], options["split"] or "dev", overrides, options["out"])


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_command, argv, logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
