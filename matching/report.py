"""`python -m matching.report <multirun dir or run dirs> [--out DIR]`: a results table over seeds.

Collects every run directory below the given paths (a folder with `metrics.json` and `config.yaml`), groups
the runs by task × aligner × variant, and prints (and writes as Markdown and CSV) mean ± std and the number of seeds of
each metric, with the CoDA paper's numbers beside ours; plus a PNG bar chart with error bars.

The variant of a run is made of the keys overridden on the command line (`.hydra/overrides.yaml`) whose values
in the resolved configs differ between the runs reported, seeds aside: an ablation sweep such as
`aligner.center_e=false,true aligner.gate=none,center` gets one row per setting, a plain aligner comparison gets
none, and a run that spelled out a default (`loss.class_weights=null`) shares the row of runs that did not.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

#: Aligner config name of each aligner class (the `aligner=` value that produced a run).
ALIGNER_NAMES = {
    "matching.aligners.SoftmaxAligner": "softmax",
    "matching.aligners.CoDAAligner": "coda",
    "matching.aligners.ConflictAligner": "conflict",
    "matching.aligners.SoftmaxConflictAligner": "softmax_conflict",
}

#: Metrics reported per task (dev for selection, test for final numbers), as logged.
TASK_METRICS = {
    "snli": ["acc"],
    "mnli": ["acc", "mismatched/acc"],
    "scitail": ["acc"],
    "dnli": ["acc"],
    "trecqa": ["map", "mrr", "raw/map_raw", "raw/mrr_raw"],  # clean-dev filtered; raw-dev over every question
    "wikiqa": ["map", "mrr"],
    "ubuntu": ["top1", "top2", "top5"],
}

#: CoDA paper, Tables 2-3 (test numbers, in %): D-ATT (softmax) and D-ATT + CoDA.
PAPER = {
    ("snli", "softmax", "acc"): 84.61,
    ("snli", "coda", "acc"): 85.71,
    ("mnli", "softmax", "acc"): 71.34,
    ("mnli", "softmax", "mismatched/acc"): 71.97,
    ("mnli", "coda", "acc"): 72.19,
    ("mnli", "coda", "mismatched/acc"): 72.45,
    ("scitail", "softmax", "acc"): 82.0,
    ("scitail", "coda", "acc"): 83.6,
    ("dnli", "softmax", "acc"): 88.2,
    ("dnli", "coda", "acc"): 88.8,
    ("trecqa", "softmax", "map"): 80.6,
    ("trecqa", "softmax", "mrr"): 83.9,
    ("trecqa", "coda", "map"): 80.0,
    ("trecqa", "coda", "mrr"): 84.5,
    ("wikiqa", "softmax", "map"): 66.4,
    ("wikiqa", "softmax", "mrr"): 68.0,
    ("wikiqa", "coda", "map"): 70.5,
    ("wikiqa", "coda", "mrr"): 72.4,
    ("ubuntu", "softmax", "top1"): 51.8,
    ("ubuntu", "coda", "top1"): 52.5,
}


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

    return [Run(r.path, r.task, r.aligner, r.seed, r.metrics, r.overrides, r.config, variant(r)) for r in runs]


def _metric_key(split: str, metric: str) -> str:
    """("val", "raw/map") -> "val_raw/map"; ("val", "map") -> "val/map"."""
    if "/" in metric:
        variant, name = metric.split("/", 1)
        return f"{split}_{variant}/{name}"
    return f"{split}/{metric}"


def find_runs(paths: list[Path]) -> list[Run]:
    runs = []
    for root in paths:
        if not root.exists():
            raise FileNotFoundError(f"no such run or multirun directory: {root}")
        candidates = (
            [root] if (root / "metrics.json").exists() else sorted(p.parent for p in root.rglob("metrics.json"))
        )
        for run_dir in candidates:
            config_file = run_dir / "config.yaml"
            if not config_file.exists():
                log.warning("skipping %s: metrics.json without config.yaml (not a matching run directory)", run_dir)
                continue
            cfg = yaml.safe_load(config_file.read_text())
            target = cfg["aligner"]["_target_"]
            aligner = ALIGNER_NAMES.get(target, target.rsplit(".", 1)[-1])
            if cfg.get("intra"):
                aligner += "+intra_" + ALIGNER_NAMES.get(cfg["intra"]["_target_"], "custom")
            metrics = json.loads((run_dir / "metrics.json").read_text())
            overrides_file = run_dir / ".hydra" / "overrides.yaml"
            overrides = tuple(yaml.safe_load(overrides_file.read_text()) or ()) if overrides_file.exists() else ()
            runs.append(Run(run_dir, cfg["task"]["name"], aligner, int(cfg["seed"]), metrics, overrides, cfg))
    if not runs:
        raise FileNotFoundError(f"no run directories (metrics.json + config.yaml) under {', '.join(map(str, paths))}")
    return _with_variants(runs)


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(runs: list[Run]) -> list[dict[str, object]]:
    """One row per task × aligner × variant × metric × split: mean, std (sample), number of seeds, paper number."""
    groups: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.task, run.aligner, run.variant)].append(run)
    rows = []
    for (task, aligner, variant), members in sorted(groups.items()):
        seeds = sorted(r.seed for r in members)
        if len(set(seeds)) != len(seeds):
            log.warning("%s/%s %s: several runs share a seed (%s); each counts once", task, aligner, variant, seeds)
        for metric in TASK_METRICS.get(task, ["acc"]):
            for split in ("val", "test"):
                key = _metric_key(split, metric)
                values = [100 * r.metrics[key] for r in members if key in r.metrics and not math.isnan(r.metrics[key])]
                if not values:
                    continue
                mean, std = _mean_std(values)
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
                        "seeds": " ".join(map(str, seeds)),
                        "paper_test": PAPER.get((task, aligner, metric), "") if not variant else "",
                    }
                )
    return rows


def to_markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| task | aligner | variant | split | metric | ours (mean ± std, %) | seeds | paper (test, %) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['aligner']} | {r['variant'] or '–'} | {r['split']} | {r['metric']} "
            f"| {r['mean']:.2f} ± {r['std']:.2f} "
            f"| {r['n']} | {r['paper_test'] if r['paper_test'] != '' else '–'} |"
        )
    return "\n".join(lines) + "\n"


def write_chart(rows: list[dict[str, object]], path: Path) -> None:
    """Bar chart of the dev metric of each task × aligner with std error bars (and test where present)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["metric"] == TASK_METRICS.get(str(r["task"]), ["acc"])[0]]
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
    out = out or (paths[0] if paths[0].is_dir() else paths[0].parent)
    out.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(rows)
    (out / "report.md").write_text(markdown)
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["task"])
        writer.writeheader()
        writer.writerows(rows)
    if rows:
        write_chart(rows, out / "report.png")
    print(markdown)
    print(
        f"{len(runs)} runs; wrote {out / 'report.md'}, {out / 'report.csv'}"
        + (f", {out / 'report.png'}" if rows else "")
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m matching.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="multirun directories or run directories")
    parser.add_argument("--out", type=Path, default=None, help="where to write report.{md,csv,png}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        report(args.paths, args.out)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
