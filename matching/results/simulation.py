"""Studies with known truth, to measure how often a test calls a comparison "resolved" (its calibration and power).

Each simulated study has two systems, each trained with R seeds and scored on the same Q units. A unit's score comes
from a logit

    η_s[r, q] = μ_s + u[q] + v_s[q] + b_s[r] + e_s[r, q]

with u the unit's difficulty (shared by both systems), v_s the system's own taste for it (`method_spread`; the two
systems' v differ when they are different methods), b_s the seed effect (`seed_spread`, in logits; a `failures` share
of seeds also loses `failure_drop` logits, as CoDA's unstable seeds do) and e the seed × unit noise (different seeds of
one model disagree on single units). Classification scores a unit 1 with probability sigmoid(η) (accuracy); ranking
scores it sigmoid(η) itself (an AP-like value in (0, 1)). The truth is known: under "A/A" both systems are one method
(the same μ and v: two groups of seeds of one configuration); under "equal methods" they are two methods (their own v)
with the same μ; a power cell shifts μ_A.

The tests compared on the same studies (`TESTS`):
- `method`: the method-level test of `matching.results.significance` (what every verdict uses);
- `units`: the conditional test over units of the seed-averaged differences (the framework's test before it counted
  the seeds); here its normal approximation, which a randomization test over hundreds of units matches;
- `seeds`: Welch's t over the seeds' metrics (the units fixed);
- `bootstrap`: a two-level bootstrap interval (seeds within each system, then units), "resolved" when it excludes 0
  (only where asked: it costs resamples × seeds × units per study).

`calibration` runs a grid of cells and returns one record per cell; `benchmarks/calibration.py` prints the calibration
tables (docs/archive/2026-11-concepts.md keeps the sitting of 2026-11-26) from it; tests/test_calibration.py fails if
the method test's false-positive rate leaves its Monte-Carlo band.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from matching.results.sequential import futile, looks, nominal_levels
from matching.results.significance import ALPHA, t_p_value, variance_parts

TESTS = ("method", "units", "seeds", "bootstrap")


@dataclass(frozen=True)
class Cell:
    """One cell of the grid: what kind of study, how many seeds and units, how unstable over seeds, what truth."""

    kind: str = "classify"  # classify (0/1 per unit) or rank (an AP-like score in (0, 1))
    seeds: int = 3
    units: int = 500
    seed_spread: float = 0.0  # sd of the seed effect, logits
    failures: float = 0.0  # the share of seeds that also lose failure_drop logits
    failure_drop: float = 1.0
    truth: str = "A/A"  # "A/A" (one method), "equal methods" (two, same mean) or "shifted" (μ_A − μ_B = shift)
    shift: float = 0.0  # logits
    unit_spread: float = 1.5  # sd of u
    method_spread: float = 0.5  # sd of v (different methods' own taste per unit)
    noise: float = 1.0  # sd of e


def _scores(cell: Cell, studies: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(studies, R, Q) score tables of the two systems."""
    q, r = cell.units, cell.seeds
    u = rng.normal(0, cell.unit_spread, (studies, 1, q))
    v_b = rng.normal(0, cell.method_spread, (studies, 1, q))
    v_a = v_b if cell.truth == "A/A" else rng.normal(0, cell.method_spread, (studies, 1, q))
    tables = []
    for v, mu in ((v_a, cell.shift if cell.truth == "shifted" else 0.0), (v_b, 0.0)):
        seed = rng.normal(0, cell.seed_spread, (studies, r, 1))
        seed -= cell.failure_drop * (rng.random((studies, r, 1)) < cell.failures)
        logit = mu + u + v + seed + rng.normal(0, cell.noise, (studies, r, q))
        p = 1 / (1 + np.exp(-logit))
        tables.append((rng.random(p.shape) < p).astype(np.float64) if cell.kind == "classify" else p)
    return tables[0], tables[1]


def _welch_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ma, mb = a.mean(axis=-1), b.mean(axis=-1)
    va, vb = ma.var(axis=-1, ddof=1) / ma.shape[-1], mb.var(axis=-1, ddof=1) / mb.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        df = (va + vb) ** 2 / (va**2 / (ma.shape[-1] - 1) + vb**2 / (mb.shape[-1] - 1))
    return t_p_value(ma.mean(axis=-1) - mb.mean(axis=-1), va + vb, np.nan_to_num(df, nan=1.0))


def _units_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = a.mean(axis=-2) - b.mean(axis=-2)
    se = d.std(axis=-1, ddof=1) / np.sqrt(d.shape[-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.abs(d.mean(axis=-1)) / se
    return np.where(se > 0, 2 * (1 - _normal_cdf(z)), 1.0)


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(z)


def _bootstrap_excludes_zero(a: np.ndarray, b: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Whether the two-level bootstrap's 95 % percentile interval of Δ excludes 0, per study."""
    studies, ra, q = a.shape
    rb = b.shape[1]
    out = np.empty(studies, dtype=bool)
    for s in range(studies):
        seeds_a = rng.integers(0, ra, (resamples, ra))
        seeds_b = rng.integers(0, rb, (resamples, rb))
        units = rng.integers(0, q, (resamples, q))
        mean_a = a[s][seeds_a].mean(axis=1)  # (resamples, Q): the resampled seeds' mean per unit
        mean_b = b[s][seeds_b].mean(axis=1)
        d = np.take_along_axis(mean_a - mean_b, units, axis=1).mean(axis=1)
        low, high = np.quantile(d, [ALPHA / 2, 1 - ALPHA / 2])
        out[s] = low > 0 or high < 0
    return out


def rejections(cell: Cell, studies: int, seed: int = 0, tests: Iterable[str] = ("method", "units", "seeds"),
               resamples: int = 400, batch: int = 200) -> dict[str, float]:  # fmt: skip
    """The share of `studies` simulated studies of `cell` in which each test says "resolved" at α = 0.05, and the
    seeds' realised spread (`seed_sd`, points of the metric, the mean over studies of the sd over seeds)."""
    rng = np.random.default_rng(seed)
    tests = tuple(tests)
    counts = dict.fromkeys(tests, 0)
    seed_sd = []
    done = 0
    while done < studies:
        n = min(batch, studies - done)
        a, b = _scores(cell, n, rng)
        seed_sd.append(100 * a.mean(axis=-1).std(axis=-1, ddof=1))
        if "method" in tests:
            parts = variance_parts(a, b)
            counts["method"] += int((t_p_value(parts.difference, parts.variance, parts.df) < ALPHA).sum())
        if "units" in tests:
            counts["units"] += int((_units_p(a, b) < ALPHA).sum())
        if "seeds" in tests:
            counts["seeds"] += int((_welch_p(a, b) < ALPHA).sum())
        if "bootstrap" in tests:
            counts["bootstrap"] += int(_bootstrap_excludes_zero(a, b, resamples, rng).sum())
        done += n
    return {name: counts[name] / studies for name in tests} | {"seed_sd": float(np.concatenate(seed_sd).mean())}


def sequential_rejections(cell: Cell, studies: int, minimum: int, maximum: int, step: int, seed: int = 0,
                          batch: int = 200) -> dict[str, float]:  # fmt: skip
    """The adaptive study's rule on `cell`: look after `minimum` seeds a side, add `step` while undecided, up to
    `maximum`; resolved at look k when the method test's p is below the look's nominal level
    (`matching.results.sequential`), stopped early for futility when `maximum` seeds could not resolve the observed
    Δ. Returns the share resolved, the mean seeds a side used, and the share that ran to the maximum."""
    schedule = looks(minimum, maximum, step)
    levels = nominal_levels(tuple(schedule))
    rng = np.random.default_rng(seed)
    big = Cell(**(asdict(cell) | {"seeds": maximum}))
    resolved = used = full = 0
    done = 0
    while done < studies:
        n = min(batch, studies - done)
        a, b = _scores(big, n, rng)
        decided = np.zeros(n, dtype=bool)
        stop_at = np.full(n, maximum)
        for k, (r, level) in enumerate(zip(schedule, levels, strict=True)):
            parts = variance_parts(a[:, :r], b[:, :r])
            p = t_p_value(parts.difference, parts.variance, parts.df)
            hit = ~decided & (p < level)
            resolved += int(hit.sum())
            stop_at[hit] = r
            decided |= hit
            if k < len(schedule) - 1:  # futility: even `maximum` seeds would not reach 80 % power for |Δ|
                hopeless = ~decided & futile(parts, maximum)
                stop_at[hopeless] = r
                decided |= hopeless
        used += int(stop_at.sum())
        full += int((stop_at == maximum).sum())
        done += n
    return {"resolved": resolved / studies, "seeds_used": used / studies, "ran_to_max": full / studies}


def monte_carlo_band(rate: float, studies: int) -> float:
    """The half-width of a 95 % Monte-Carlo band around `rate` estimated from `studies` studies."""
    return 1.96 * float(np.sqrt(rate * (1 - rate) / studies))


def grid(fast: bool = False) -> list[Cell]:
    """The calibration grid: both kinds, 2 to 10 seeds, seed spreads from none to CoDA's at the demo's settings,
    both kinds of null. `fast`: the cells the default test suite runs."""
    spreads = {"none": (0.0, 0.0), "stable": (0.05, 0.0), "unstable": (0.36, 0.0), "failures": (0.05, 0.2)}
    seeds = (2, 3, 5) if fast else (2, 3, 5, 10)
    cells = []
    for kind, units in (("classify", 500), ("rank", 122)) if not fast else (("classify", 300), ("rank", 122)):
        for spread, failures in spreads.values():
            for r in seeds:
                for truth in ("A/A", "equal methods"):
                    cells.append(Cell(kind, r, units, spread, failures, truth=truth))
        if not fast:  # a large evaluation set: where the units-only test fails worst
            for name in ("stable", "unstable"):
                spread, failures = spreads[name]
                cells.append(Cell(kind, 3, 2000 if kind == "classify" else 600, spread, failures))
    return cells
