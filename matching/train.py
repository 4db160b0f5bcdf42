"""`matching-train [overrides]` (conf/train.yaml): train one model; every run directory is self-contained.

A run directory holds `config.yaml` (resolved), `vocab.txt`, `checkpoints/{best,last}.ckpt`,
`metrics.json` (dev metrics of the best checkpoint, its epoch `best_epoch` counted from 1 as in the CSV log and the
progress bar, optional test metrics, timing), the CSV log, `provenance.json` (the data and embeddings by file name
and sha256, matching.provenance) and, for a task without curated examples, `examples.json` (a few dev pairs for the
server's page). A new run that fails before its first checkpoint leaves `outputs/runs/` (see `set_aside`).
Checkpoints are written atomically at the end of every epoch; `python -m matching.train resume=<run dir>`
continues an interrupted run from its last completed epoch, with its own saved config. A job of a sweep (`-m`)
does the same by itself: relaunched into the same sweep directory, it skips a complete run and continues an
interrupted one (see matching/sweeps.py). A run told to stop (SIGTERM, or the SIGUSR1/SIGUSR2 that SLURM sends
before a time limit or preemption) first writes `last.ckpt` at the end of the current training step.
"""

from __future__ import annotations

import math
import sys

from omegaconf import DictConfig

from matching.cli import command


def train_command(cfg: DictConfig) -> float | None:
    """The `train` command: trains, and returns the monitored dev metric (the objective for sweepers)."""
    # Here, not above: torch and Lightning load only after Hydra has read the arguments, so that a typo is answered
    # in under a second (benchmarks/bench_cli_errors.py).
    from matching.training import train

    metrics = train(cfg)
    value = metrics.get(cfg.callbacks.checkpoint.monitor)
    return None if value is None or math.isnan(value) else float(value)


main = command("train", train_command)

if __name__ == "__main__":
    sys.exit(main())
