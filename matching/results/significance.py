"""Paired tests of one system against another over the same questions (or examples).

The unit of a test is what the metric averages: a question for MAP, MRR and recall@k, an example for accuracy.
Each system's score of a unit is first averaged over its seeds, so the seeds' variation and the questions'
variation are both in what is tested. For the differences d_q = score_q(system) − score_q(baseline):

- the statistic is their mean (the difference of the two systems' metrics over the common units);
- the 95 % interval is a paired bootstrap: units resampled with replacement, the mean of each resample, the 2.5th
  and 97.5th percentiles;
- the p-value is a paired (sign-flip) randomization test, two-sided: under "no difference" each unit's two scores
  are exchangeable, so d_q's sign is flipped at random; p = (1 + #{|mean of flipped| ≥ |mean|}) / (1 + draws).
  With 2^n ≤ `permutations` (a handful of units) every sign pattern is enumerated and p is exact.

Smucker, Allan & Carterette (CIKM 2007) compare these tests for information retrieval; the randomization test is
their recommendation. Both use a fixed seed, so a report is the same every time it is made.

What a comparison can resolve: a p-value above 0.05 means "not resolved at this size", not "no difference". The
detectable difference says how large a true difference would have to be for the test to find it with 80 % power at
α = 0.05 (two-sided), given the spread of the per-unit differences and their number: (z₀.₉₇₅ + z₀.₈) · s_d / √n, the
normal approximation of the paired test (s_d the sample standard deviation of d_q). A comparison is "resolved" when
p < 0.05.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

PERMUTATIONS = 10_000
RESAMPLES = 10_000
SEED = 0
ALPHA = 0.05  # a comparison is resolved when p < ALPHA
POWER = 0.8  # the detectable difference is the one found with this probability
_CHUNK = 500  # draws per block: memory stays ~ _CHUNK × units


@dataclass(frozen=True)
class PairedTest:
    difference: float  # mean of d_q
    low: float  # 95 % interval of the mean difference (paired bootstrap)
    high: float
    p_value: float  # two-sided paired randomization test
    units: int  # questions (or examples) both systems were scored on
    detectable: float  # the smallest true difference found with 80 % power at α = 0.05 (see the module docstring)

    @property
    def resolved(self) -> bool:
        """Whether the test tells the two systems apart (p < 0.05); if not, the difference is not resolved at this
        size, which is not evidence that they are equal."""
        return self.p_value < ALPHA

    @property
    def verdict(self) -> str:
        return "resolved" if self.resolved else "not resolved at this size"


def detectable_difference(d: np.ndarray, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest mean difference a paired test over these units detects with probability `power` at level
    `alpha` (two-sided): (z_{1−α/2} + z_power) · sd(d) / √n, sd with n − 1 degrees of freedom; 0 for one unit or
    none that differ."""
    d = np.asarray(d, dtype=np.float64)
    if len(d) < 2:
        return float("nan")
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return float(z * d.std(ddof=1) / np.sqrt(len(d)))


def _flipped_means(d: np.ndarray, permutations: int, rng: np.random.Generator) -> np.ndarray:
    n = len(d)
    if 2**n <= permutations:  # every sign pattern once: the exact test
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return signs @ d / n
    means = []
    for start in range(0, permutations, _CHUNK):
        signs = rng.integers(0, 2, size=(min(_CHUNK, permutations - start), n)) * 2.0 - 1.0
        means.append(signs @ d / n)
    return np.concatenate(means)


def randomization_p(d: np.ndarray, permutations: int = PERMUTATIONS, seed: int = SEED) -> float:
    """Two-sided p-value of a paired sign-flip randomization test of mean(d) = 0 (exact for small n)."""
    d = np.asarray(d, dtype=np.float64)
    observed = abs(d.mean())
    flipped = np.abs(_flipped_means(d, permutations, np.random.default_rng(seed)))
    at_least = np.count_nonzero(flipped >= observed - 1e-12 * max(1.0, observed))
    if 2 ** len(d) <= permutations:
        return at_least / len(flipped)
    return (1 + at_least) / (1 + len(flipped))


def bootstrap_interval(
    d: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of mean(d) over `resamples` resamples of the units with replacement."""
    d = np.asarray(d, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, resamples, _CHUNK):
        picks = rng.integers(0, len(d), size=(min(_CHUNK, resamples - start), len(d)))
        means.append(d[picks].mean(axis=1))
    low, high = np.quantile(np.concatenate(means), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def paired_test(system: dict[str, float], baseline: dict[str, float]) -> PairedTest | None:
    """`system` against `baseline`, each {unit: score averaged over seeds}, over the units both have; None when
    they share none."""
    units = sorted(system.keys() & baseline.keys())
    if not units:
        return None
    d = np.array([system[u] - baseline[u] for u in units])
    low, high = bootstrap_interval(d)
    return PairedTest(float(d.mean()), low, high, randomization_p(d), len(units), detectable_difference(d))


def seed_mean(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """{unit: its score averaged over the seeds that scored it} (every seed of a row scores the same units)."""
    totals: dict[str, list[float]] = {}
    for scores in per_seed:
        for unit, value in scores.items():
            totals.setdefault(unit, []).append(value)
    return {unit: sum(values) / len(values) for unit, values in totals.items()}
