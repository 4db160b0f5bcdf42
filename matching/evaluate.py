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
import sys
from pathlib import Path

from omegaconf import DictConfig, open_dict

from matching.cli import command
from matching.errors import MissingFileError, RunError
from matching.files import existing
from matching.saved.run_folder import find_checkpoint
from matching.training.evaluation import INPUT_SPLIT, evaluate_run


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """The `evaluate` command on a composed config (conf/evaluate.yaml over the run's saved config)."""
    # Imported here, not at the top: torch and Lightning load only after Hydra has read the arguments, so that
    # a typo is answered in under a second (benchmarks/bench_cli_errors.py).
    from matching.saved.run_folder import load_run

    backend, quantize = str(cfg.get("backend") or "torch"), cfg.get("quantize")
    if backend not in ("torch", "onnx") or quantize not in (None, "int8"):
        raise RunError(f"evaluate takes backend=torch|onnx and quantize=int8 or null, got backend={backend} "
                       f"quantize={quantize}")  # fmt: skip
    checkpoint = run_checkpoint(str(cfg.ckpt))
    if cfg.get("input"):
        run = load_run(checkpoint, with_input_split(cfg))
        return evaluate_run(run, INPUT_SPLIT, cfg.out, backend, quantize)
    return evaluate_run(load_run(checkpoint, cfg), str(cfg.split), cfg.out, backend, quantize)


def run_checkpoint(path: str) -> Path:
    """The checkpoint of the run that `ckpt=` names. A shared folder or an exported ONNX model is refused, saying
    why: it keeps the model and its text preparation, not the run's training settings and splits that evaluation
    reads them through (and the hub's copy is no place to write scores into)."""
    from matching.inference.loader import exported_form

    form = exported_form(Path(path).expanduser())
    if form is not None:
        what = "a shared model folder (export format=hub)" if form == "shared" else "an exported ONNX model"
        raise RunError(
            f"ckpt={path} is {what}: evaluate scores a run directory (its checkpoint, config and training "
            "settings), which that folder does not keep. Evaluate the run it was exported from (backend=onnx "
            f"scores that run on ONNX Runtime), or score pairs with it: matching-predict ckpt={path} input=<file>"
        )
    return find_checkpoint(path)


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
