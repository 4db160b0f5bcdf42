"""Tests of one method against another whose unit of chance includes the training run.

A comparison asks whether a *method* (an aligner, with its settings) differs from another, and training randomness
is part of a method: two sets of seeds of one configuration differ by chance exactly as two sets of questions do.
So every verdict here counts both sources of chance together.

**The method-level test** (`method_test`, what every verdict uses). Each system s (A, the row; B, its baseline) has
R_s seeds, each scoring the same Q units (questions for MAP and MRR, examples for accuracy): a table y_s[r, q].
The model is the two-way crossed one without replication,

    y_s[r, q] = μ_s + u_s[q] + b_s[r] + e_s[r, q],

with a unit effect u (how hard the question is for that method; u_A and u_B paired on the same q), a seed effect b
(the training run) and their interaction e. The estimate of Δ = μ_A − μ_B is the difference of the grand means,
Δ̂ = ȳ_A − ȳ_B (the difference of the two rows' metrics over the common units, means over seeds), and

    Var(Δ̂) = σ²_d / Q  +  (σ²_bA + σ²_eA / Q) / R_A  +  (σ²_bB + σ²_eB / Q) / R_B,     σ²_d = Var(u_A[q] − u_B[q]).

Its unbiased (ANOVA, method-of-moments) estimate uses three observed spreads: the variance over seeds of each seed's
metric, s²_s (which estimates σ²_bs + σ²_es / Q); the interaction mean square MS_e,s of each table (σ²_es); and the
variance over units of the seed-averaged differences d_q, s²_d (which estimates σ²_d + σ²_eA / R_A + σ²_eB / R_B):

    V = s²_A / R_A + s²_B / R_B + max(0, s²_d − MS_eA / R_A − MS_eB / R_B) / Q.

For a balanced design (every seed scores every unit) these are also the REML estimates of the crossed mixed model
whenever they are not truncated at 0, in closed form: no optimiser, no convergence to check, microseconds per test.
The statistic t = Δ̂ / √V is referred to Student's t with Satterthwaite's degrees of freedom, which are about
R_A + R_B − 2 when the seeds dominate V and grow towards Q − 1 when the units do; the 95 % interval is
Δ̂ ± t_{0.975, df} · √V. With fewer than three seeds on either side (MIN_SEEDS) nothing is said about the method: with
one the seeds' spread is unknown, with two it rests on one degree of freedom (two seeds that happen to agree make it
0), and the comparison says "too few seeds" instead of giving a p-value (docs/concepts/comparing.md, "Two seeds a
side").

Why this test and not another (docs/concepts/comparing.md argues it, and docs/archive/2026-11-concepts.md keeps the
simulator's calibration tables behind each claim, `matching.results.simulation`): a two-level bootstrap (seeds, then
units) cannot estimate the seeds' spread from 2 or 3 seeds (a resample of 3 seeds has 10 distinct forms and shrinks
their variance by (R − 1)/R), so it is overconfident exactly where studies live; a permutation of whole runs is exact
but cannot go below p = 0.1 with 3 seeds a side; a test over units alone (each unit's score averaged over seeds) leaves
the seeds out and calls two sets of seeds of one configuration different most of the time on a large evaluation set.

**The conditional test** (`paired_test`, a second, clearly named column): "do *these trained models* differ on this
population of questions?" A paired bootstrap and a paired sign-flip randomization test over the units of the
seed-averaged differences d_q (Smucker, Allan & Carterette, CIKM 2007). It treats the seeds drawn as fixed, so it
says nothing about the method.

**Many comparisons** (`holm`): a page with m comparisons of one metric on one split controls the family-wise error
with Holm's step-down adjustment; the verdict uses the adjusted p.

**How many seeds**: the detectable Δ is (t_{1−α/2, df} + t_{power, df}) · √V, the difference this many seeds and
units would find with 80 % power; `seeds_to_detect` is how many seeds a side would find the observed Δ with that
power, or None when no number of seeds would (the units' part of V alone is too large: more questions are needed).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

PERMUTATIONS = 10_000
RESAMPLES = 10_000
SEED = 0
ALPHA = 0.05  # a comparison is resolved when its (adjusted) p < ALPHA
POWER = 0.8  # the detectable difference is the one found with this probability
MAX_SEEDS = 1000  # seeds_to_detect searches up to this many seeds a side
_CHUNK = 500  # draws per block: memory stays ~ _CHUNK × units

#: A verdict about a method needs at least this many seeds on each side: with two, the seeds' spread has one degree of
#: freedom, and no rule we found is both calibrated and useful (docs/concepts/comparing.md, "Two seeds a side").
MIN_SEEDS = 3

RESOLVED = "resolved"
NOT_RESOLVED = "not resolved"
TOO_FEW_SEEDS = "too few seeds"


def power_z(alpha: float = ALPHA, power: float = POWER) -> float:
    """z_{1−α/2} + z_power: a normal test finds a true difference of this many standard errors with probability
    `power` at level `alpha` (two-sided)."""
    return NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)


def _t():
    from scipy import stats  # here: a report that compares nothing never pays for scipy's import

    return stats.t


@dataclass(frozen=True)
class VarianceParts:
    """The estimate Δ̂ and its variance V in parts, for one comparison or (as arrays) for a batch of them (the
    simulator's). `seed_part`: s²_A/R_A + s²_B/R_B; `unit_part`: the units' own term, max(0, ·)/Q; `df`: Satterthwaite's
    degrees of freedom of V; `spread_a`, `spread_b`: s²_A and s²_B, the variances over seeds of each seed's metric (for
    `seeds_to_detect`)."""

    difference: np.ndarray | float
    seed_part: np.ndarray | float
    unit_part: np.ndarray | float
    df: np.ndarray | float
    spread_a: np.ndarray | float
    spread_b: np.ndarray | float
    unit_df_terms: np.ndarray | float  # Σ (c_i MS_i)² / df_i of the unit part (0 when truncated)

    @property
    def variance(self):
        return self.seed_part + self.unit_part


def variance_parts(a: np.ndarray, b: np.ndarray) -> VarianceParts:
    """The crossed-design estimate for tables `a` (..., R_A, Q) and `b` (..., R_B, Q) of per-unit scores (leading
    axes: a batch of comparisons). Needs R_A, R_B ≥ 2 and Q ≥ 2."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ra, q = a.shape[-2:]
    rb = b.shape[-2]
    seed_means_a, seed_means_b = a.mean(axis=-1), b.mean(axis=-1)  # (..., R)
    s2a, s2b = seed_means_a.var(axis=-1, ddof=1), seed_means_b.var(axis=-1, ddof=1)

    def interaction(y: np.ndarray, r: int) -> np.ndarray:
        grand = y.mean(axis=(-2, -1), keepdims=True)
        resid = y - y.mean(axis=-1, keepdims=True) - y.mean(axis=-2, keepdims=True) + grand
        return (resid**2).sum(axis=(-2, -1)) / ((r - 1) * (q - 1))

    msa, msb = interaction(a, ra), interaction(b, rb)
    d = a.mean(axis=-2) - b.mean(axis=-2)  # (..., Q): seed-averaged differences
    s2d = d.var(axis=-1, ddof=1)
    raw_unit = (s2d - msa / ra - msb / rb) / q
    kept = raw_unit > 0
    unit_part = np.where(kept, raw_unit, 0.0)
    seed_a, seed_b = s2a / ra, s2b / rb
    unit_terms = np.where(
        kept,
        (s2d / q) ** 2 / (q - 1)
        + (msa / (ra * q)) ** 2 / ((ra - 1) * (q - 1))
        + (msb / (rb * q)) ** 2 / ((rb - 1) * (q - 1)),
        0.0,
    )
    variance = seed_a + seed_b + unit_part
    denominator = seed_a**2 / (ra - 1) + seed_b**2 / (rb - 1) + unit_terms
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(denominator > 0, variance**2 / np.where(denominator > 0, denominator, 1.0), np.inf)
    df = np.maximum(df, 1.0)  # Satterthwaite's df is at least the smallest component's: never below 1
    difference = seed_means_a.mean(axis=-1) - seed_means_b.mean(axis=-1)
    return VarianceParts(difference, seed_a + seed_b, unit_part, df, s2a, s2b, unit_terms)


def t_p_value(difference, variance, df):
    """Two-sided p of t = Δ̂/√V on df degrees of freedom; 1 where V = 0 and Δ̂ = 0, 0 where V = 0 and Δ̂ ≠ 0."""
    difference, variance = np.asarray(difference, dtype=np.float64), np.asarray(variance, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.abs(difference) / np.sqrt(variance)
    p = 2 * _t().sf(np.where(variance > 0, t, 0.0), df)
    return np.where(variance > 0, p, np.where(np.abs(difference) > 0, 0.0, 1.0))


def _detectable(variance: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    t = _t()
    return float((t.ppf(1 - alpha / 2, df) + t.ppf(power, df)) * math.sqrt(variance))


def seeds_to_detect(parts: VarianceParts, difference: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Seeds a side with which a difference of |`difference`| would be found with probability `power` at `alpha`,
    given these seeds' and units' spreads (the seed part shrinks as 1/R, the units' part does not); None when no
    number up to MAX_SEEDS would (or the difference is 0)."""
    target = abs(float(difference))
    unit = float(parts.unit_part)
    if target == 0 or power_z(alpha, power) * math.sqrt(unit) >= target:
        return None
    s2a, s2b = float(parts.spread_a), float(parts.spread_b)
    for r in range(2, MAX_SEEDS + 1):
        seed = (s2a + s2b) / r
        denominator = ((s2a / r) ** 2 + (s2b / r) ** 2) / (r - 1) + float(parts.unit_df_terms)
        df = max(1.0, (seed + unit) ** 2 / denominator) if denominator > 0 else math.inf
        if _detectable(seed + unit, df, alpha, power) <= target:
            return r
    return None


@dataclass(frozen=True)
class MethodTest:
    """One method against another, seeds and units both counted (see the module docstring)."""

    difference: float  # Δ̂: the difference of the two systems' metrics over the common units
    low: float  # 95 % interval: Δ̂ ± t_{0.975, df} · √V (NaN with fewer than MIN_SEEDS a side)
    high: float
    p_value: float  # two-sided t test on Satterthwaite's df, before any adjustment for many comparisons (NaN: too few)
    df: float
    seeds: tuple[int, int]  # R_A, R_B
    units: int  # Q
    seed_part: float  # the seeds' part of Var(Δ̂)
    unit_part: float  # the units' part
    detectable: float  # the difference found with 80 % power at α = 0.05 with these seeds and units
    seeds_needed: int | None  # seeds a side to find the observed Δ̂ with 80 % power; None: more seeds would not

    @property
    def too_few_seeds(self) -> bool:
        return min(self.seeds) < MIN_SEEDS

    @property
    def units_limit(self) -> bool:
        """Whether no number of seeds would find the observed Δ̂ with 80 % power: the units' part of the variance
        alone is too large (more questions, or examples, would)."""
        return not self.too_few_seeds and power_z() * math.sqrt(self.unit_part) >= abs(self.difference)

    @property
    def standard_error(self) -> float:
        return math.sqrt(self.seed_part + self.unit_part)

    def verdict(self, p_adjusted: float | None = None) -> str:
        """ "resolved" when the (adjusted) p < α; "too few seeds" with fewer than MIN_SEEDS on either side; else "not
        resolved"."""
        if self.too_few_seeds:
            return TOO_FEW_SEEDS
        return RESOLVED if (self.p_value if p_adjusted is None else p_adjusted) < ALPHA else NOT_RESOLVED


def unit_table(per_seed: Sequence[dict[str, float]], units: list[str]) -> np.ndarray:
    """(seeds, units) scores of one system over `units`, one row per seed."""
    return np.array([[scores[u] for u in units] for scores in per_seed], dtype=np.float64)


def common_units(system: Sequence[dict[str, float]], baseline: Sequence[dict[str, float]]) -> list[str]:
    """The units every seed of both systems scored, sorted."""
    sets = [set(s) for s in (*system, *baseline)]
    return sorted(set.intersection(*sets)) if sets else []


def method_test(system: Sequence[dict[str, float]], baseline: Sequence[dict[str, float]]) -> MethodTest | None:
    """`system` against `baseline`, each a list of {unit: score}, one per seed, over the units every seed of both
    scored; None when they share none."""
    units = common_units(system, baseline)
    if not units or not system or not baseline:
        return None
    a, b = unit_table(system, units), unit_table(baseline, units)
    seeds = (len(a), len(b))
    difference = float(a.mean() - b.mean())
    if min(seeds) < MIN_SEEDS or len(units) < 2:
        nan = float("nan")
        return MethodTest(difference, nan, nan, nan, nan, seeds, len(units), nan, nan, nan, None)
    parts = variance_parts(a, b)
    variance, df = float(parts.variance), float(parts.df)
    p = float(t_p_value(difference, variance, df))
    half = float(_t().ppf(0.975, df) * math.sqrt(variance)) if variance > 0 else 0.0
    needed = None if p < ALPHA else seeds_to_detect(parts, difference)
    return MethodTest(
        difference, difference - half, difference + half, p, df, seeds, len(units), float(parts.seed_part),
        float(parts.unit_part), _detectable(variance, df) if variance > 0 else 0.0, needed,
    )  # fmt: skip


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of m p-values (family-wise error ≤ α for any dependence): the k-th smallest
    becomes max over j ≤ k of min(1, (m − j + 1) · p_(j)). NaN p-values (too few seeds) stay NaN and do not count."""
    order = [i for i in sorted(range(len(p_values)), key=lambda i: p_values[i]) if not math.isnan(p_values[i])]
    m = len(order)
    adjusted = [float("nan")] * len(p_values)
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


# The conditional test: these trained models, over the units (the seeds fixed and averaged)


@dataclass(frozen=True)
class PairedTest:
    difference: float  # mean of d_q
    low: float  # 95 % interval of the mean difference (paired bootstrap)
    high: float
    p_value: float  # two-sided paired randomization test
    units: int  # questions (or examples) both systems were scored on
    detectable: float  # the smallest true difference found with 80 % power at α = 0.05 over these units


def detectable_difference(d: np.ndarray, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest mean difference a paired test over these units detects with probability `power` at level
    `alpha` (two-sided): (z_{1−α/2} + z_power) · sd(d) / √n, sd with n − 1 degrees of freedom; NaN for one unit."""
    d = np.asarray(d, dtype=np.float64)
    if len(d) < 2:
        return float("nan")
    return float(power_z(alpha, power) * d.std(ddof=1) / np.sqrt(len(d)))


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
    """The conditional test: `system` against `baseline`, each {unit: score averaged over seeds}, over the units
    both have; None when they share none."""
    units = sorted(system.keys() & baseline.keys())
    if not units:
        return None
    d = np.array([system[u] - baseline[u] for u in units])
    low, high = bootstrap_interval(d)
    return PairedTest(float(d.mean()), low, high, randomization_p(d), len(units), detectable_difference(d))


def seed_mean(per_seed: Sequence[dict[str, float]]) -> dict[str, float]:
    """{unit: its score averaged over the seeds that scored it}."""
    totals: dict[str, list[float]] = {}
    for scores in per_seed:
        for unit, value in scores.items():
            totals.setdefault(unit, []).append(value)
    return {unit: sum(values) / len(values) for unit, values in totals.items()}
