"""Denormal floats in training: each case trained twice at the same time, `flush_denormal=true` and `=false`.

    python benchmarks/denormals.py --data-dir /path/to/corpora [--cache-dir DIR] [--case frozen --case fine_tuned]
        [--out outputs/benchmarks/denormals] [--json docs/figures/denormals.json]

A float32 result below 1.2e-38 (a denormal) costs x86 about 100 times a normal one. As a run's training loss nears 0,
its gradients shrink and their squares in Adam's second moment fall below that; a contextual run's later epochs took up
to 3x its first ones (TrecQA fine-tuned seed 3 of study=fine_tuning_selected, one thread: about 100 s to 254 s).
`flush_denormal=true` (the training default, conf/train.yaml) sets them to 0 during training.

Each case is one training command (TrecQA, CoDA centred, F = none, 8 epochs with the dev-best kept, the settings of
`study=fine_tuning_selected`): over the frozen MiniLM encoder, with its top layer fine-tuned, and over static MiniLM
vectors. Its two runs start together, one thread each, so that both meet the same load on a shared machine (the
figure that counts is their ratio); they run one case after the other. Per run it prints the seconds of every epoch
(the checkpoint's `timing`), the training seconds, and whether the two runs' dev scores are the same to the bit
(scores/val.csv) and their metrics.json dev figures equal: flushing changes the arithmetic only where a result is
below 1.2e-38, which is expected to leave every score as it was. `--json` writes the figures that
docs/results/performance.md renders ("Denormals").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from matching.training.run import cpu_model

#: The cases: TrecQA, the fine-tuning comparison's settings (conf/study/fine_tuning_selected.yaml), 8 epochs.
SETTINGS = ["task=trecqa", "aligner=coda", "aligner.projection=none", "aligner.center_tokens=true", "dtype=fp32",
            "trainer.max_epochs=8", "callbacks.early_stopping=null", "trainer.enable_progress_bar=false", "seed=1",
            "threads=1"]  # fmt: skip
CASES = {
    "frozen": ("CoDA over the frozen MiniLM encoder",
               ["embeddings=minilm_contextual", "embeddings.trainable_layers=0"]),
    "fine_tuned": ("CoDA, the encoder's top layer fine-tuned",
                   ["embeddings=minilm_contextual", "embeddings.trainable_layers=1", "embeddings.encoder_lr=3.0e-5"]),
    "static": ("CoDA over static MiniLM vectors", ["embeddings=minilm"]),
}  # fmt: skip


def start(case: str, flush: bool, args: argparse.Namespace) -> tuple[subprocess.Popen, Path]:
    """One run of a case, in its own process on one thread, into `<out>/<case>/flush_<flush>`."""
    folder = args.out / case / f"flush_{str(flush).lower()}"
    overrides = [*SETTINGS, *CASES[case][1], f"flush_denormal={str(flush).lower()}", f"paths.data_dir={args.data_dir}",
                 f"hydra.run.dir={folder}"]  # fmt: skip
    if args.cache_dir:
        overrides.append(f"paths.cache_dir={args.cache_dir}")
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder.parent / f"flush_{str(flush).lower()}.log", "w", encoding="utf-8")  # noqa: SIM115
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "matching.train", *overrides], stdout=log,
                               stderr=subprocess.STDOUT, env=env)  # fmt: skip
    return process, folder


def figures(folder: Path) -> dict:
    """A finished run's timing (its last checkpoint's) and dev metrics."""
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    timing = torch.load(folder / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["timing"]
    epochs = [round(float(s), 2) for s in timing["epoch_seconds"]]
    return {"train_seconds": round(float(metrics["train_seconds"]), 1), "epoch_seconds": epochs,
            "first_epoch": epochs[0], "last_epoch": epochs[-1], "last_over_first": round(epochs[-1] / epochs[0], 2),
            "median_epoch": round(statistics.median(epochs), 2), "best_epoch": metrics.get("best_epoch"),
            "dev": {k: v for k, v in metrics.items() if k.startswith("val/")}}  # fmt: skip


def run_case(case: str, args: argparse.Namespace) -> dict:
    """Both runs of a case, started together; their figures, the ratio of their training seconds and whether their
    dev scores agree to the bit."""
    started = [start(case, flush, args) for flush in (False, True)]
    for process, folder in started:
        if process.wait() != 0:
            sys.exit(f"{case}: the run in {folder} failed (exit {process.returncode}); its log: {folder}.log")
    kept, flushed = (figures(folder) for _, folder in started)
    same_scores = (started[0][1] / "scores" / "val.csv").read_bytes() == (started[1][1] / "scores" /
                                                                           "val.csv").read_bytes()  # fmt: skip
    return {"case": case, "what": CASES[case][0], "kept": kept, "flushed": flushed,
            "speedup": round(kept["train_seconds"] / flushed["train_seconds"], 2),
            "same_scores": same_scores, "same_dev_metrics": kept["dev"] == flushed["dev"]}  # fmt: skip


def line(row: dict) -> str:
    k, f = row["kept"], row["flushed"]

    def run(name: str, r: dict) -> str:
        return f"{name}: {r['train_seconds']:7.1f} s (epochs {r['first_epoch']:.1f} -> {r['last_epoch']:.1f} s)"

    return (f"{row['case']:<11} {run('kept', k)}  {run('flushed', f)}  {row['speedup']:.2f}x  same scores: "
            f"{row['same_scores']}, same dev metrics: {row['same_dev_metrics']}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="the corpora (TrecQA's files)")
    parser.add_argument("--cache-dir", help="paths.cache_dir of the runs (a contextual run's states are cached there)")
    parser.add_argument("--case", action="append", choices=list(CASES), help="repeatable; default: every case")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/denormals"))
    parser.add_argument("--json", type=Path, help="write the figures here (docs/figures/denormals.json)")
    args = parser.parse_args()
    rows = []
    for case in args.case or list(CASES):
        rows.append(run_case(case, args))
        print(line(rows[-1]), flush=True)
    if args.json:
        said = ["/path/to/corpora" if a == args.data_dir else a for a in sys.argv[1:]]
        for option, value in (("--cache-dir", args.cache_dir), ("--out", str(args.out))):  # where, not what
            said = [a for i, a in enumerate(said) if not (a == option or (a == value and said[i - 1] == option))]
        data = {"command": "python benchmarks/denormals.py " + shlex.join(said),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "processor": cpu_model() or
                platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__, "results": rows}  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
