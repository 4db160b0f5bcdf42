"""What token centring changes in the alignment matrices: for each run given, over dev pairs, the share of CoDA's M
cells below 0 (CoDA can only subtract where M < 0), the mean of E (the offset centring removes), and for every
aligner how alike the rows of its weights are (the mean cosine between the rows of a pair's matrix: 1 when every
token of a receives the same mixture of b, a prior over b's tokens rather than an alignment).

    python benchmarks/centring_matrices.py --pairs 300 <run dir> [<run dir> ...]

Dev pairs: the first --pairs of each run's own dev scores (scores/val.csv), so every run sees the same pairs when
they share a dev split. Prints one Markdown row per run.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matching.matcher import Matcher  # noqa: E402


def row_likeness(m: np.ndarray) -> float:
    """Mean cosine between the rows of one (La, Lb) matrix (rows of zeros left out); NaN with fewer than 2 rows."""
    rows = m[np.abs(m).sum(axis=1) > 0]
    if len(rows) < 2:
        return float("nan")
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    cos = unit @ unit.T
    return float((cos.sum() - len(rows)) / (len(rows) * (len(rows) - 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    parser.add_argument("--pairs", type=int, default=300)
    args = parser.parse_args()
    print("| run | aligner, centred | matrix | M < 0 (share of cells) | mean tanh(E) | rows alike (mean cosine) |")
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        matcher = Matcher.load(run)
        with (run / "scores" / "val.csv").open(newline="") as f:
            pairs = [(r["a"], r["b"]) for r, _ in zip(csv.DictReader(f), range(args.pairs), strict=False)]
        cfg = matcher.config
        centred = bool(cfg.aligner.get("center_tokens", False))
        stats: dict[str, dict[str, list[float]]] = {}
        for a, b in pairs:
            for name, m in matcher.align(a, b)["matrices"].items():
                if name in ("gate",):
                    continue
                s = stats.setdefault(name, {"neg": [], "mean": [], "alike": []})
                s["neg"].append(float((m < 0).mean()))
                s["mean"].append(float(m.mean()))
                s["alike"].append(row_likeness(m))
        label = f"{cfg.aligner._target_.rsplit('.', 1)[-1]}, {'centred' if centred else 'uncentred'}"
        for name, s in stats.items():
            alike = statistics.fmean(x for x in s["alike"] if x == x)
            neg = f"{100 * statistics.fmean(s['neg']):.1f} %" if name == "M" else "–"
            mean = f"{statistics.fmean(s['mean']):.3f}" if name == "affinity" else "–"
            print(f"| {run.parent.parent.name}/{run.name} | {label} | {name} | {neg} | {mean} | {alike:.3f} |")


if __name__ == "__main__":
    main()
