"""A study's protocol, run as one command: select on dev, confirm over seeds, test once, write the page.

1. **Select.** Every setting of each family's grid at the selection seeds (and every seed of a family with one
   setting), in one sweep through the configured Hydra launcher (`hydra/sweeper=job_list`), so a study fills a
   machine (joblib) or a cluster (SLURM, Ray). Then the rule of `matching.studies.selection`, on dev only, written
   to `selection.json`.
2. **Confirm.** The kept setting of every family with every seed, in a second sweep. A study whose seeds are
   `{min, max, step}` then adds seeds, a sweep per look, to the families whose comparisons are undecided
   (`matching.studies.seeds`), until they are decided or the maximum is reached.
3. **Test once** (`study.test=true`). Only after every family of every task is confirmed: the kept settings' best
   checkpoints on the test split(s), with `evaluate split=test` (eval_test.json and scores/test*.csv in each run).
   `test.json` records when, and the selection it followed (its sha256); a study whose selection changes after its
   test is refused, so that no test figure ever feeds a choice.
4. **The page** (`matching.studies.page`), from the runs' own files.

A study stopped anywhere and run again trains only what is missing: a finished run is skipped, an interrupted one
continues from its last checkpoint (the sweep machinery of `matching.training.sweeps`), the test is not repeated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from matching.errors import ConfigError, UserError
from matching.files import write_json, write_text_atomic
from matching.studies.results import RunResult, read_result
from matching.studies.seeds import SeedPlan, plan_seeds, write_record
from matching.studies.selection import Choice, as_record, choose
from matching.studies.spec import PlannedRun, StudySpec, confirmation_runs, selection_runs

log = logging.getLogger(__name__)

#: The Hydra launchers a study can use, by the name its `launcher=` takes, with the override that picks each.
LAUNCHERS = {
    "basic": None,
    "joblib": "hydra/launcher=joblib",
    "slurm": "hydra/launcher=slurm",
    "submitit_local": "hydra/launcher=submitit_local",
    "ray": "hydra/launcher=ray",
}


class StudyIncomplete(UserError, RuntimeError):
    """Runs of the study failed or are missing; what finished is kept and shown on the page."""


@dataclass(frozen=True)
class Launch:
    """How the study's runs are launched: the launcher, its settings, the overrides every run gets from the
    command line, and the threads per run."""

    launcher: str = "basic"
    jobs: int | None = None  # joblib: runs at a time
    launcher_overrides: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()  # paths.data_dir=..., paths.cache_dir=...: where every run reads and caches
    threads: int | None = None

    def path_settings(self) -> dict[str, str]:
        """`paths` as the settings a saved run is loaded with (matching.saved.run_folder.configured): where every run
        reads its splits, which may have moved since it was trained."""
        return dict(override.split("=", 1) for override in self.paths)

    def hydra_overrides(self) -> list[str]:
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"launcher={self.launcher}: one of {', '.join(LAUNCHERS)}")
        chosen = [LAUNCHERS[self.launcher]] if LAUNCHERS[self.launcher] else []
        if self.jobs:
            if self.launcher != "joblib":
                raise ConfigError(f"jobs={self.jobs} sets joblib's runs at a time: add launcher=joblib")
            chosen.append(f"hydra.launcher.n_jobs={self.jobs}")
        return [*chosen, *self.launcher_overrides]


def launch(runs: Sequence[PlannedRun], spec: StudySpec, study_dir: Path, how: Launch, stage: str) -> bool:
    """Trains `runs` as one sweep of `python -m matching.train -m` (hydra/sweeper=job_list) into
    `<study_dir>/runs`; returns whether every job succeeded. The jobs file is kept (`jobs/<stage>.yaml`)."""
    if not runs:
        return True
    jobs_file = study_dir / "jobs" / f"{stage}.yaml"
    write_text_atomic(jobs_file, yaml.safe_dump([r.overrides(spec) for r in runs], sort_keys=False, width=1000))
    command = [
        sys.executable, "-m", "matching.train", "-m", "hydra/sweeper=job_list",
        f"hydra.sweeper.jobs_file={jobs_file.absolute()}", f"hydra.sweep.dir={(study_dir / 'runs').absolute()}",
        *how.hydra_overrides(), *how.paths,
    ]  # fmt: skip
    env = dict(os.environ)
    if how.threads:
        env |= {name: str(how.threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    log.info("%s: %d runs (%s)", stage, len(runs), shlex.join(command[1:]))
    return subprocess.run(command, env=env, check=False).returncode == 0


def results_of(runs: Sequence[PlannedRun], runs_dir: Path) -> dict[tuple[str, str, str, int], RunResult]:
    return {r.key: read_result(r, runs_dir) for r in runs}


def planned_runs(spec: StudySpec, choices: Sequence[Choice]) -> list[PlannedRun]:
    """Every run of the study as far as it is decided: the selection runs and the kept settings' other seeds."""
    first = selection_runs(spec)
    kept = {(c.task, c.family): c.chosen for c in choices if c.chosen is not None}
    seen = {r.relative for r in first}
    return first + [r for r in confirmation_runs(spec, kept) if r.relative not in seen]


def _sha256(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class StudyOutcome:
    """Where a study stands after `run_study`: its choices, every planned run's result (keyed by task, family,
    setting slug and seed), whether every family is chosen and every run finished, and whether every launch
    succeeded."""

    choices: list[Choice]
    results: dict[tuple[str, str, str, int], RunResult]
    complete: bool
    launched_ok: bool
    seeds: SeedPlan | None = None  # an adaptive study's decisions and the seeds each family took


def check_families_differ(spec: StudySpec) -> None:
    """A ConfigError when two families without a grid would train the same config (on the study's first task): their
    comparison would measure nothing but seeds, as study=scitail's `aligner=coda` beside `aligner=coda
    aligner.center_tokens=true` did (CoDA centres its tokens by default)."""
    from contextlib import nullcontext

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from matching.files import config_dir
    from matching.saved.earlier_versions import current_overrides

    task_overrides = next(iter(spec.tasks.values()), ())
    seen: dict[str, str] = {}
    # Under `python -m matching.study` Hydra is initialised on the package's configs already; from Python, not yet.
    hydra = nullcontext() if GlobalHydra.instance().is_initialized() else initialize_config_dir(
        config_dir=str(config_dir()), version_base="1.3", job_name="study")  # fmt: skip
    with hydra:
        for name, family in spec.families.items():
            if family.grid:
                continue
            overrides = current_overrides([*task_overrides, *spec.train, *family.overrides], warn=False)
            cfg = compose("train", overrides=overrides)
            key = json.dumps(OmegaConf.to_container(cfg, resolve=False), sort_keys=True, default=str)
            if key in seen:
                raise ConfigError(
                    f"study {spec.name}: the families {seen[key]} and {name} train the same config "
                    f"({' '.join(spec.families[seen[key]].overrides)} and {' '.join(family.overrides)} compose alike), "
                    "so their comparison would measure nothing; give one of them the override that makes it what its "
                    "label says (an aligner's defaults are in conf/aligner/<name>.yaml)"
                )
            seen[key] = name


def run_study(spec: StudySpec, study_dir: Path, how: Launch, train: bool = True) -> StudyOutcome:
    """Runs the protocol (without training when `train` is False: the choices and test as the files stand)."""
    runs_dir = study_dir / "runs"
    ok = True
    if train:
        check_families_differ(spec)
    first = selection_runs(spec)
    if train:
        ok = launch(first, spec, study_dir, how, "select")
    choices = choose(spec, results_of(first, runs_dir))
    selection = as_record(spec, choices)
    write_json(study_dir / "selection.json", selection)
    every = planned_runs(spec, choices)
    if train:
        ok = launch([r for r in every if r not in first], spec, study_dir, how, "confirm") and ok
    results = results_of(every, runs_dir)
    seeds = None
    if spec.adaptive and all(c.chosen is not None for c in choices):
        every, results, seeds, ok = add_seeds(spec, study_dir, how, choices, every, train, ok)
    complete = all(c.chosen is not None for c in choices) and all(r.finished for r in results.values())
    if seeds is not None and not seeds.decided and train:
        complete = False
    if spec.test and complete:
        kept = {(c.task, c.family): c.chosen for c in choices}
        chosen = {k: r for k, r in results.items() if kept[(r.planned.task, r.planned.family)] == r.planned.setting}
        test_once(spec, study_dir, selection, chosen, how)
        results = results_of(every, runs_dir)
    return StudyOutcome(choices, results, complete, ok, seeds)


def add_seeds(
    spec: StudySpec, study_dir: Path, how: Launch, choices: Sequence[Choice], every: list[PlannedRun], train: bool,
    ok: bool,
) -> tuple[list[PlannedRun], dict, SeedPlan, bool]:  # fmt: skip
    """An adaptive study's looks: replays the decisions on the runs there are, trains the seeds they ask for (one
    sweep per look), and again, until every comparison is decided or a launch fails. Returns every planned run,
    their results, the seeds' plan and whether every launch succeeded."""
    runs_dir = study_dir / "runs"
    kept = {(c.task, c.family): c.chosen for c in choices}
    slugs = {key: setting.slug for key, setting in kept.items()}
    known = {r.relative for r in every}
    launched: set[str] = set()
    while True:
        results = results_of(every, runs_dir)
        plan = plan_seeds(spec, results, slugs)
        write_record(study_dir, plan)
        needed = confirmation_runs(spec, kept, plan.wanted)
        new = [r for r in needed if r.relative not in known]
        every += new
        known |= {r.relative for r in new}
        results = results_of(every, runs_dir)
        todo = [r for r in needed if not results[r.key].finished]
        if any(results[r.key].finished for r in new):
            # runs of a look were there already (a resumed study, or a page replayed over every task while another
            # task's runs are missing): plan again with them
            continue
        if not todo or not train or not ok or {r.relative for r in todo} <= launched:
            return every, results, plan, ok  # decided, not training, or a launch left runs unfinished: stop here
        launched |= {r.relative for r in todo}
        log.info("seeds: %d more runs (up to %d seeds a family)", len(todo), max(plan.wanted.values()))
        ok = launch(todo, spec, study_dir, how, f"seeds{max(plan.wanted.values())}") and ok


def has_test_split(result: RunResult) -> bool:
    """Whether the run's task has a labelled test split (MNLI, the SNLI check: none)."""
    task = (result.config or {}).get("task") or {}
    splits = task.get("splits") or {}
    return any(splits.get(name) for name in task.get("test_splits") or [])


def test_once(spec: StudySpec, study_dir: Path, selection: dict, results: dict, how: Launch) -> None:
    """Evaluates every kept run on the test split(s) (what `matching-evaluate split=test` does, in this process:
    `evaluate_on_test`), once, after the selection is complete; records it in test.json. A run already tested is not
    tested again."""
    record_file = study_dir / "test.json"
    digest = _sha256(selection)
    record = json.loads(record_file.read_text()) if record_file.is_file() else None
    if record is not None and record.get("selection_sha256") != digest:
        raise ConfigError(
            f"{study_dir} was tested on {record.get('tested_at')} after another selection (test.json); a study tests "
            "once, so a changed study (its families, grid, budget, seeds or tasks) cannot be tested again in the "
            "same folder. Give it a new one: out=<folder>"
        )
    tested = dict((record or {}).get("runs") or {})
    untested = dict((record or {}).get("no_test_split") or {})
    failed, errors = [], set()
    for key in sorted(results):
        result = results[key]
        if result.planned.relative in tested or result.planned.task in untested:
            continue
        if not has_test_split(result):
            untested[result.planned.task] = "its task has no labelled test split"
            continue
        log.info("test: %s", result.planned.relative)
        try:
            evaluate_on_test(result.folder / "checkpoints" / "best.ckpt", how.path_settings())
        except UserError as err:  # a missing test file, say: the others are still tested; a bug stops the study
            said = str(err) in errors
            log.error("test: %s: %s", result.planned.relative, "the same error as above" if said else err)
            errors.add(str(err))
            failed.append(result.planned.relative)
            continue
        tested[result.planned.relative] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_json(record_file, _test_record(digest, tested, untested, record))
    write_json(record_file, _test_record(digest, tested, untested, record))
    if failed:
        raise StudyIncomplete(
            f"the test evaluation of {len(failed)} run{'s' if len(failed) != 1 else ''} failed ({', '.join(failed[:5])}"
            f"{', ...' if len(failed) > 5 else ''}; the error is above). The runs tested so far are kept in test.json; "
            "fix it (e.g. paths.data_dir= where the test split is) and run the same command again"
        )


def evaluate_on_test(checkpoint: Path, path_settings: Mapping[str, str]) -> dict[str, float]:
    """`matching-evaluate ckpt=<checkpoint> split=test <paths>`, in this process (a process of its own spent seconds
    importing what this one has loaded): the run's saved config with the study's `paths.*` (Launch.path_settings),
    its metrics written to `<run dir>/eval_test.json` and its per-unit scores beside the dev ones."""
    from matching.saved.run_folder import load_run
    from matching.training.evaluation import evaluate_run

    return evaluate_run(load_run(checkpoint, settings=dict(path_settings)), "test")


def _test_record(digest: str, tested: dict, untested: dict, before: dict | None) -> dict:
    return {
        "selection_sha256": digest,
        "tested_at": (before or {}).get("tested_at") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rule": "evaluated once, on the kept settings only, after every family's selection and confirmation was "
        "complete; no test figure was read before",
        "runs": tested,
        "no_test_split": untested,
    }
