"""Tests with known answers: the method-level test by hand and against Welch's, the conditional paired tests (the
exact test by hand, identical systems, a system better everywhere), Holm's adjustment, the seeds a Δ needs."""

import math

import numpy as np
import pytest
from scipy import stats

from matching.results.significance import (
    bootstrap_interval,
    holm,
    method_test,
    paired_test,
    randomization_p,
    seed_mean,
)


def test_the_exact_randomization_test_equals_a_hand_computation():
    # d = (1, 2, 3): mean 2. Of the 8 sign patterns, only (+,+,+) and (-,-,-) give |mean| >= 2: p = 2/8.
    assert randomization_p(np.array([1.0, 2.0, 3.0])) == pytest.approx(0.25)
    # d = (1, -1, 2): mean 2/3; the sign patterns' |mean|: (+,+,+) 2/3, (+,+,-) 2/3, (+,-,+) 4/3, (+,-,-) 0, and the
    # four mirror images the same: 6 of 8 reach 2/3, p = 0.75.
    d = np.array([1.0, -1.0, 2.0])
    by_hand = sum(
        abs(np.dot(s, d)) / 3 >= 2 / 3 - 1e-12 for s in np.array(np.meshgrid(*[[1, -1]] * 3)).T.reshape(-1, 3)
    )
    assert randomization_p(d) == pytest.approx(by_hand / 8) == pytest.approx(0.75)


def test_identical_systems_give_p_1_and_a_zero_interval():
    scores = {f"q{i}": float(v) for i, v in enumerate(np.random.default_rng(1).random(200))}
    test = paired_test(scores, dict(scores))
    assert test.difference == 0 and test.p_value == 1.0 and (test.low, test.high) == (0.0, 0.0)
    assert test.units == 200


def test_a_system_better_on_every_question_is_significant():
    rng = np.random.default_rng(2)
    baseline = {f"q{i}": float(v) for i, v in enumerate(rng.random(60) * 0.5)}
    better = {q: v + 0.05 + 0.2 * rng.random() for q, v in baseline.items()}
    test = paired_test(better, baseline)
    assert test.p_value < 0.01 and 0 < test.low < test.difference < test.high
    assert test.difference == pytest.approx(np.mean([better[q] - baseline[q] for q in baseline]))


def test_noise_is_not_significant_and_the_interval_covers_zero():
    # differences of ±0.3 around a mean of 0.01: a small effect in large noise
    a = {f"q{i}": 0.5 + 0.3 * (-1) ** i + 0.01 for i in range(100)}
    b = {f"q{i}": 0.5 for i in range(100)}
    test = paired_test(a, b)
    assert test.p_value > 0.05 and test.low < 0 < test.high


def test_only_common_units_are_paired_and_seeds_are_averaged_first():
    assert seed_mean([{"q1": 1.0, "q2": 0.0}, {"q1": 0.0, "q2": 0.0}]) == {"q1": 0.5, "q2": 0.0}
    test = paired_test({"q1": 1.0, "q2": 1.0, "only_a": 1.0}, {"q1": 0.0, "q2": 0.5, "only_b": 0.0})
    assert test.units == 2 and test.difference == pytest.approx(0.75)
    assert paired_test({"a": 1.0}, {"b": 1.0}) is None


def test_the_bootstrap_interval_is_the_percentiles_of_resampled_means():
    d = np.array([0.0, 1.0])  # every resample's mean is 0, 0.5 or 1: the 95 % interval spans [0, 1]
    assert bootstrap_interval(d) == (0.0, 1.0)
    low, high = bootstrap_interval(np.full(50, 0.3))
    assert low == pytest.approx(0.3) and high == pytest.approx(0.3)


def test_the_detectable_difference_is_the_power_formula_by_hand():
    from matching.results.significance import detectable_difference

    d = np.array([0.1, -0.1] * 50)  # sd (n − 1) = 0.1 · √(100/99), n = 100
    by_hand = (1.959964 + 0.841621) * 0.1 * np.sqrt(100 / 99) / np.sqrt(100)
    assert detectable_difference(d) == pytest.approx(by_hand, rel=1e-5)
    assert detectable_difference(np.array([0.3])) != detectable_difference(np.array([0.3]))  # nan: one unit


def test_a_small_sample_leaves_a_difference_unresolved_and_a_large_one_resolves_it():
    """The same per-question effect (+0.02 in noise of sd 0.2): 100 questions cannot resolve it, 10,000 can; the
    detectable difference says so before the p-value does."""
    rng = np.random.default_rng(5)
    for n, resolved in ((100, False), (10_000, True)):
        base = {f"q{i}": 0.5 for i in range(n)}
        noise = rng.normal(0.02, 0.2, n)
        system = {f"q{i}": 0.5 + noise[i] for i in range(n)}
        test = paired_test(system, base)
        assert (test.p_value < 0.05) == resolved
        assert (test.detectable > abs(test.difference)) == (not resolved)


# The method-level test: seeds and units both counted


def _per_seed(table: np.ndarray) -> list[dict[str, float]]:
    return [{f"q{i}": float(v) for i, v in enumerate(row)} for row in table]


def test_the_method_test_is_the_crossed_design_estimate_by_hand():
    a = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    b = np.array([[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    (ra, q), rb = a.shape, len(b)
    s2a, s2b = a.mean(axis=1).var(ddof=1), b.mean(axis=1).var(ddof=1)

    def ms(y):
        r = len(y)
        resid = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
        return (resid**2).sum() / ((r - 1) * (q - 1))

    d = a.mean(axis=0) - b.mean(axis=0)
    unit = max(0.0, d.var(ddof=1) - ms(a) / ra - ms(b) / rb) / q
    variance = s2a / ra + s2b / rb + unit
    test = method_test(_per_seed(a), _per_seed(b))
    assert test.difference == pytest.approx(a.mean() - b.mean())
    assert test.seed_part + test.unit_part == pytest.approx(variance)
    assert test.seeds == (3, 3) and test.units == 4
    half = stats.t.ppf(0.975, test.df) * variance**0.5
    assert (test.low, test.high) == pytest.approx((test.difference - half, test.difference + half))
    assert test.p_value == pytest.approx(2 * stats.t.sf(abs(test.difference) / variance**0.5, test.df))


def test_without_a_units_part_the_method_test_is_welchs_test_over_the_seeds():
    """Every unit moves with its seed (no unit × method spread): the units add nothing, and the test is Welch's t
    over the seeds' metrics, degrees of freedom included."""
    rng = np.random.default_rng(3)
    base = rng.random(50)
    a = np.array([base + shift for shift in (0.02, 0.05, -0.01, 0.04)])
    b = np.array([base + shift for shift in (0.0, -0.03, 0.01)])
    test = method_test(_per_seed(a), _per_seed(b))
    welch = stats.ttest_ind(a.mean(axis=1), b.mean(axis=1), equal_var=False)
    assert test.unit_part == 0 and test.p_value == pytest.approx(welch.pvalue, rel=1e-9)


def test_two_groups_of_seeds_of_one_configuration_are_not_called_different():
    """The issue's A/A case: one configuration whose seeds differ by several points on 500 examples. The test over
    units alone (seeds averaged) calls seeds 1-4 against 5-8 resolved; the method test does not."""
    rng = np.random.default_rng(11)
    difficulty = rng.normal(0, 1.5, 500)
    seeds = np.array([0.3, 0.1, -0.2, 0.3, 0.25, -0.6, 0.0, -0.05])  # logits: ~0.9 to ~−0.6, spread as CoDA's
    logits = difficulty + seeds[:, None] + rng.normal(0, 1.0, (8, 500))
    correct = (rng.random((8, 500)) < 1 / (1 + np.exp(-logits))).astype(float)
    first, second = _per_seed(correct[:4]), _per_seed(correct[4:])
    assert paired_test(seed_mean(first), seed_mean(second)).p_value < 0.05  # what the framework used to say
    test = method_test(first, second)
    assert test.verdict() == "not resolved" and test.low < 0 < test.high


def test_a_real_five_point_difference_between_stable_systems_over_three_seeds_is_resolved():
    """As CoDA and softmax on WikiQA's 237 test questions (67.92 ± 1.44 against 62.86 ± 0.39 over 3 seeds)."""
    rng = np.random.default_rng(4)
    quality = 0.2 + 0.6 * rng.random(237)
    a = quality + 0.05 + np.array([0.0, -0.014, 0.014])[:, None] + rng.normal(0, 0.1, (3, 237))
    b = quality + np.array([0.004, 0.0, -0.004])[:, None] + rng.normal(0, 0.1, (3, 237))
    test = method_test(_per_seed(a), _per_seed(b))
    assert test.verdict() == "resolved" and 0 < test.low < test.difference < test.high
    assert test.detectable < test.difference and test.seeds_needed is None


def test_one_seed_on_a_side_gives_no_verdict_about_the_method():
    a, b = np.ones((1, 30)), np.zeros((3, 30))
    test = method_test(_per_seed(a), _per_seed(b))
    assert test.too_few_seeds and test.verdict() == "too few seeds" and np.isnan(test.p_value)
    assert test.difference == 1.0


def test_an_unresolved_comparison_says_how_many_seeds_would_find_it_or_that_none_would():
    rng = np.random.default_rng(8)
    quality = rng.random(400)
    seeds_a, seeds_b = np.array([0.03, 0.0, 0.05]), np.array([0.0, -0.02, 0.02])  # Δ ≈ 2 points, seeds ± 2.5
    a = quality + seeds_a[:, None] + rng.normal(0, 0.05, (3, 400))
    b = quality + seeds_b[:, None] + rng.normal(0, 0.05, (3, 400))
    test = method_test(_per_seed(a), _per_seed(b))
    assert test.verdict() == "not resolved" and test.seeds_needed is not None and test.seeds_needed > 3
    assert not test.units_limit
    # the same Δ with no seed spread but units that disagree widely: seeds cannot help, more questions would
    noisy = quality + 0.02 + rng.normal(0, 0.5, 400)
    c = np.array([noisy + s for s in (0.0, 0.001, -0.001)])
    d = np.array([quality + s for s in (0.0, 0.001, -0.001)])
    test = method_test(_per_seed(c), _per_seed(d))
    if test.verdict() == "not resolved":
        assert test.units_limit and test.seeds_needed is None


def test_holm_by_hand():
    # p sorted 0.01, 0.02, 0.04 (m = 3): 0.03, max(0.03, 0.04) = 0.04, max(0.04, 0.04) = 0.04; NaN stays out
    adjusted = holm([0.04, 0.01, float("nan"), 0.02])
    assert adjusted[0] == pytest.approx(0.04) and adjusted[1] == pytest.approx(0.03)
    assert adjusted[3] == pytest.approx(0.04) and np.isnan(adjusted[2])
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_two_seeds_a_side_get_no_verdict_about_the_method():
    """With two seeds a side the seeds' spread rests on one degree of freedom (docs/concepts/comparing.md, "Two seeds a
    side"): two seeds that agree exactly would make V 0 and any difference 'resolved'. The comparison says too few
    seeds."""
    a = np.array([[1.0, 1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 1.0, 1.0]])  # two seeds, equal accuracy
    b = np.array([[0.0, 1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0, 0.0]])
    test = method_test(_per_seed(a), _per_seed(b))
    assert test.too_few_seeds and test.verdict() == "too few seeds" and math.isnan(test.p_value)
    assert test.difference == pytest.approx(a.mean() - b.mean())
    third = method_test(_per_seed(np.vstack([a, a[:1]])), _per_seed(np.vstack([b, b[:1]])))
    assert not third.too_few_seeds and 0 <= third.p_value <= 1
