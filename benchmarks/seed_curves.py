"""Dev accuracy (or MAP) per epoch of every seed of a study's families, one panel per pair of families: the per-seed
curves of a family (grey) and of its variant (blue), e.g. an aligner uncentred and centred, or ungated and gated.

    python benchmarks/seed_curves.py <study folder> --task snli_check --out curves.png      (the centring study's pairs)
    python benchmarks/seed_curves.py <study folder> --task snli_check --variant gated --out curves.png \
        --panel softmax_centred,softmax_centred_gated --panel coda_centred,coda_centred_gated ...

Reads each run's logs/metrics.csv (what Lightning's CSV logger wrote while it trained) under
<study folder>/runs/<task>/<family>/default/seed<N>/; a study page's folder (docs/studies/<name>) holds them too.
The metric is the runs' monitored one (`task.monitor` in their config.yaml: accuracy, MAP) unless `--metric` names
another. The best checkpoint's evaluation after training, logged last with its own (earlier) epoch, is not a point of
the curve.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import yaml

#: The centring study's pairs (its default): each aligner uncentred, then centred.
CENTRING = [("softmax", "softmax_centred"), ("coda", "coda_centred"), ("conflict", "conflict_centred"),
            ("softmax_conflict", "softmax_conflict_centred")]  # fmt: skip


def curve(run: Path, key: str) -> tuple[list[float], list[float]]:
    """The run's dev `key` after each epoch, in the order trained. A row whose epoch is not after the last one kept is
    the best checkpoint's evaluation after training (logged at its own epoch): drawn, it was a line back to it."""
    epochs, values = [], []
    with (run / "logs" / "metrics.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get(key) and (not epochs or float(row["epoch"]) > epochs[-1]):
                epochs.append(float(row["epoch"]))
                values.append(100 * float(row[key]))
    return epochs, values


def monitored(runs: list[Path]) -> str:
    """The metric the runs were selected on (`task.monitor` of the first one's config.yaml), val/acc without one."""
    config = runs[0] / "config.yaml" if runs else None
    if config is None or not config.is_file():
        return "val/acc"
    task = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("task") or {}
    return str(task.get("monitor") or "val/acc")


def runs_of(study: Path, task: str, family: str) -> list[Path]:
    """A family's runs with their logged curves, by seed number."""
    found = (study / "runs" / task / family / "default").glob("seed*")
    return sorted((r for r in found if (r / "logs" / "metrics.csv").is_file()), key=lambda r: int(r.name[4:]))


def legend_labels(variant: str, plain: str | None = None) -> tuple[str, str]:
    """The legend's names of a panel's two families: the first is "not <variant>" unless named (10 epochs)."""
    return plain or f"not {variant}", variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--task", default="snli_check")
    parser.add_argument("--metric", help="a logged dev metric (val/map); default: the runs' task.monitor")
    parser.add_argument("--panel", action="append", default=[], help="FAMILY,VARIANT (repeat; default: centring's)")
    parser.add_argument("--variant", default="centred", help="what the second family of a panel is, for the legend")
    parser.add_argument("--plain", help="what the first family of a panel is, for the legend (default: not VARIANT)")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    args = parser.parse_args()
    panels = [tuple(p.split(",")) for p in args.panel] or CENTRING
    if any(len(p) != 2 for p in panels):
        sys.exit(f"--panel takes two families, FAMILY,VARIANT (coda,coda_centred); got {args.panel}")
    runs = {family: runs_of(args.study, args.task, family) for panel in panels for family in panel}
    empty = [family for family, found in runs.items() if not found]
    if empty:
        sys.exit(f"no run with logs/metrics.csv under {args.study}/runs/{args.task}/<family>/default/ for: "
                 f"{', '.join(empty)}; name the study's folder and families as its page does")  # fmt: skip
    metric = args.metric or monitored(next(iter(runs.values())))
    plain_label, variant_label = legend_labels(args.variant, args.plain)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(len(panels), 4)
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.4 * rows), sharey=True, squeeze=False)
    for ax, (plain, variant) in zip(axes.flat, panels, strict=False):
        for family, colour, label in ((plain, "#999999", plain_label), (variant, "#1f5fa8", variant_label)):
            for i, run in enumerate(runs[family]):
                x, y = curve(run, metric)
                ax.plot(x, y, color=colour, lw=1.4, alpha=0.9, label=label if i == 0 else None)
        ax.set_title(plain)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"dev {metric.split('/')[-1]} (%)")
    axes[0, 0].legend(loc="lower right")
    fig.suptitle(f"{args.task}: dev per epoch, every seed, {plain_label} (grey) and {variant_label} (blue)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
