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
its shared output folder as it is, finished or not.

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
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig

from matching.cli import command
from matching.extras import MissingExtraError, require
from matching.files import write_text_atomic
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
    variant: str = ""
    missing: str = ""  # why the run has no metrics (it failed or never started); "" for a finished run

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
#: (already columns) or say where files are.
_NOT_VARIANT = {"seed", "task", "aligner", "experiment", "trainer.enable_progress_bar"}
_NOT_VARIANT_PREFIXES = ("paths.", "hydra")


def _config_value(config: dict | None, key: str) -> str:
    """The value at a dotted key of a resolved config, as JSON (comparable and hashable)."""
    node: object = config or {}
    for part in key.lstrip("+~").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return json.dumps(node, sort_keys=True, default=str)


def _with_variants(runs: list[Run]) -> list[Run]:
    """Each run's variant: the overridden keys whose resolved values are not the same across all the runs."""
    keys = {o.split("=", 1)[0] for r in runs for o in r.overrides if "=" in o} - _NOT_VARIANT
    keys = sorted(k for k in keys if not k.startswith(_NOT_VARIANT_PREFIXES))
    varying = [k for k in keys if len({_config_value(r.config, k) for r in runs}) > 1]

    def spelled(value: object) -> str:  # as on the command line: true/false/null, not Python's reprs
        return json.dumps(value) if value is None or isinstance(value, bool) else str(value)

    def variant(run: Run) -> str:
        return " ".join(f"{k.lstrip('+~')}={spelled(json.loads(_config_value(run.config, k)))}" for k in varying)

    return [replace(r, variant=variant(r)) for r in runs]


def _metric_key(split: str, metric: str) -> str:
    """("val", "raw/map") -> "val_raw/map"; ("val", "map") -> "val/map"."""
    if "/" in metric:
        variant, name = metric.split("/", 1)
        return f"{split}_{variant}/{name}"
    return f"{split}/{metric}"


def _read_run(run_dir: Path, missing: str = "") -> Run:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    aligner = option_name(cfg, "aligner")
    if cfg.get("intra"):
        aligner += "+intra_" + option_name(cfg, "intra")
    metrics = {} if missing else json.loads((run_dir / "metrics.json").read_text())
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = tuple(yaml.safe_load(overrides_file.read_text()) or ()) if overrides_file.exists() else ()
    return Run(run_dir, cfg["task"]["name"], aligner, int(cfg["seed"]), metrics, overrides, cfg, missing=missing)


UNFINISHED = "no metrics.json: failed or stopped before the end"
NOT_STARTED = "not started"


def find_runs(paths: list[Path]) -> list[Run]:
    """Every run directory below `paths`: finished ones, and (as missing) the ones without metrics and the jobs of a
    grid sweep that never started."""
    runs: list[Run] = []
    planned: list[Run] = []
    for root in paths:
        if not root.exists():
            raise FileNotFoundError(f"no such run or multirun directory: {root}")
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
        raise FileNotFoundError(f"no run directories (metrics.json + config.yaml) under {', '.join(map(str, paths))}")
    runs = _with_variants(runs)
    return runs + [_grouped_like_siblings(job, runs) for job in planned]


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


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(runs: list[Run]) -> list[dict[str, object]]:
    """One row per task × aligner × variant × metric × split: mean, std (sample) and number of the seeds that have
    the metric, the seeds planned, the missing ones and why, and the paper's number."""
    groups: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.task, run.aligner, run.variant)].append(run)
    rows = []
    for (task, aligner, variant), members in sorted(groups.items()):
        finished = [r for r in members if not r.missing]
        seeds = sorted(r.seed for r in finished)
        if len(set(seeds)) != len(seeds):
            log.warning("%s/%s %s: several runs share a seed (%s); each counts once", task, aligner, variant, seeds)
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
                why = {}
                for r in members:
                    if r.seed not in {h.seed for h in has}:
                        why.setdefault(r.seed, r.missing or f"no {key} in metrics.json")
                mean, std = _mean_std(values) if values else (math.nan, math.nan)
                rows.append(
                    {
                        "task": task,
                        "aligner": aligner,
                        "variant": variant,
                        "split": "dev" if split == "val" else "test",
                        "metric": metric,
                        "mean": round(mean, 2),
                        "std": round(std, 2),
                        "n": len(values),
                        "seeds": " ".join(map(str, sorted({h.seed for h in has}))),
                        "paper_test": (paper.get(aligner) or {}).get(metric, "") if not variant else "",
                        "planned": len(planned),
                        "missing": "; ".join(f"seed {seed} ({reason})" for seed, reason in sorted(why.items())),
                    }
                )
    return rows


def to_markdown(rows: list[dict[str, object]]) -> str:
    """The table; a row short of seeds says so (`1 of 2`) and names the missing ones in its last column."""
    lines = [
        "| task | aligner | variant | split | metric | ours (mean ± std, %) | seeds | paper (test, %) | missing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours = "–" if not r["n"] else f"{r['mean']:.2f} ± {r['std']:.2f}"
        seeds = f"{r['n']} of {r['planned']}" if r["missing"] else f"{r['n']}"
        lines.append(
            f"| {r['task']} | {r['aligner']} | {r['variant'] or '–'} | {r['split']} | {r['metric']} | {ours} "
            f"| {seeds} | {r['paper_test'] if r['paper_test'] != '' else '–'} | {r['missing'] or '–'} |"
        )
    return "\n".join(lines) + "\n"


def write_chart(rows: list[dict[str, object]], path: Path, headline: dict[str, str]) -> None:
    """Bar chart of each task's `headline` metric per aligner with std error bars (dev, and test where present)."""
    require("matplotlib", "plots", "the report's bar chart").use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["metric"] == headline.get(str(r["task"]), "acc") and r["n"]]
    if not shown:
        return
    labels = ["\n".join(filter(None, [r["task"], r["aligner"], *str(r["variant"]).split(), r["split"]])) for r in shown]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(shown)), 4.0))
    colors = ["tab:blue" if r["split"] == "dev" else "tab:orange" for r in shown]
    ax.bar(range(len(shown)), [r["mean"] for r in shown], yerr=[r["std"] for r in shown], capsize=4, color=colors)
    for i, r in enumerate(shown):
        if r["paper_test"] != "":
            ax.plot([i - 0.4, i + 0.4], [r["paper_test"]] * 2, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(shown)), labels, fontsize=8)
    ax.set_ylabel("% (mean ± std over seeds; dashed: paper test)")
    low = min(r["mean"] - r["std"] for r in shown)
    ax.set_ylim(max(0.0, low - 10), 100)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(paths: list[Path], out: Path | None = None) -> list[dict[str, object]]:
    runs = find_runs(paths)
    rows = summarise(runs)
    for r in rows:
        if r["missing"]:
            log.warning(
                "%s/%s%s %s %s: %d of %d seeds; missing %s. Relaunch the sweep's command (same hydra.sweep.dir) "
                "to finish it: finished runs are skipped", r["task"], r["aligner"], f" {r['variant']}" if r["variant"]
                else "", r["split"], r["metric"], r["n"], r["planned"], r["missing"],
            )  # fmt: skip
    out = out or (paths[0] if paths[0].is_dir() else paths[0].parent)
    markdown = to_markdown(rows)
    write_text_atomic(out / "report.md", markdown)
    table = io.StringIO()
    writer = csv.DictWriter(table, fieldnames=list(rows[0].keys()) if rows else ["task"])
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(out / "report.csv", table.getvalue())
    chart = None
    if any(r["n"] for r in rows):
        try:
            write_chart(rows, out / "report.png", {r.task: r.metrics_reported[0] for r in runs if not r.missing})
            chart = out / "report.png"
        except MissingExtraError as err:  # the tables are written; only the chart needs matplotlib
            log.warning("no chart: %s", err)
    print(markdown)
    finished = sum(not r.missing for r in runs)
    counted = f"{finished} runs" + (f" ({len(runs) - finished} missing)" if finished < len(runs) else "")
    print(f"{counted}; wrote {out / 'report.md'}, {out / 'report.csv'}" + (f", {chart}" if chart else ""))
    return rows


def report_command(cfg: DictConfig) -> list[dict[str, object]]:
    """The `report` command on its composed config (conf/report.yaml)."""
    runs = cfg.runs if isinstance(cfg.runs, ListConfig) else [cfg.runs]
    if not runs:
        raise FileNotFoundError("runs= names no folder; give a multirun or run directory, or a list: runs=[a,b]")
    return report([Path(str(r)) for r in runs], Path(cfg.out) if cfg.out else None)


main = command("report", report_command)

if __name__ == "__main__":
    sys.exit(main())
