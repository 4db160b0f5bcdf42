"""Dev accuracy (or MAP) per epoch of every seed of the centring study's families, centred and not, one panel per
aligner: the per-seed curves before and after centring.

    python benchmarks/centring_curves.py <study folder> --task snli_check --out curves.png

Reads each run's logs/metrics.csv (what Lightning's CSV logger wrote while it trained) under
<study folder>/runs/<task>/<family>/default/seed<N>/.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

PAIRS = [("softmax", "softmax_centred"), ("coda", "coda_centred"), ("conflict", "conflict_centred"),
         ("softmax_conflict", "softmax_conflict_centred")]  # fmt: skip


def curve(run: Path, key: str) -> tuple[list[float], list[float]]:
    epochs, values = [], []
    with (run / "logs" / "metrics.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get(key):
                epochs.append(float(row["epoch"]))
                values.append(100 * float(row[key]))
    return epochs, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--task", default="snli_check")
    parser.add_argument("--metric", default="val/acc")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PAIRS), figsize=(4 * len(PAIRS), 3.4), sharey=True)
    for ax, (plain, centred) in zip(axes, PAIRS, strict=True):
        for family, colour in ((plain, "#999999"), (centred, "#1f5fa8")):
            for run in sorted((args.study / "runs" / args.task / family / "default").glob("seed*")):
                if (run / "logs" / "metrics.csv").is_file():
                    x, y = curve(run, args.metric)
                    ax.plot(
                        x,
                        y,
                        color=colour,
                        lw=1.4,
                        alpha=0.9,
                        label=("centred" if family == centred else "uncentred") if run.name == "seed1" else None,
                    )
        ax.set_title(plain)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"dev {args.metric.split('/')[-1]} (%)")
    axes[0].legend(loc="lower right")
    fig.suptitle(f"{args.task}: dev per epoch, every seed, uncentred (grey) and centred (blue)", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
