"""What a study's runs left: each planned run's dev metrics (metrics.json), its held-out metrics when the study
tested it (eval_test.json), its monitored metric and the time it took, read from the run's own files only."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml

from matching.studies.spec import PlannedRun

#: The file `evaluate split=test` writes in a run folder (matching.evaluate).
TEST_FILE = "eval_test.json"


@dataclass(frozen=True)
class RunResult:
    planned: PlannedRun
    folder: Path
    config: dict | None  # config.yaml, once the run has started
    metrics: dict[str, float] | None  # metrics.json: None until the run has finished
    test_metrics: dict[str, float] | None = None  # eval_test.json's metrics, once the study has tested

    @property
    def finished(self) -> bool:
        return self.metrics is not None

    @property
    def monitor(self) -> str:
        return str(((self.config or {}).get("task") or {}).get("monitor") or "val/acc")

    @property
    def higher_is_better(self) -> bool:
        return str(((self.config or {}).get("task") or {}).get("monitor_mode") or "max") == "max"

    @property
    def monitored(self) -> float | None:
        """The monitored dev metric of the best checkpoint (the selection criterion), None when not there."""
        value = (self.metrics or {}).get(self.monitor)
        return None if value is None or math.isnan(value) else float(value)

    @cached_property  # reads train.log: once a run, however many rows of a page ask
    def minutes(self) -> float | None:
        return training_minutes(self.folder, self.metrics) if self.metrics is not None else None

    @property
    def best_epoch(self) -> int | None:
        epoch = (self.metrics or {}).get("best_epoch")
        return None if epoch is None else int(epoch)

    @property
    def state(self) -> str:
        if self.finished:
            return "finished"
        return "unfinished (started, no metrics.json)" if self.config is not None else "not started"


#: What a run's train.log says when a run continues from a checkpoint (matching.training.run): `resume=`, or a
#: relaunched sweep's job.
RESUMED_LINES = ("][matching.training.run][INFO] - resuming ", ": resumed from ")


def training_minutes(run_dir: Path, metrics: dict) -> float | None:
    """A finished run's training minutes (metrics.json's `train_seconds`), or None where they are not the whole
    run's: a run resumed by a version of matching that counted its last sitting only (its metrics.json has no
    `sittings`, which the whole count comes with, and its train.log shows the resume). Pages leave such a run's
    minutes out and say how many they left out."""
    seconds = metrics.get("train_seconds")
    if seconds is None:
        return None
    if "sittings" not in metrics:
        log = run_dir / "train.log"
        text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
        if any(line in text for line in RESUMED_LINES):
            return None
    return seconds / 60


def read_result(planned: PlannedRun, runs_dir: Path) -> RunResult:
    folder = planned.folder(runs_dir)
    config_file, metrics_file, test_file = folder / "config.yaml", folder / "metrics.json", folder / TEST_FILE
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() and config is not None else None
    test = json.loads(test_file.read_text())["metrics"] if test_file.is_file() and metrics is not None else None
    return RunResult(planned, folder, config, metrics, test)
