"""`hydra/launcher=ray` (conf/hydra/launcher/ray.yaml): each sweep job as a Ray task, on a local Ray cluster started
for the sweep or on an existing one (`hydra.launcher.address=auto`, `<head>:6379`).

Ours rather than hydra-ray-launcher 1.2.2 (its last release): that plugin requires cloudpickle<3, which would
downgrade the tested cloudpickle 3.1 of constraints.txt, and it pulls boto3 (for its AWS launcher) and ray[default]
into every install. What it does for a local or existing cluster is this file: `ray.init`, one remote call of
Hydra's `run_job` per job with the resources asked for, wait for all.

Lives in `hydra_plugins` because Hydra instantiates launchers only from that namespace package. Ray is imported
when a sweep is launched, so without the ray extra the error names it.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)


class JobStopped(ValueError):
    """A sweep job ended with an exit status (a user's mistake, already printed by the job, or a signal)."""


class _Tee(io.TextIOBase):
    """A stream that writes to `stream` and keeps a copy (a job's stderr: its `error:` paragraph goes back to the
    launching process in the job's result, not only in Ray's log stream)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _run_job(hydra_context: HydraContext, config: DictConfig, task_function: TaskFunction, singletons: Any) -> Any:
    """One sweep job in a Ray worker: Hydra's own `run_job`, as the basic launcher calls it."""
    setup_globals()
    Singleton.set_state(singletons)
    stderr = sys.stderr = _Tee(sys.stderr)
    try:
        return run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")  # fmt: skip
    except SystemExit as stop:  # a user's mistake (printed by the job) or a signal: a failed job, not a dead worker
        # that Ray would retry
        said = [
            line.removeprefix("error: ") for line in stderr.copy.getvalue().splitlines() if line.startswith("error: ")
        ]
        why = (
            said[-1] if said else f"stopped with exit status {stop.code} (its output is in its run folder's train.log)"
        )
        ret = JobReturn(overrides=list(config.hydra.overrides.task), cfg=config, status=JobStatus.FAILED)
        ret.return_value = JobStopped(
            f"sweep job #{config.hydra.job.num} ({' '.join(filter_overrides(ret.overrides))}) failed: {why}. Fix it "
            "and relaunch the same command: complete runs are skipped, interrupted ones continue"
        )
        return ret
    finally:
        sys.stderr = stderr.stream


class RayLauncher(Launcher):
    def __init__(
        self,
        address: str | None = None,
        num_cpus: float = 1,
        num_gpus: float = 0,
        max_retries: int = 3,
        init: DictConfig | None = None,
    ) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.max_retries = max_retries
        init = OmegaConf.to_container(init, resolve=True) if OmegaConf.is_config(init) else dict(init or {})
        self.init = {k: v for k, v in init.items() if v is not None}  # null: Ray's own default
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from matching.extras import require

        ray = require("ray", "ray", "hydra/launcher=ray")
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        started = not ray.is_initialized()
        if started:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray cluster"
            log.info("Ray launcher: %d jobs on %s, sweep dir %s", len(job_overrides), where, sweep_dir)
            ray.init(address=self.address, **self.init)
        remote = ray.remote(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_retries=self.max_retries)(_run_job)
        pending = []
        try:
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
                log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
                config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                with open_dict(config):
                    config.hydra.job.id = f"ray_{idx}"
                    config.hydra.job.num = idx
                pending.append(remote.remote(self.hydra_context, config, self.task_function, Singleton.get_state()))
            return ray.get(pending)
        finally:
            if started:
                ray.shutdown()
