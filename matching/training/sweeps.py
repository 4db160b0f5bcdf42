"""Sweeps that survive an interruption, and what a sweep directory was meant to hold.

A sweep job (one run of `python -m matching.train -m ...`, whichever launcher runs it: basic, joblib, submitit,
Ray) looks at its run directory before it trains. The directory is `hydra.sweep.dir/hydra.sweep.subdir`, so a
relaunched sweep finds its earlier runs only when it is given the same sweep directory (`hydra.sweep.dir=...`;
the default one is named after the time the sweep started):

- `metrics.json` there, and the saved `config.yaml` is the config the job composes now: the run is complete, it
  is skipped (nothing is read, trained or written; its checkpoints stay as they are);
- a checkpoint (`checkpoints/last.ckpt`, written at every epoch end and when the job is signalled to stop): the
  run continues from it, as `resume=<run dir>` does;
- otherwise the run starts (again, if it stopped before its first checkpoint).

A saved `config.yaml` that differs from the job's config (other than where files are) is an error naming the keys:
the directory holds another run, and nothing is overwritten.

The report reads `multirun.yaml` (written by Hydra in every sweep directory) to know which runs a grid sweep was
meant to hold, so that a run that never started is shown as missing too (:func:`planned_jobs`).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

from matching.saved.earlier_versions import current_form, current_overrides
from matching.saved.run_folder import saved_form

log = logging.getLogger(__name__)

#: Keys that say where files are or how a run uses the machine, not what is trained: a relaunch on another machine
#: (or beside other jobs) may change them.
_LOCATION_KEYS = ("paths.", "trainer.enable_progress_bar", "trainer.enable_model_summary", "threads",
                  "callbacks.epoch_line")  # fmt: skip


def is_sweep_job() -> bool:
    """Whether this process runs one job of a Hydra multirun (`-m`)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def check_sweep_processes(cfg: DictConfig) -> None:
    """A sweep job cannot start DDP processes itself: Lightning starts them by running the command line again,
    which for a sweep is the whole sweep. Processes started for it (SLURM's tasks, torchrun) are fine."""
    trainer = cfg.get("trainer") or {}
    devices = trainer.get("devices", 1)
    several = devices not in (1, "1") and not (isinstance(devices, (list, ListConfig)) and len(devices) == 1)
    external = any(key in os.environ for key in ("SLURM_NTASKS", "LOCAL_RANK"))
    if str(trainer.get("strategy", "")) == "ddp" and several and not external:
        from matching.errors import RunError

        raise RunError(
            f"trainer=ddp with trainer.devices={devices} in a sweep job: Lightning would start the other processes by "
            "running the whole sweep again. Sweep with one process per job (each job on its own device: "
            "trainer=gpu, or the ray launcher's num_gpus), or on SLURM let it start them: "
            "hydra.launcher.tasks_per_node=<devices>"
        )


@dataclass(frozen=True)
class PriorRun:
    """What an earlier attempt left in a sweep job's run directory."""

    state: str  # "complete" (metrics.json), "interrupted" (a checkpoint to continue from) or "new"
    checkpoint: Path | None = None
    metrics: dict[str, float] | None = None


def location_keys(cfg: DictConfig) -> set[str]:
    """The dotted keys of `cfg` whose values are interpolated from `paths.*` (data_dir, cache_dir, a vectors file
    under the data folder): they change when the same run is relaunched where files live elsewhere."""
    found: set[str] = set()

    def walk(node: Any, prefix: str) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            full = f"{prefix}{key}"
            if isinstance(value, str) and "${" in value and "paths." in value:
                found.add(full)
            else:
                walk(value, full + ".")

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return found


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= _flatten(value, f"{prefix}{key}.")
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): node}


def config_differences(saved: dict, current: dict, ignored: set[str]) -> list[str]:
    """`key: saved -> current` for every leaf that differs, keys that say where files are aside."""
    old, new = _flatten(saved), _flatten(current)
    differ = []
    for key in sorted(old.keys() | new.keys()):
        if key.startswith(_LOCATION_KEYS) or key in ignored:
            continue
        if json.dumps(old.get(key), default=str) != json.dumps(new.get(key), default=str):
            differ.append(f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}")
    return differ


def newer_keys(saved: dict, current: dict, ignored: set[str]) -> set[str]:
    """The keys of the job's config that the saved one lacks and the job's overrides do not name: keys a newer
    version of matching added, at their defaults (which keep the earlier behaviour), so that a sweep or a study
    resumes across an upgrade. A key the job's command line sets is a difference like any other; a config group's
    choice (`aligner=softmax`) picks a file and sets none of its keys, so the keys newly in that file are new keys."""
    old = _flatten(saved)
    given = set()
    if HydraConfig.initialized():
        groups = set(HydraConfig.get().runtime.choices)
        names = {o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task}
        given = {name for name in names if name not in groups}
    added = {k for k in _flatten(current) if k not in old and k not in ignored and not k.startswith(_LOCATION_KEYS)}
    return {k for k in added if not any(k == g or k.startswith(g + ".") for g in given)}


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint to continue from: `checkpoints/last.ckpt`, or Lightning's SLURM requeue checkpoint
    (`hpc_ckpt_<n>.ckpt` in the run directory) when it is newer."""
    candidates = [p for p in [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("hpc_ckpt_*.ckpt")] if p.is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None


def prior_run(cfg: DictConfig, run_dir: Path) -> PriorRun:
    """What an earlier attempt of this sweep job left in `run_dir` (see the module docstring). `cfg` is the job's
    config as it will be saved (resolved, with its `choices`)."""
    saved_file = run_dir / "config.yaml"
    if not saved_file.exists():
        return PriorRun("new")
    saved = yaml.safe_load(saved_file.read_text()) or {}
    current_form(saved)  # a run saved before the package's rooms or the loss group, read in today's form
    current = saved_form(cfg)
    ignored = location_keys(cfg)
    if not (current.get("task") or {}).get("labels"):  # a generic task's label names, read from the data at the
        ignored.add("task.labels")  # start of the first attempt and saved in its config.yaml (train.py)
    added = newer_keys(saved, current, ignored)
    if added:
        log.warning(
            "%s was saved by an earlier version, without %s: taken as the same run, the new keys at their defaults",
            run_dir, ", ".join(sorted(added)),
        )  # fmt: skip
    differ = config_differences(saved, current, ignored | added)
    if differ:
        from matching.errors import RunError

        shown = "; ".join(differ[:8]) + (f"; and {len(differ) - 8} more" if len(differ) > 8 else "")
        raise RunError(
            f"{run_dir} holds a run of another config ({shown}), so this sweep job would overwrite it. A relaunched "
            "sweep must be the same command as the first one (the same overrides, in the same order); for a new "
            "sweep give another folder with hydra.sweep.dir=<dir>, or delete that run directory to train it again"
        )
    metrics_file = run_dir / "metrics.json"
    if metrics_file.exists():
        return PriorRun("complete", metrics=json.loads(metrics_file.read_text()))
    checkpoint = resume_checkpoint(run_dir)
    return PriorRun("interrupted", checkpoint=checkpoint) if checkpoint else PriorRun("new")


def planned_jobs(sweep_dir: Path) -> list[tuple[str, ...]] | None:
    """The overrides of every job of the grid sweep whose `multirun.yaml` is in `sweep_dir` (as Hydra's basic
    sweeper expands them, so they equal each run's `.hydra/overrides.yaml`); None when the folder holds no
    multirun.yaml or the sweep is not a grid (e.g. Optuna's trials)."""
    multirun = sweep_dir / "multirun.yaml"
    if not multirun.is_file():
        return None
    try:
        config = yaml.safe_load(multirun.read_text()) or {}
        hydra = config.get("hydra") or {}
        sweeper = (hydra.get("runtime") or {}).get("choices", {}).get("hydra/sweeper", "basic")
        if sweeper != "basic":
            return None
        params = (hydra.get("sweeper") or {}).get("params") or {}
        arguments = [f"{k}={v}" for k, v in params.items()] + list((hydra.get("overrides") or {}).get("task") or [])
        jobs = grid(OverridesParser.create().parse_overrides(arguments))
    except (HydraException, yaml.YAMLError, AttributeError, ValueError) as err:
        log.warning("cannot tell which runs %s was meant to hold (%s); only the runs found are reported", multirun, err)
        return None
    return [tuple(current_overrides(job, warn=False)) for job in jobs]  # a sweep's old spellings read as today's


def grid(overrides: list) -> list[tuple[str, ...]]:
    """The jobs of a grid sweep, as Hydra's basic sweeper expands its overrides (BasicSweeper.split_arguments, which
    lives in hydra._internal; this is its expansion on the public Override API): a later override of the same key
    replaces an earlier one, keeping its place; the grid is the product of the keys' values, in that order."""
    values: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise ValueError(f"the basic sweeper does not sweep over a {override.value_type.name} ({key})")
    return list(itertools.product(*values.values()))


class SweepLog(Callback):
    """Hydra callback of `train` (conf/train.yaml, hydra.callbacks): at the start of a sweep, where it writes and how
    to finish it after an interruption; at its end, how many of its runs are complete and the report command."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = str(config.hydra.sweep.dir)
        named = any(o.startswith("hydra.sweep.dir=") for o in config.hydra.overrides.hydra)
        how = "relaunch this command" if named else f"relaunch this command with hydra.sweep.dir={sweep_dir} added"
        log.info("sweep folder %s; if the sweep is interrupted, %s to finish it", sweep_dir, how)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        complete = len(list(sweep_dir.rglob("metrics.json")))  # a study nests its runs: <task>/<family>/...
        planned = planned_jobs(sweep_dir)
        of = f" of {len(planned)}" if planned else ""
        log.info("sweep %s: %d%s runs complete; results: python -m matching.report runs=%s", sweep_dir, complete, of,
                 sweep_dir)  # fmt: skip
