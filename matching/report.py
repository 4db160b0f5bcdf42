"""`matching-report runs=<multirun dir or run dir> [out=<dir>] [baseline=<aligner>] [metrics=[f1,ap]]`
(conf/report.yaml): a results table over seeds.

Collects every run directory below the given paths (a folder with `metrics.json` and `config.yaml`), groups the runs
by task × aligner × variant, and prints (and writes as Markdown and CSV) mean ± std and the number of seeds of each
metric the task's config names (`report_metrics`; `metrics=` names others, any the runs logged), with the paper's
numbers from the same config (`paper`) beside ours; plus a PNG bar chart with error bars. A run that was meant to be
there but has no metrics (failed, or never started) is shown as missing, never averaged away: each row says how many
of its seeds it averages (`1 of 2`) and which are missing and why. With a baseline, each row's paired test against
it and the questions on which they disagree most. The library behind it is `matching.results` (`study.report`); how
runs are found and their variants named: `matching.results.discovery`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from matching.cli import command
from matching.errors import MissingFileError
from matching.results.rows import Row


def report_command(cfg: DictConfig) -> list[Row]:
    """The `report` command on its composed config (conf/report.yaml)."""
    # Imported here, not at the top: its charts and scores load torch; a typo is answered before that, in under a
    # second (benchmarks/bench_cli_errors.py).
    from matching.results.study import report

    runs = cfg.runs if isinstance(cfg.runs, ListConfig) else [cfg.runs]
    if not runs:
        raise MissingFileError("runs= names no folder; give a multirun or run directory, or a list: runs=[a,b]")
    baseline = str(cfg.baseline) if cfg.get("baseline") else None
    metrics = cfg.get("metrics")
    if isinstance(metrics, str):  # metrics=f1: one name
        metrics = [metrics]
    metrics = [str(m) for m in metrics] if metrics else None
    out = Path(cfg.out) if cfg.out else None
    return report([Path(str(r)) for r in runs], out, baseline, int(cfg.disagreements), metrics)


main = command("report", report_command)

if __name__ == "__main__":
    sys.exit(main())
