"""`matching-train [overrides]` (conf/train.yaml): train one model; every run directory is self-contained.

The command only: what a run directory holds, resuming and stopping are matching/training/run.py's, which this imports
once Hydra has read the arguments.
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
    from matching.training.run import train

    metrics = train(cfg)
    value = metrics.get(cfg.callbacks.checkpoint.monitor)
    return None if value is None or math.isnan(value) else float(value)


main = command("train", train_command)

if __name__ == "__main__":
    sys.exit(main())
