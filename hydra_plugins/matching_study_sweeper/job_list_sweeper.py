"""`hydra/sweeper=job_list` (conf/hydra/sweeper/job_list.yaml): a sweep whose jobs are listed in a YAML file, each
job its own list of overrides, all handed to the configured launcher (basic, joblib, submitit/SLURM, Ray) in one
batch. A study (`python -m matching.study`) trains families whose overrides differ in their keys
(`aligner=softmax aligner.projection=none` beside `aligner=attention aligner.distribution=sparsemax`), which no
grid expresses; this lets one sweep hold them all, so that the launcher fills the machine or the cluster.

A job may set `hydra.sweep.subdir` among its overrides (the study names each run's folder by its task, family,
setting and seed); the overrides given on the command line are put before every job's. The jobs' own checks (a
finished run is skipped, an interrupted one continues: matching.training.sweeps) work as in any sweep. Jobs that fail
are listed together at the end, after every other job has had its turn.

Lives in `hydra_plugins` because Hydra instantiates sweepers only from that namespace package.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from matching.saved.earlier_versions import current_overrides

log = logging.getLogger(__name__)


class JobsFailed(RuntimeError):
    """Some jobs of the list failed; the message names each with its error."""


def read_jobs(path: Path) -> list[list[str]]:
    """The jobs of a job-list file: a YAML list whose items are lists of override strings."""
    jobs = yaml.safe_load(path.read_text())
    if not isinstance(jobs, list) or not all(
        isinstance(job, list) and all(isinstance(o, str) for o in job) for job in jobs
    ):
        raise ValueError(f"{path}: a job list is a YAML list of lists of overrides (key=value strings)")
    return jobs


class JobListSweeper(Sweeper):
    def __init__(self, jobs_file: str) -> None:
        super().__init__()
        self.jobs_file = Path(jobs_file)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Sequence[JobReturn]:
        assert self.config is not None and self.launcher is not None
        # A job list written before a key was respelled (a study spec's `loss.kind=listwise`) runs as today's.
        jobs = [current_overrides([*arguments, *job]) for job in read_jobs(self.jobs_file)]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        if not jobs:
            return []
        self.validate_batch_is_legal(jobs)
        log.info("%d jobs from %s", len(jobs), self.jobs_file)
        results = self.launcher.launch(jobs, initial_job_idx=0)
        failed = [(job, r) for job, r in zip(jobs, results, strict=True) if r.status == JobStatus.FAILED]
        if failed:
            lines = [f"{' '.join(job)}: {_why(r)}" for job, r in failed]
            raise JobsFailed(f"{len(failed)} of {len(jobs)} jobs failed:\n" + "\n".join(lines))
        return results


def _why(result: Any) -> str:
    try:
        result.return_value  # noqa: B018 (raises the job's exception)
    except BaseException as err:  # the job's own exception, whatever it is
        return f"{type(err).__name__}: {err}".splitlines()[0]
    return "failed"
