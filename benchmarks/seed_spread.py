"""Each aligner's spread over seeds, drawn: one dot per seed, per family and task (docs/concepts/aligners.md).

    python benchmarks/seed_spread.py docs/studies/design_space_snli docs/studies/design_space_wikiqa \
        [--sweep "demo sample|CoDA|outputs/aa_coda" ...] --out docs/seed_spread.png

Reads the per-seed dev values of the first metric of each study page given (its study.csv), and of each `--sweep`
("panel|label|folder": the runs of one configuration, their metrics.json's monitored value), and draws one panel per
task: every family's seeds as dots, its mean as a bar, sorted by the spread (sample std), with the std printed.
Prints the table it drew.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path


def from_page(folder: Path) -> dict[str, dict[str, list[float]]]:
    """{panel: {family: per-seed values}} of a study page's dev rows, its first metric."""
    rows = list(csv.DictReader((folder / "study.csv").open(encoding="utf-8")))
    dev = [r for r in rows if r["split"] == "dev"]
    if not dev:
        return {}
    first = dev[0]["metric"]
    out: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for r in dev:
        if r["metric"] == first:
            values = [float(v) for v in r["per_seed"].split(",") if v.strip() not in ("", "–")]
            out[f"{r['task']} dev {first} ({folder.name})"][r["label"]] = values
    return out


def from_sweep(spec: str) -> tuple[str, str, list[float]]:
    panel, label, folder = spec.split("|")
    values = []
    for metrics in sorted(Path(folder).glob("*/metrics.json")):
        data = json.loads(metrics.read_text())
        key = next((k for k in ("val/acc", "val/map") if k in data), None)
        if key is not None:
            values.append(100 * float(data[key]))
    return panel, label, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", type=Path, nargs="*")
    parser.add_argument("--sweep", action="append", default=[], help='"panel|label|folder of one configuration"')
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    panels: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for page in args.pages:
        for panel, families in from_page(page).items():
            panels[panel] |= families
    for spec in args.sweep:
        panel, label, values = from_sweep(spec)
        if values:
            panels[panel][label] = values
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tallest = max(len(f) for f in panels.values())
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 0.8 + 0.32 * tallest), squeeze=False)
    for ax, (panel, families) in zip(axes.flat, panels.items(), strict=True):
        ordered = sorted(families.items(), key=lambda kv: statistics.stdev(kv[1]) if len(kv[1]) > 1 else 0.0)
        print(f"\n{panel}")
        for y, (label, values) in enumerate(ordered):
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            mean = statistics.fmean(values)
            ax.plot(values, [y] * len(values), "o", color="tab:blue", alpha=0.7, markersize=4)
            ax.plot([mean, mean], [y - 0.3, y + 0.3], color="black", linewidth=1.5)
            print(f"  {label}: {', '.join(f'{v:.2f}' for v in values)}; mean {mean:.2f}, std {std:.2f}")
        names = [f"{label} (sd {statistics.stdev(v):.2f}, n={len(v)})" for label, v in ordered]
        ax.set_yticks(range(len(ordered)), names, fontsize=7)
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("dev score per seed (%); bar: mean", fontsize=8)
        ax.grid(axis="x", color="0.9")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
