"""The runs of a study: every run directory below the folders given (a folder with `config.yaml` and, once
finished, `metrics.json`), each read as a `Run` named by the config options it was trained with (`task=wikiqa
aligner=coda`), so that a new corpus or aligner needs no edit here.

A run that was meant to be there but has no metrics is a missing run, never dropped: a run directory with
`config.yaml` and no `metrics.json` (a job that failed, or was stopped before it finished) and, in a grid sweep's
folder (its `multirun.yaml`), a job that never started. So a sweep that ran on a cluster is reported from its shared
output folder as it is, finished or not. A gap filled by a finished run with the same settings and seed in another
of the given folders (the rest of a stopped sweep, run as a new sweep) is no gap: it is counted once.

The variant of a run is made of the keys overridden on the command line (`.hydra/overrides.yaml`) whose values
in the resolved configs differ between the runs reported, seeds aside: an ablation sweep such as
`aligner.center_e=false,true aligner.gate=none,center` gets one row per setting, a plain aligner comparison gets
none, and a run that spelled out a default (`loss.class_weights=null`) shares the row of runs that did not.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from matching.errors import MissingFileError
from matching.saved.earlier_versions import current_form, current_overrides
from matching.saved.run_folder import option_name
from matching.training.sweeps import planned_jobs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    path: Path
    task: str
    aligner: str
    seed: int
    metrics: dict[str, float]
    overrides: tuple[str, ...] = ()  # key=value from the command line, as Hydra saved them
    config: dict | None = None  # the resolved config.yaml
    variant: str | None = None  # the settings that set it apart from the other runs of its task (see find_runs)
    missing: str | None = None  # why the run has no metrics (it failed or never started); None for a finished run
    cwd: str | None = None  # the directory it was launched from (relative paths in its config are relative to it)
    report_metrics: tuple[str, ...] | None = None  # the metrics asked for (`report metrics=`), else the task's

    @property
    def label(self) -> str:
        """The aligner and the variant, as a row of the report names them."""
        return " ".join(filter(None, [self.aligner, self.variant]))

    @property
    def task_config(self) -> dict:
        return (self.config or {}).get("task") or {}

    @property
    def metrics_reported(self) -> list[str]:
        """The metrics asked for, else the task's `report_metrics`; for a run saved before tasks named them, its
        monitored metric."""
        if self.report_metrics:
            return list(self.report_metrics)
        task = self.task_config
        monitored = str(task.get("monitor") or "val/acc").split("/", 1)[-1]
        return list(task.get("report_metrics") or [monitored])


#: Overrides that never make a variant: the seed is what a row averages over; the rest name the task and aligner
#: (already columns), say where files are or how a run is shown, or are the score function F (`F=` of the variant).
_NOT_VARIANT = {
    "seed", "task", "aligner", "experiment", "aligner.projection", "logger", "trainer.enable_progress_bar",
    "trainer.log_every_n_steps", "callbacks.progress_bar", "callbacks.progress_bar.refresh_rate", "data.num_workers",
    "data.cache", "threads", "trainer.enable_model_summary", "callbacks.epoch_line",
}  # fmt: skip
_NOT_VARIANT_PREFIXES = ("paths.", "hydra")
_PATH_KEYS = ("path", "dir", "file", "folder")


_ABSENT = object()


def _node(config: Mapping, key: str) -> object:
    """The value at a dotted key of a config, or _ABSENT where a part of the path is missing."""
    node: object = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _config_value(run: Run, key: str) -> str:
    """The value at a dotted key of a run's resolved config, as JSON (comparable and hashable): a config group
    (`embeddings=minilm`) by the option chosen, a file path made absolute against the directory the run was
    launched from (a relative and an absolute path to the same file are the same value)."""
    key = key.lstrip("+~")
    config = run.config or {}
    if "." not in key and (config.get("choices") or {}).get(key) is not None:
        return json.dumps(config["choices"][key])
    node = _node(config, key)
    node = None if node is _ABSENT else node
    if isinstance(node, str) and key.rsplit(".", 1)[-1].endswith(_PATH_KEYS) and run.cwd:
        node = os.path.normpath(os.path.join(run.cwd, os.path.expanduser(node)))
    return json.dumps(node, sort_keys=True, default=str)


def _has_key(run: Run, key: str) -> bool:
    """Whether a run's resolved config has the dotted key at all (an aligner without that option has not)."""
    key = key.lstrip("+~")
    config = run.config or {}
    return ("." not in key and key in (config.get("choices") or {})) or _node(config, key) is not _ABSENT


def score_function(config: Mapping | None) -> str | None:
    """`F=<projection>` for an aligner with a score function F (aligner.projection), else None."""
    projection = ((config or {}).get("aligner") or {}).get("projection")
    return f"F={projection}" if projection is not None else None


def _with_variants(runs: list[Run]) -> list[Run]:
    """Each run's variant: its score function F, then the overridden keys whose values are not the same across all
    the runs of its task that have the key (an option of one aligner, e.g. `aligner.score`, is no part of the
    variant of another aligner's runs, which have no such option)."""
    keys = {o.split("=", 1)[0].lstrip("+~") for r in runs for o in r.overrides if "=" in o} - _NOT_VARIANT
    keys = sorted(k for k in keys if not k.startswith(_NOT_VARIANT_PREFIXES))
    by_task: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    varying = {
        task: [k for k in keys if len({_config_value(r, k) for r in members if _has_key(r, k)}) > 1]
        for task, members in by_task.items()
    }

    def spelled(value: object) -> str:  # as on the command line: true/false/null, not Python's reprs
        return json.dumps(value) if value is None or isinstance(value, bool) else str(value)

    def shown(run: Run) -> list[str]:  # the varying keys, and an aligner's options the run set, varying or not:
        own = {o.split("=", 1)[0].lstrip("+~") for o in run.overrides if "=" in o}  # `aligner=attention
        return sorted({*varying[run.task], *(k for k in keys if k.startswith("aligner.") and k in own)})  # ...` named

    def variant(run: Run) -> str | None:
        parts = [f"{k}={spelled(json.loads(_config_value(run, k)))}" for k in shown(run) if _has_key(run, k)]
        return " ".join(filter(None, [score_function(run.config), *parts])) or None

    return [replace(r, variant=variant(r)) for r in runs]


def wiring_reason(config: Mapping) -> str | None:
    """Why a run is a wiring or debug run and not a result (`debug=fast`, one batch, ...), or None."""
    debug = (config.get("choices") or {}).get("debug")
    if debug:
        return f"debug={debug}"
    trainer = config.get("trainer") or {}
    if trainer.get("fast_dev_run"):
        return "trainer.fast_dev_run"
    if trainer.get("overfit_batches"):
        return "trainer.overfit_batches"
    for key in ("limit_train_batches", "limit_val_batches"):
        if trainer.get(key) not in (None, 1.0):
            return f"trainer.{key}={trainer[key]}"
    return None


def _read_run(run_dir: Path, missing: str | None = None) -> Run:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    current_form(cfg)  # a run saved before the loss group (loss.kind) is reported as today's runs are
    aligner = option_name(cfg, "aligner")
    if cfg.get("intra"):
        aligner += "+intra_" + option_name(cfg, "intra")
    metrics = {} if missing else json.loads((run_dir / "metrics.json").read_text())
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = tuple(yaml.safe_load(overrides_file.read_text()) or ()) if overrides_file.exists() else ()
    overrides = tuple(current_overrides(overrides, warn=False))
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    cwd = None
    if hydra_file.exists():
        runtime = ((yaml.safe_load(hydra_file.read_text()) or {}).get("hydra") or {}).get("runtime", {})
        cwd = str(runtime.get("cwd") or "") or None
    return Run(run_dir, cfg["task"]["name"], aligner, int(cfg["seed"]), metrics, overrides, cfg, missing=missing,
               cwd=cwd)  # fmt: skip


UNFINISHED = "no metrics.json: failed or stopped before the end"
NOT_STARTED = "not started"


def find_runs(paths: list[Path], left_out: list[Run] | None = None, superseded: list[Run] | None = None) -> list[Run]:
    """Every run directory below `paths`: finished ones, and (as missing) the ones without metrics and the jobs of a
    grid sweep that never started. Wiring and debug runs (`debug=fast`, ...: see `wiring_reason`) are no results:
    they are left out, and added to `left_out` when it is given. A missing run whose task, aligner, variant and seed
    a finished run elsewhere in `paths` has (a sweep stopped, its remaining seeds run as another sweep) is no gap:
    it is dropped, and added to `superseded` when it is given."""
    runs: list[Run] = []
    planned: list[Run] = []
    for root in paths:
        if not root.exists():
            raise MissingFileError(f"no such run or multirun directory: {root}")
        if (root / "metrics.json").exists() or (root / "config.yaml").exists():
            candidates = [root]
        else:  # a run directory holds config.yaml (written first) and, once finished, metrics.json
            found = {p.parent for p in root.rglob("metrics.json")}
            found |= {p.parent for p in root.rglob("config.yaml") if ".hydra" not in p.relative_to(root).parts}
            candidates = sorted(found)
        for run_dir in candidates:
            if not (run_dir / "config.yaml").exists():
                log.warning("skipping %s: metrics.json without config.yaml (not a matching run directory)", run_dir)
                continue
            if (run_dir / "metrics.json").exists():
                runs.append(_read_run(run_dir))
                continue
            try:
                runs.append(_read_run(run_dir, UNFINISHED))
            except (KeyError, TypeError, ValueError, yaml.YAMLError):  # a config.yaml of something else
                log.warning("skipping %s: its config.yaml is not a matching run's", run_dir)
        sweeps = [root] if (root / "multirun.yaml").exists() else sorted(p.parent for p in root.rglob("multirun.yaml"))
        for sweep_dir in sweeps:
            planned += _not_started(sweep_dir, [r for r in runs if r.path.is_relative_to(sweep_dir)])
    if not runs and not planned:
        raise MissingFileError(f"no run directories (metrics.json + config.yaml) under {', '.join(map(str, paths))}")
    wiring = [r for r in runs if wiring_reason(r.config or {})]
    if left_out is not None:
        left_out += wiring
    runs = _with_variants([r for r in runs if r not in wiring])
    runs += [_grouped_like_siblings(job, runs) for job in planned]
    done = {_setting(r) for r in runs if not r.missing}
    filled = [bool(r.missing) and _setting(r) in done for r in runs]
    if superseded is not None:
        superseded += [r for r, gap_filled in zip(runs, filled, strict=True) if gap_filled]
    return [r for r, gap_filled in zip(runs, filled, strict=True) if not gap_filled]


def _setting(run: Run) -> tuple[str, str, str | None, int]:
    return run.task, run.aligner, run.variant, run.seed


def _without_seed(overrides: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "seed")


def _not_started(sweep_dir: Path, runs: list[Run]) -> list[Run]:
    """The jobs of the grid sweep in `sweep_dir` that left no run directory, as missing runs (task, aligner and seed
    from their overrides, else from the sweep's config)."""
    jobs = planned_jobs(sweep_dir)
    if not jobs:
        return []
    seen = {tuple(r.overrides) for r in runs}
    sweep = yaml.safe_load((sweep_dir / "multirun.yaml").read_text()) or {}
    choices = ((sweep.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    missing = []
    for job in jobs:
        if job in seen:
            continue
        given = dict(o.lstrip("+").split("=", 1) for o in job if "=" in o)
        task = given.get("task") or (sweep.get("task") or {}).get("name") or choices.get("task", "?")
        aligner = given.get("aligner") or choices.get("aligner", "?")
        intra = given.get("intra") or choices.get("intra") or "none"
        if intra not in ("none", "null"):
            aligner += "+intra_" + intra
        seed = int(given.get("seed", sweep.get("seed", 0)))
        missing.append(Run(sweep_dir, task, aligner, seed, {}, job, None, missing=NOT_STARTED))
    return missing


def _grouped_like_siblings(job: Run, runs: list[Run]) -> Run:
    """A job that never started goes in the row of the runs that differ from it only by the seed."""
    for run in runs:
        if run.path.is_relative_to(job.path) and _without_seed(run.overrides) == _without_seed(job.overrides):
            return replace(job, task=run.task, aligner=run.aligner, variant=run.variant, config=run.config)
    return job
