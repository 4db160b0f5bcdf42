"""`matching-report runs=<multirun dir or run dir> [out=<dir>]` (conf/report.yaml): a results table over seeds.

Collects every run directory below the given paths (a folder with `metrics.json` and `config.yaml`), groups
the runs by task × aligner × variant, and prints (and writes as Markdown and CSV) mean ± std and the number of seeds of
each metric the task's config names (`report_metrics`), with the paper's numbers from the same config (`paper`)
beside ours; plus a PNG bar chart with error bars. Tasks and aligners are named by the config options the runs
were trained with (`task=wikiqa aligner=coda`), so a new corpus or aligner needs no edit here.

A run that was meant to be there but has no metrics is shown as missing, never averaged away: a run directory
with `config.yaml` and no `metrics.json` (a job that failed, or was stopped before it finished) and, in a grid
sweep's folder (its `multirun.yaml`), a job that never started. Each row says how many of its seeds it averages
(`1 of 2`) and which are missing and why; a warning lists them. So a sweep that ran on a cluster is reported from
its shared output folder as it is, finished or not. A gap filled by a finished run with the same settings and seed
in another of the given folders (the rest of a stopped sweep, run as a new sweep) is no gap: it is counted once.

The variant of a run is made of the keys overridden on the command line (`.hydra/overrides.yaml`) whose values
in the resolved configs differ between the runs reported, seeds aside: an ablation sweep such as
`aligner.center_e=false,true aligner.gate=none,center` gets one row per setting, a plain aligner comparison gets
none, and a run that spelled out a default (`loss.class_weights=null`) shares the row of runs that did not.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig

from matching.cli import command
from matching.errors import ConfigError, MissingFileError
from matching.extras import MissingExtraError, require
from matching.files import write_text_atomic
from matching.results.rows import BASELINE, Comparison, Row
from matching.results.scores import METRIC_COLUMNS, ranked_answers, unit_rows, unit_scores
from matching.results.significance import paired_test, seed_mean
from matching.sweeps import planned_jobs

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

    @property
    def label(self) -> str:
        """The aligner and the variant, as a row of the report names them."""
        return " ".join(filter(None, [self.aligner, self.variant]))

    @property
    def task_config(self) -> dict:
        return (self.config or {}).get("task") or {}

    @property
    def metrics_reported(self) -> list[str]:
        """The task's `report_metrics`; for a run saved before tasks named them, its monitored metric."""
        task = self.task_config
        monitored = str(task.get("monitor") or "val/acc").split("/", 1)[-1]
        return list(task.get("report_metrics") or [monitored])


#: Overrides that never make a variant: the seed is what a row averages over; the rest name the task and aligner
#: (already columns), say where files are or how a run is shown, or are the score function F (`F=` of the variant).
_NOT_VARIANT = {
    "seed", "task", "aligner", "experiment", "aligner.projection", "logger", "trainer.enable_progress_bar",
    "trainer.log_every_n_steps", "callbacks.progress_bar", "callbacks.progress_bar.refresh_rate", "data.num_workers",
    "data.cache",
}  # fmt: skip
_NOT_VARIANT_PREFIXES = ("paths.", "hydra")
_PATH_KEYS = ("path", "dir", "file", "folder")


def _config_value(run: Run, key: str) -> str:
    """The value at a dotted key of a run's resolved config, as JSON (comparable and hashable): a config group
    (`embeddings=minilm`) by the option chosen, a file path made absolute against the directory the run was
    launched from (a relative and an absolute path to the same file are the same value)."""
    key = key.lstrip("+~")
    config = run.config or {}
    if "." not in key and (config.get("choices") or {}).get(key) is not None:
        return json.dumps(config["choices"][key])
    node: object = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, str) and key.rsplit(".", 1)[-1].endswith(_PATH_KEYS) and run.cwd:
        node = os.path.normpath(os.path.join(run.cwd, os.path.expanduser(node)))
    return json.dumps(node, sort_keys=True, default=str)


def score_function(config: Mapping | None) -> str | None:
    """`F=<projection>` for an aligner with a score function F (aligner.projection), else None."""
    projection = ((config or {}).get("aligner") or {}).get("projection")
    return f"F={projection}" if projection is not None else None


def _with_variants(runs: list[Run]) -> list[Run]:
    """Each run's variant: its score function F, then the overridden keys whose values are not the same across all
    the runs of its task."""
    keys = {o.split("=", 1)[0].lstrip("+~") for r in runs for o in r.overrides if "=" in o} - _NOT_VARIANT
    keys = sorted(k for k in keys if not k.startswith(_NOT_VARIANT_PREFIXES))
    by_task: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_task[run.task].append(run)
    varying = {
        task: [k for k in keys if len({_config_value(r, k) for r in members}) > 1] for task, members in by_task.items()
    }

    def spelled(value: object) -> str:  # as on the command line: true/false/null, not Python's reprs
        return json.dumps(value) if value is None or isinstance(value, bool) else str(value)

    def variant(run: Run) -> str | None:
        parts = [f"{k}={spelled(json.loads(_config_value(run, k)))}" for k in varying[run.task]]
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


def _metric_key(split: str, metric: str) -> str:
    """("val", "raw/map") -> "val_raw/map"; ("val", "map") -> "val/map"."""
    if "/" in metric:
        variant, name = metric.split("/", 1)
        return f"{split}_{variant}/{name}"
    return f"{split}/{metric}"


def _read_run(run_dir: Path, missing: str | None = None) -> Run:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    aligner = option_name(cfg, "aligner")
    if cfg.get("intra"):
        aligner += "+intra_" + option_name(cfg, "intra")
    metrics = {} if missing else json.loads((run_dir / "metrics.json").read_text())
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = tuple(yaml.safe_load(overrides_file.read_text()) or ()) if overrides_file.exists() else ()
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


def option_name(cfg: Mapping, group: str) -> str:
    """The option of a config group a run was trained with (`aligner=coda` -> "coda"), as saved by `train` (`cfg`:
    its config, a dict or a DictConfig); for a run composed without Hydra's record of its choices, the class name
    of the group's `_target_`."""
    chosen = (cfg.get("choices") or {}).get(group)
    return chosen or str(cfg[group]["_target_"]).rsplit(".", 1)[-1]


def _only_f(variant: str | None) -> bool:
    """A variant that names nothing but the score function F: the paper's number for the aligner applies."""
    return all(part.startswith("F=") for part in (variant or "").split())


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(runs: list[Run]) -> list[Row]:
    """One row per task × aligner × variant × metric × split: mean, std (sample) and number of the seeds that have
    the metric, the seeds planned, the missing ones and why, and the paper's number."""
    groups: dict[tuple[str, str, str | None], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.task, run.aligner, run.variant)].append(run)
    rows = []
    for (task, aligner, variant), members in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], g[0][2] or "")):
        finished = [r for r in members if not r.missing]
        seeds = sorted(r.seed for r in finished)
        if len(set(seeds)) != len(seeds):
            log.warning(
                "%s/%s %s: several runs share a seed (%s); each counts once", task, aligner, variant or "", seeds
            )
        planned = sorted({r.seed for r in members})
        reference = (finished or members)[0]
        task_config = reference.task_config
        paper = task_config.get("paper") or {}
        for metric in reference.metrics_reported:
            for split in ("val", "test"):
                key = _metric_key(split, metric)
                has = [r for r in finished if key in r.metrics and not math.isnan(r.metrics[key])]
                if not has and (split == "test" or len(finished) == len(members)):
                    continue  # not computed by any run (test=false), or no run of the group has it at all
                values = [100 * r.metrics[key] for r in has]
                why: dict[int, str] = {}
                for r in members:
                    if r.seed not in {h.seed for h in has}:
                        why.setdefault(r.seed, r.missing or f"no {key} in metrics.json")
                mean, std = _mean_std(values) if values else (math.nan, math.nan)
                rows.append(
                    Row(
                        task=task,
                        aligner=aligner,
                        variant=variant,
                        split="dev" if split == "val" else "test",
                        metric=metric,
                        mean=round(mean, 2),
                        std=round(std, 2),
                        n=len(values),
                        seeds=tuple(sorted({h.seed for h in has})),
                        paper_test=(paper.get(aligner) or {}).get(metric) if _only_f(variant) else None,
                        planned=len(planned),
                        missing=dict(sorted(why.items())),
                    )
                )
    return rows


def _prefix_and_name(split: str, metric: str) -> tuple[str, str]:
    """("dev", "raw/map_raw") -> ("val_raw", "map_raw"): the score file's prefix and the metric's own name."""
    return tuple(_metric_key("val" if split == "dev" else split, metric).split("/", 1))  # type: ignore[return-value]


def _baseline_row(row: Row, rows: list[Row], aligner: str, variant: str | None) -> tuple[Row | None, str]:
    """The row `row` is compared with: the baseline aligner's row with the same variant, else the one named by the
    baseline's own variant, else its only row; (None, why) when there is none or the choice is ambiguous."""
    same = [
        r for r in rows
        if r.aligner == aligner and (r.task, r.split, r.metric) == (row.task, row.split, row.metric) and r is not row
    ]  # fmt: skip
    for wanted in (row.variant, variant):
        chosen = [r for r in same if r.variant == wanted]
        if chosen and not chosen[0].n:  # planned, not finished: no other variant stands in for it
            return None, f"no finished {' '.join(filter(None, [aligner, wanted]))} run yet to compare with"
        if chosen:
            return chosen[0], ""
    if len(same) == 1:
        return same[0], ""
    if not same:
        return None, f"no {aligner} row for this task"
    options = " or ".join(sorted(f"""'baseline="{aligner} {r.variant or ""}"'""" for r in same))
    return None, f"several {aligner} rows: name one, {options}"


def compare(rows: list[Row], runs: list[Run], baseline: str) -> list[Row]:
    """Each row with its comparison with the baseline aligner's row (`baseline`: an aligner, optionally with a
    variant, e.g. "softmax" or "softmax F=parikh"): mean difference in points, 95 % bootstrap interval and paired
    randomization p over the units (questions or examples) both were scored on, each unit's score averaged over
    its seeds (`matching.results.significance`), from the runs' `scores/` files."""
    aligner, _, named = baseline.strip().partition(" ")
    variant = named or None
    members: dict[tuple[str, str, str | None], list[Run]] = defaultdict(list)
    for run in runs:
        if not run.missing:
            members[(run.task, run.aligner, run.variant)].append(run)

    def units(row: Row) -> tuple[dict[str, float] | None, int]:
        prefix, name = _prefix_and_name(row.split, row.metric)
        per_seed = [unit_scores(r.path, prefix, name) for r in members[(row.task, row.aligner, row.variant)]]
        have = [u for u in per_seed if u is not None]
        return (seed_mean(have) if have else None), len(have)

    compared = []
    for row in rows:
        comparison = Comparison()
        if row.aligner == aligner and (not variant or row.variant == variant):
            comparison = Comparison(note=BASELINE)
        elif row.n:
            base, why = _baseline_row(row, rows, aligner, variant)
            if base is None:
                comparison = Comparison(note=why)
            else:
                (mine, mine_seeds), (theirs, their_seeds) = units(row), units(base)
                test = paired_test(mine, theirs) if mine is not None and theirs is not None else None
                if test is None:
                    comparison = Comparison(
                        baseline=base.label,
                        note="no per-question scores (runs from before scores/ existed: evaluate their best.ckpt)",
                    )
                else:
                    partial = mine_seeds < row.n or their_seeds < base.n
                    comparison = Comparison(
                        baseline=base.label, diff=round(100 * test.difference, 2), ci_low=round(100 * test.low, 2),
                        ci_high=round(100 * test.high, 2), p_value=float(f"{test.p_value:.3g}"), units=test.units,
                        detectable=round(100 * test.detectable, 2), verdict=test.verdict,
                        note=f"scores of {mine_seeds} of {row.n} and {their_seeds} of {base.n} seeds" if partial
                        else None,
                    )  # fmt: skip
        compared.append(replace(row, comparison=comparison))
    return compared


def _ours(r: Row) -> str:
    if not r.n:
        return "–"
    return f"{r.mean:.2f} ± {r.std:.2f}" if r.n > 1 else f"{r.mean:.2f} (n = 1)"


def _points(x: float) -> str:
    """A difference in points, signed, two decimals; one that rounds to zero is "0.00" (not "-0.00")."""
    text = f"{float(x):+.2f}"
    return "0.00" if text in ("+0.00", "-0.00") else text


def _versus(c: Comparison) -> tuple[str, str, str]:
    """(Δ [95 % CI], p, what the comparison resolves) of a row compared with its baseline."""
    if not c.tested:
        return ("baseline", "–", "–") if c.is_baseline else (c.note or "–", "–", "–")
    detectable = "" if math.isnan(c.detectable) else f"; detectable: {c.detectable:.2f}"
    return (
        f"{_points(c.diff)} [{_points(c.ci_low)}, {_points(c.ci_high)}]",
        f"{c.p_value:.3g}",
        f"{c.verdict}{detectable}",
    )


def to_markdown(rows: list[Row]) -> str:
    """The table; a row short of seeds says so (`1 of 2`) and names the missing ones in its last column; with a
    baseline, each row's difference from it (points, 95 % interval) and its p-value."""
    compared = any(r.comparison is not None for r in rows)
    header = "| task | aligner | variant | split | metric | ours (mean ± std, %) | seeds | paper (test, %) |"
    if compared:
        header += " vs baseline: Δ [95 % CI] | p | verdict; detectable Δ (80 % power) |"
    lines = [header + " missing |", "|---" * (header.count("|")) + "|"]
    for r in rows:
        seeds = f"{r.n} of {r.planned}" if r.missing else f"{r.n}"
        line = (
            f"| {r.task} | {r.aligner} | {r.variant or '–'} | {r.split} | {r.metric} | {_ours(r)} "
            f"| {seeds} | {r.paper_test if r.paper_test is not None else '–'} |"
        )
        if compared:
            delta, p, verdict = _versus(r.comparison or Comparison())
            line += f" {delta} | {p} | {verdict} |"
        lines.append(line + f" {r.missing_text() or '–'} |")
    return "\n".join(lines) + "\n"


#: The columns of report.csv: a row's, then with a baseline its comparison's.
ROW_COLUMNS = ("task", "aligner", "variant", "split", "metric", "mean", "std", "n", "seeds", "paper_test", "planned",
               "missing")  # fmt: skip
COMPARISON_COLUMNS = ("baseline", "diff", "ci_low", "ci_high", "p_value", "units", "detectable", "verdict", "note")


def to_csv(rows: list[Row]) -> str:
    """The table as CSV, one line per row: a value that is not there is an empty cell, the seeds are separated by
    spaces, the missing seeds as in the Markdown table."""

    def cells(r: Row) -> dict[str, object]:
        values = {k: getattr(r, k) for k in ROW_COLUMNS} | {"seeds": " ".join(map(str, r.seeds))}
        values["missing"] = r.missing_text()
        if r.comparison is not None:
            values |= {k: getattr(r.comparison, k) for k in COMPARISON_COLUMNS}
        return {k: "" if v is None else v for k, v in values.items()}

    table = io.StringIO()
    lines = [cells(r) for r in rows]
    writer = csv.DictWriter(table, fieldnames=list(lines[0]) if lines else ["task"])
    writer.writeheader()
    writer.writerows(lines)
    return table.getvalue()


def write_chart(rows: list[Row], path: Path) -> list[str]:
    """One panel per task × metric × split: each row's mean with its std over seeds (no bar for a single seed's
    spread), the paper's test number dashed, and with a baseline each row's Δ, p and verdict above its bar. Each
    aligner keeps one colour in every panel (the baseline hatched); the axis starts at 0, so that a bar's height
    does not exaggerate a difference; a test split is marked final, a dev split as the one models were selected on.
    Returns the panels' titles."""
    require("matplotlib", "plots", "the report's chart").use("Agg")
    import textwrap

    import matplotlib.pyplot as plt

    panels: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.n:
            panels[(r.task, r.metric, r.split)].append(r)
    if not panels:
        return []
    columns = min(3, len(panels))
    height = 1 + -(-len(panels) // columns) * 4.2
    widest = max(len(v) for v in panels.values())
    fig, axes = plt.subplots(-(-len(panels) // columns), columns, figsize=(columns * max(4.0, 1.3 * widest), height),
                             squeeze=False)  # fmt: skip
    palette = plt.get_cmap("tab10").colors
    colours = {a: palette[i % len(palette)] for i, a in enumerate(sorted({r.aligner for r in rows}))}
    for ax, ((task, metric, split), shown) in zip(axes.flat, sorted(panels.items()), strict=False):
        x = range(len(shown))
        means = [r.mean for r in shown]
        errors = [r.std if r.n > 1 else 0.0 for r in shown]
        bars = ax.bar(x, means, yerr=errors, capsize=4, color=[colours[r.aligner] for r in shown])
        for bar, r in zip(bars, shown, strict=True):
            if r.comparison is not None and r.comparison.is_baseline:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
        for i, r in enumerate(shown):
            top = means[i] + errors[i]
            if r.paper_test is not None:
                ax.plot([i - 0.4, i + 0.4], [float(r.paper_test)] * 2, color="black", linestyle="--", linewidth=1)
                top = max(top, float(r.paper_test))
            c = r.comparison or Comparison()
            note = f"n = {r.n}" + ("\nbaseline" if c.is_baseline else "")
            if c.tested:
                verdict = str(c.verdict).replace(" at this size", "")
                note = (f"Δ {_points(c.diff)} vs\n{c.baseline}\np = {c.p_value:.2g}, {verdict}\n"
                        f"detectable {c.detectable:.1f}\n" + note)  # fmt: skip
            ax.text(i, top + 0.5, note, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(x), ["\n".join(textwrap.wrap(r.label, 16)) for r in shown], fontsize=7)
        role = "held-out, final" if split.startswith("test") else "selection"
        ax.set_title(f"{task}: {split} {metric} ({role})", fontsize=10)
        ax.set_ylabel(f"{split} {metric} (%)")
        ax.set_xlabel("aligner and variant (bars: mean ± std over seeds; dashed: paper, test)", fontsize=7)
        high = max([m + e for m, e in zip(means, errors, strict=True)] + [float(r.paper_test or 0) for r in shown])
        ax.set_ylim(0.0, min(100.0, high + 14) if high + 14 < 100 else high + 14)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [f"{task}: {split} {metric}" for task, metric, split in sorted(panels)]


def _short(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _ranked(runs: list[Run], prefix: str) -> dict[str, list[tuple[float, dict[str, str]]]]:
    """{question: [(score averaged over seeds, candidate row), ...] best first}, from the seeds' pair files."""
    totals: dict[str, dict[str, list]] = defaultdict(dict)
    for run in runs:
        for question, candidates in (ranked_answers(run.path, prefix) or {}).items():
            for c in candidates:
                totals[question].setdefault(c["index"], [c, []])[1].append(float(c["score"]))
    return {
        q: sorted(((sum(v) / len(v), c) for c, v in by_index.values()), key=lambda t: (-t[0], t[1]["label"]))
        for q, by_index in totals.items()
    }


def disagreements(rows: list[Row], runs: list[Run], top: int) -> str:
    """Markdown: for each compared row on the dev split's first reported metric, the `top` questions (or examples)
    on which it and its baseline differ most, with what each ranked first (or predicted)."""
    members: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        if not run.missing:
            members[f"{run.task}|{run.label}"].append(run)
    first_metric = {r.task: r.metrics_reported[0] for r in runs if not r.missing}
    intro = (
        "For each row against its baseline: the dev questions (or examples) whose score differs most between the two "
        "(each averaged over seeds), with each model's top answers (✓ correct, score averaged over seeds) or its "
        "predictions. Texts are the models' tokens (lower-cased; `<oov>`: not in the vocabulary)."
    )
    out = ["# Where the aligners disagree", "", intro, ""]
    for row in rows:
        if not row.tested or row.split != "dev" or row.metric != first_metric.get(row.task):
            continue
        c = row.comparison
        prefix, name = _prefix_and_name("dev", row.metric)
        mine, theirs = members[f"{row.task}|{row.label}"], members[f"{row.task}|{c.baseline}"]
        a = seed_mean([u for u in (unit_scores(r.path, prefix, name) for r in mine) if u is not None])
        b = seed_mean([u for u in (unit_scores(r.path, prefix, name) for r in theirs) if u is not None])
        units = sorted(a.keys() & b.keys(), key=lambda u: (-abs(a[u] - b[u]), u))[:top]
        left, right = row.label, str(c.baseline)
        out += [f"## {row.task}, dev {row.metric}: {left} against {right}", "",
                f"Δ {_points(c.diff)} points over {c.units} units, p = {c.p_value}.", ""]  # fmt: skip
        texts = unit_rows(mine[0].path, prefix) or {}
        if mine[0].task_config.get("kind") == "rank":
            ranked_a, ranked_b = _ranked(mine, prefix), _ranked(theirs, prefix)
            for u in units:
                question = (texts.get(u) or {}).get("question", "")
                out += [f"### {u}: {_short(question)}", "",
                        f"{METRIC_COLUMNS[name][0]} {a[u]:.2f} ({left}) against {b[u]:.2f} ({right})", "",
                        f"| rank | {left} | {right} |", "|---|---|---|"]  # fmt: skip
                for i in range(min(3, max(len(ranked_a.get(u, [])), len(ranked_b.get(u, []))))):
                    cells = []
                    for ranked in (ranked_a.get(u, []), ranked_b.get(u, [])):
                        if i < len(ranked):
                            score, c = ranked[i]
                            mark = "✓" if c["label"] == "1" else "✗"
                            cells.append(f"{mark} {_short(c['answer'], 80)} ({score:+.2f})".replace("|", "/"))
                        else:
                            cells.append("")
                    out.append(f"| {i + 1} | {cells[0]} | {cells[1]} |")
                out.append("")
        else:
            predictions = [[unit_rows(r.path, prefix) or {} for r in side] for side in (mine, theirs)]
            out += [f"| a | b | gold | {left} | {right} |", "|---|---|---|---|---|"]
            for u in units:
                text = texts.get(u, {})
                said = []
                for side in predictions:
                    counts = defaultdict(int)
                    for seed_rows in side:
                        if u in seed_rows:
                            counts[seed_rows[u]["predicted"]] += 1
                    said.append(", ".join(f"{label} ×{n}" for label, n in sorted(counts.items(), key=lambda t: -t[1])))
                cells = [_short(text.get("a", ""), 80), _short(text.get("b", ""), 80), text.get("label", ""), *said]
                out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
            out.append("")
    return "\n".join(out) + "\n"


def report(paths: list[Path], out: Path | None = None, baseline: str | None = None, top: int = 10) -> list[Row]:
    """Reports the runs below `paths` (run or sweep folders): report.md, report.csv and report.png in `out` (by
    default the first folder), with a `baseline` (an aligner, optionally with a variant) each row's comparison with
    it and the `top` questions on which they disagree most (disagreements.md); prints the table. Returns its rows."""
    wiring: list[Run] = []
    superseded: list[Run] = []
    runs = find_runs(paths, wiring, superseded)
    if not runs:
        raise MissingFileError(
            f"only wiring or debug runs under {', '.join(map(str, paths))} ({len(wiring)}: "
            f"{wiring_reason(wiring[0].config or {})}, ...); they are not results. Train without debug= to report"
        )
    rows = summarise(runs)
    for r in rows:
        if r.missing:
            log.warning(
                "%s/%s%s %s %s: %d of %d seeds; missing %s. Relaunch the sweep's command (same hydra.sweep.dir) "
                "to finish it: finished runs are skipped", r.task, r.aligner, f" {r.variant}" if r.variant else "",
                r.split, r.metric, r.n, r.planned, r.missing_text(),
            )  # fmt: skip
    if baseline:
        aligner = baseline.split()[0]
        if not any(r.aligner == aligner for r in rows):
            raise ConfigError(
                f"baseline={baseline!r}: no run has the aligner {aligner!r}; the runs have "
                f"{sorted({r.aligner for r in rows})}"
            )
        rows = compare(rows, runs, baseline)
    out = out or (paths[0] if paths[0].is_dir() else paths[0].parent)
    markdown = to_markdown(rows)
    write_text_atomic(out / "report.md", markdown)
    written = [out / "report.md", write_text_atomic(out / "report.csv", to_csv(rows))]
    if baseline:
        written.append(write_text_atomic(out / "disagreements.md", disagreements(rows, runs, top)))
    if any(r.n for r in rows):
        try:
            write_chart(rows, out / "report.png")
            written.append(out / "report.png")
        except MissingExtraError as err:  # the tables are written; only the chart needs matplotlib
            log.warning("no chart: %s", err)
    print(markdown)
    finished = sum(not r.missing for r in runs)
    counted = f"{finished} run{'s' if finished != 1 else ''}"
    if finished < len(runs):
        counted += f" ({len(runs) - finished} missing)"
    if superseded:
        counted += (
            f"; {len(superseded)} unfinished job{'s' if len(superseded) != 1 else ''} of a sweep run again "
            "elsewhere (the same settings and seed), counted once"
        )
        for r in superseded:
            log.info("%s seed %d (%s in %s): run again elsewhere", r.aligner, r.seed, r.missing, r.path)
    if wiring:
        reasons = sorted({wiring_reason(r.config or {}) for r in wiring})
        counted += f"; left out {len(wiring)} wiring/debug run{'s' if len(wiring) != 1 else ''} ({', '.join(reasons)})"
        for r in wiring:
            log.info("left out (a wiring or debug run, not a result): %s", r.path)
    print(f"{counted}; wrote {', '.join(map(str, written))}")
    return rows


def report_command(cfg: DictConfig) -> list[Row]:
    """The `report` command on its composed config (conf/report.yaml)."""
    runs = cfg.runs if isinstance(cfg.runs, ListConfig) else [cfg.runs]
    if not runs:
        raise MissingFileError("runs= names no folder; give a multirun or run directory, or a list: runs=[a,b]")
    baseline = str(cfg.baseline) if cfg.get("baseline") else None
    return report([Path(str(r)) for r in runs], Path(cfg.out) if cfg.out else None, baseline, int(cfg.disagreements))


main = command("report", report_command)

if __name__ == "__main__":
    sys.exit(main())
