"""The rule by which a study adds seeds and still keeps its error rate: group-sequential looks with alpha spending.

A study with `study.seeds: {min: 3, max: 10, step: 2}` looks at its comparisons after 3 seeds a family, then after
5, 7, 9 and 10 (`looks`), and stops adding seeds to a comparison once it is decided. Looking five times at a test
of level 0.05 would call a true null "resolved" at one look or another far more often than 5 % of the time, so each
look gets a share of α by Lan & DeMets' O'Brien–Fleming-type spending function, α(t) = 2 − 2Φ(z_{1−α/2} / √t),
where t is the look's information fraction, here its seeds over the maximum (R_k / R_max). The spending is steep at
first: an early look resolves only a large, clear difference, and the last look's level stays close to α.

The nominal levels (`nominal_levels`) are the two-sided p below which a look resolves: for the canonical joint
distribution of the looks' statistics (Z_k = W(t_k)/√t_k, Brownian motion W), the level of look k is set so that
the probability of crossing first at look k is α(t_k) − α(t_{k−1}); computed by a fixed-seed Monte Carlo of that
distribution (400,000 paths; the same levels every time). Where the units' share of a comparison's variance does
not shrink with more seeds, successive looks are more alike than t_k = R_k / R_max says, and these levels are
conservative. A comparison whose observed Δ the maximum number of seeds could not resolve stops early ("futility");
that never adds a false "resolved". `matching.results.simulation` checks the whole rule's error rate on studies with
known truth (benchmarks/calibration.py; its sitting in docs/archive/2026-11-concepts.md).
"""

from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

import numpy as np

from matching.results.significance import ALPHA, POWER, VarianceParts, power_z

PATHS = 400_000
SEED = 0


def looks(minimum: int, maximum: int, step: int) -> list[int]:
    """The seeds a side at each look: minimum, minimum + step, ..., and maximum last."""
    points = list(range(minimum, maximum, max(1, step)))
    return [*points, maximum] if not points or points[-1] != maximum else points


def futile(parts: VarianceParts, maximum: int, alpha: float = ALPHA, power: float = POWER):
    """Whether `maximum` seeds a side could not find the observed Δ̂: the difference they would detect with 80 %
    power, (z_{1−α/2} + z_power) · √V(maximum), is more than twice |Δ̂| (lenient, so that a real difference that
    looks small at first is not dropped early). Elementwise for a batch of comparisons."""
    z = power_z(alpha, power)
    at_max = (np.asarray(parts.spread_a) + np.asarray(parts.spread_b)) / maximum + np.asarray(parts.unit_part)
    return z * np.sqrt(at_max) > 2 * np.abs(np.asarray(parts.difference))


def spent(t: float, alpha: float = ALPHA) -> float:
    """The O'Brien–Fleming-type spending function: the share of α spent by information fraction t."""
    if t <= 0:
        return 0.0
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return float(2 - 2 * NormalDist().cdf(z / np.sqrt(min(t, 1.0))))


@lru_cache(maxsize=64)
def nominal_levels(schedule: tuple[int, ...], alpha: float = ALPHA) -> tuple[float, ...]:
    """The two-sided p below which each look of `schedule` (seeds a side at each look) resolves."""
    if len(schedule) == 1:
        return (alpha,)
    fractions = np.array(schedule, dtype=np.float64) / schedule[-1]
    rng = np.random.default_rng(SEED)
    increments = np.diff(np.concatenate([[0.0], fractions]))
    walk = np.cumsum(rng.standard_normal((PATHS, len(schedule))) * np.sqrt(increments), axis=1)
    z = np.abs(walk / np.sqrt(fractions))
    alive = np.ones(PATHS, dtype=bool)
    levels, previous = [], 0.0
    for k, t in enumerate(fractions):
        share = spent(float(t), alpha) - previous
        previous += share
        candidates = np.sort(z[alive, k])[::-1]  # the largest first: the bound crossed by `share` of all paths
        count = int(round(share * PATHS))
        bound = candidates[count - 1] if 0 < count <= len(candidates) else np.inf
        alive &= z[:, k] < bound
        levels.append(float(2 * (1 - NormalDist().cdf(bound))) if np.isfinite(bound) else 0.0)
    return tuple(levels)
