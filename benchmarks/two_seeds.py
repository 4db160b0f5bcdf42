"""Can a verdict be both calibrated and useful with two seeds a side? The method-level test and two repairs of it,
on simulated studies with known truth (matching.results.simulation), including cells where seeds nearly agree and
accuracy's granularity on a few hundred units.

    OMP_NUM_THREADS=1 python benchmarks/two_seeds.py [--studies 4000]

Prints, per cell, the share of studies called "resolved" at α = 0.05: under a null (A/A, equal methods) the
false-positive rate, under a shift the power. The rules:
- `the test`: matching.results.significance.variance_parts as it is (what a verdict with 3+ seeds uses);
- `floor, df R−1`: each side's seed spread s² raised to at least MS_e/Q (a seed's metric varies at least by its own
  noise over the units), its degrees of freedom kept at R − 1;
- `floor, df of MS_e`: the same floor, counted with MS_e's (R − 1)(Q − 1) degrees of freedom where it applies.
docs/concepts/comparing.md ("Two seeds a side") reads the table (its sitting: docs/archive/2026-11-concepts.md): the
first repair is calibrated and useless, the second useful and at the edge of calibrated, so a verdict needs three seeds
a side (significance.MIN_SEEDS).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matching.results.significance import ALPHA, t_p_value, variance_parts  # noqa: E402
from matching.results.simulation import Cell, _scores  # noqa: E402

CELLS = [
    Cell("classify", 2, 500, 0.0, noise=1.0),
    Cell("classify", 2, 500, 0.02, unit_spread=4, noise=0.3),  # seeds nearly agree: most units easy or hard
    Cell("classify", 2, 500, 0.0, unit_spread=8, noise=0.1),
    Cell("classify", 2, 200, 0.0, unit_spread=6, noise=0.2),  # accuracy's granularity on 200 units
    Cell("rank", 2, 122, 0.05, noise=0.3),
    Cell("classify", 2, 500, 0.36),  # CoDA-like unstable seeds
    Cell("classify", 2, 500, 0.05, 0.2),  # 20 % of seeds failing
    Cell("classify", 2, 500, 0.05, noise=0.3, truth="equal methods"),
    Cell("classify", 2, 500, 0.02, unit_spread=4, noise=0.3, truth="shifted", shift=0.2),
    Cell("classify", 2, 500, 0.02, unit_spread=4, noise=0.3, truth="shifted", shift=0.4),
    Cell("classify", 2, 500, 0.02, unit_spread=1.5, noise=1.0, truth="shifted", shift=0.3),
    Cell("classify", 2, 500, 0.36, truth="shifted", shift=0.6),
]


def _interaction(y: np.ndarray) -> np.ndarray:
    r, q = y.shape[-2:]
    resid = y - y.mean(axis=-1, keepdims=True) - y.mean(axis=-2, keepdims=True) + y.mean(axis=(-2, -1), keepdims=True)
    return (resid**2).sum(axis=(-2, -1)) / ((r - 1) * (q - 1))


def floored(a: np.ndarray, b: np.ndarray, df_of_floor: bool) -> np.ndarray:
    """Rejections of the test with each side's seed spread floored at MS_e/Q."""
    parts = variance_parts(a, b)
    (ra, q), rb = a.shape[-2:], b.shape[-2]
    s2a, s2b = np.asarray(parts.spread_a), np.asarray(parts.spread_b)
    fa, fb = _interaction(a) / q, _interaction(b) / q
    dfa = np.where((s2a < fa) & df_of_floor, (ra - 1.0) * (q - 1), ra - 1.0)
    dfb = np.where((s2b < fb) & df_of_floor, (rb - 1.0) * (q - 1), rb - 1.0)
    seed_a, seed_b = np.maximum(s2a, fa) / ra, np.maximum(s2b, fb) / rb
    variance = seed_a + seed_b + parts.unit_part
    denominator = seed_a**2 / dfa + seed_b**2 / dfb + parts.unit_df_terms
    df = np.maximum(np.where(denominator > 0, variance**2 / np.where(denominator > 0, denominator, 1.0), np.inf), 1.0)
    return t_p_value(parts.difference, variance, df) < ALPHA


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=4000)
    args = parser.parse_args()
    print("| kind | units | seed spread | unit spread | noise | truth | seed sd (points) | Δ (points) | V = 0 "
          "| the test | floor, df R−1 | floor, df of MS_e |")  # fmt: skip
    print("|---" * 12 + "|")
    for cell in CELLS:
        a, b = _scores(cell, args.studies, np.random.default_rng(1))
        parts = variance_parts(a, b)
        rates = [t_p_value(parts.difference, parts.variance, parts.df) < ALPHA, floored(a, b, False),
                 floored(a, b, True)]  # fmt: skip
        truth = cell.truth + (f" {cell.shift:g}" if cell.truth == "shifted" else "")
        spread = f"{cell.seed_spread:g}" + (f", {cell.failures:.0%} failing" if cell.failures else "")
        sd = 100 * a.mean(-1).std(-1, ddof=1).mean()
        print(f"| {cell.kind} | {cell.units} | {spread} | {cell.unit_spread:g} | {cell.noise:g} | {truth} | {sd:.2f} | "
              f"{100 * float(np.mean(parts.difference)):.2f} | {100 * float(np.mean(parts.variance == 0)):.1f} % | "
              + " | ".join(f"{100 * float(np.mean(r)):.1f} %" for r in rates) + " |")  # fmt: skip


if __name__ == "__main__":
    main()
