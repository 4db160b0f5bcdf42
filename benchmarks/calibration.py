"""How often each test calls a comparison "resolved" on simulated studies with known truth (docs/concepts/comparing.md).

    OMP_NUM_THREADS=1 python benchmarks/calibration.py [--studies 2000] [--bootstrap 300] [--out calibration.md]

Prints (and with --out writes) three Markdown tables from `matching.results.simulation`:
1. the false-positive rate at α = 0.05 per cell (kind, seeds a side, units, seed spread, which null) of the method
   test (the verdicts), the test over units alone (the old verdict), Welch's t over the seeds, and, on the cells
   small enough for it, the two-level bootstrap (seeds then units); with each cell's realised seed spread (points);
2. power curves: the share of studies resolving a true shift, by seeds a side, for the method test;
3. the adaptive study (3 to 10 seeds, 2 at a look): false-positive rate, power and the seeds it used.
A cell is flagged (!) when a rate exceeds 6 % beyond its Monte-Carlo band.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from matching.results.simulation import Cell, grid, monte_carlo_band, rejections, sequential_rejections

SPREAD_NAMES = {(0.0, 0.0): "none", (0.05, 0.0): "stable", (0.36, 0.0): "CoDA-like", (0.05, 0.2): "20 % failing"}


def _rate(rate: float, studies: int) -> str:
    flag = " (!)" if rate > 0.06 + monte_carlo_band(0.06, studies) else ""
    return f"{100 * rate:.1f}{flag}"


def calibration_table(studies: int, bootstrap: int) -> list[str]:
    lines = [
        "| kind | seeds a side | units | seed spread | null | seed sd (points) | method (the verdict) | units alone | "
        "seeds alone (Welch) | two-level bootstrap |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, cell in enumerate(grid()):
        rates = rejections(cell, studies, seed=100 + i, tests=("method", "units", "seeds"))
        boot = None
        if bootstrap and cell.units <= 500 and cell.seeds <= 5:  # resamples × seeds × units per study
            boot = rejections(cell, bootstrap, seed=200 + i, tests=("bootstrap",), resamples=400)["bootstrap"]
        spread = SPREAD_NAMES[(cell.seed_spread, cell.failures)]
        lines.append(
            f"| {cell.kind} | {cell.seeds} | {cell.units} | {spread} | {cell.truth} | {rates['seed_sd']:.1f} | "
            f"{_rate(rates['method'], studies)} | {_rate(rates['units'], studies)} | "
            f"{_rate(rates['seeds'], studies)} | "
            f"{'–' if boot is None else _rate(boot, bootstrap)} |"
        )
    return lines


def power_table(studies: int) -> list[str]:
    shifts = (0.1, 0.2, 0.3, 0.4)
    lines = ["| kind | seed spread | seeds a side | " + " | ".join(f"shift {s} logit" for s in shifts) + " |",
             "|---|---|---|" + "---|" * len(shifts)]  # fmt: skip
    for kind, units in (("classify", 500), ("rank", 122)):
        for spread in ((0.05, 0.0), (0.36, 0.0)):
            for seeds in (2, 3, 5, 10):
                cells = []
                for shift in shifts:
                    cell = Cell(kind, seeds, units, *spread, truth="shifted", shift=shift)
                    r = rejections(cell, studies, seed=300 + seeds, tests=("method",))
                    delta = _delta(cell)
                    cells.append(f"{100 * r['method']:.0f} % (Δ {delta:.1f})")
                lines.append(f"| {kind} | {SPREAD_NAMES[spread]} | {seeds} | " + " | ".join(cells) + " |")
    return lines


def _delta(cell: Cell) -> float:
    """The shift's true difference in points of the metric (a large simulation's mean)."""
    from matching.results.simulation import _scores

    a, b = _scores(replace(cell, seeds=2), 200, np.random.default_rng(0))
    return float(100 * (a.mean() - b.mean()))


def sequential_table(studies: int) -> list[str]:
    lines = ["| kind | seed spread | truth | resolved (%) | seeds a side used (mean) | ran to 10 |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for kind, units in (("classify", 500), ("rank", 122)):
        for spread in ((0.05, 0.0), (0.36, 0.0), (0.05, 0.2)):
            for truth, shift in (("A/A", 0.0), ("equal methods", 0.0), ("shifted", 0.2), ("shifted", 0.4)):
                cell = Cell(kind, 3, units, *spread, truth=truth, shift=shift)
                r = sequential_rejections(cell, studies, 3, 10, 2, seed=400)
                label = truth if truth != "shifted" else f"shift {shift} (Δ {_delta(cell):.1f})"
                rate = _rate(r["resolved"], studies) if truth != "shifted" else f"{100 * r['resolved']:.0f}"
                lines.append(f"| {kind} | {SPREAD_NAMES[spread]} | {label} | {rate} | {r['seeds_used']:.1f} | "
                             f"{100 * r['ran_to_max']:.0f} % |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000, help="simulated studies per cell")
    parser.add_argument("--bootstrap", type=int, default=300, help="studies per cell for the two-level bootstrap")
    parser.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    args = parser.parse_args()
    start = time.perf_counter()
    out = [f"## False-positive rate at α = 0.05 (%), {args.studies} studies a cell "
           f"({args.bootstrap} for the bootstrap)", "", *calibration_table(args.studies, args.bootstrap), "",
           f"## Power of the method test (% resolved), {args.studies // 4} studies a cell", "",
           *power_table(args.studies // 4), "",
           f"## The adaptive study: 3 to 10 seeds a side, 2 at a look, {args.studies // 2} studies a cell", "",
           *sequential_table(args.studies // 2), "",
           f"({time.perf_counter() - start:.0f} s)"]  # fmt: skip
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
