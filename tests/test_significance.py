"""Paired tests with known answers: the exact test by hand, identical systems, a system better everywhere."""

import numpy as np
import pytest

from matching.results.significance import bootstrap_interval, paired_test, randomization_p, seed_mean


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
    for n, verdict in ((100, "not resolved at this size"), (10_000, "resolved")):
        base = {f"q{i}": 0.5 for i in range(n)}
        noise = rng.normal(0.02, 0.2, n)
        system = {f"q{i}": 0.5 + noise[i] for i in range(n)}
        test = paired_test(system, base)
        assert test.verdict == verdict
        assert (test.detectable > abs(test.difference)) == (verdict != "resolved")
