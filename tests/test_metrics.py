"""Ranking metrics: hand-computed values, batch boundaries, duplicates, and agreement with trec_eval."""

import numpy as np
import pytest
import torch

from matching.metrics import RankingMetrics, question_scores

# group, score, target  (see the expected values below)
EXAMPLE = [
    (0, 0.9, 0), (0, 0.8, 1), (0, 0.3, 1),  # ranks: -, +, +      AP = (1/2 + 2/3)/2 = 7/12, RR = 1/2
    (1, 0.2, 0), (1, 0.7, 0),               # no correct answer: skipped (raw: AP = RR = 0)
    (2, 0.5, 1), (2, 0.5, 0), (2, 0.1, 0),  # tie broken pessimistically: -, +, -   AP = RR = 1/2
    (3, 0.4, 1), (3, 0.6, 1),               # only correct answers: skipped (raw: AP = RR = 1)
]  # fmt: skip
EXPECTED = {
    "map": 13 / 24,
    "mrr": 1 / 2,
    "top1": 0.0,
    "top2": 3 / 4,  # group 0: 1 of 2 positives in the top 2; group 2: 1 of 1
    "top5": 1.0,
    "map_raw": 25 / 48,
    "mrr_raw": 1 / 2,
    "questions": 2,
    "skipped_no_positive": 1,
    "skipped_all_positive": 1,
}


def _feed(metric, rows, batch_size, indices=None):
    indices = list(range(len(rows))) if indices is None else indices
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        g, s, t = (torch.tensor([r[i] for r in chunk]) for i in range(3))
        metric.update(s.float(), t, g, torch.tensor(indices[start : start + batch_size]))


def _check(values):
    for key, expected in EXPECTED.items():
        assert values[key].item() == pytest.approx(expected, abs=1e-6), key


def test_hand_computed_example_in_one_batch():
    metric = RankingMetrics()
    _feed(metric, EXAMPLE, batch_size=len(EXAMPLE))
    _check(metric.compute())


@pytest.mark.parametrize("batch_size", [1, 3, 4])
def test_questions_straddling_batches_in_any_order(batch_size):
    order = np.random.default_rng(batch_size).permutation(len(EXAMPLE))
    metric = RankingMetrics()
    _feed(metric, [EXAMPLE[i] for i in order], batch_size, indices=[int(i) for i in order])
    _check(metric.compute())


def test_duplicated_examples_count_once():
    metric = RankingMetrics()
    _feed(metric, EXAMPLE, batch_size=4)
    _feed(metric, EXAMPLE[:3], batch_size=3)  # a padded sampler repeats the first examples
    _check(metric.compute())


def test_constant_scores_earn_no_credit_from_file_order():
    metric = RankingMetrics()
    rows = [(0, 0.5, 1), (0, 0.5, 0), (0, 0.5, 0)]
    _feed(metric, rows, batch_size=3)
    assert metric.compute()["mrr"].item() == pytest.approx(1 / 3)


def test_empty_split_is_a_clear_error():
    with pytest.raises(ValueError, match="evaluation split was empty"):
        RankingMetrics().compute()


def test_agrees_with_trec_eval_on_random_data():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(0)
    rows, qrel, run = [], {}, {}
    for q in range(200):
        n = int(rng.integers(2, 30))
        targets = rng.integers(0, 2, n)
        targets[0], targets[1] = 1, 0  # the filtered protocol's questions: both kinds present
        scores = rng.random(n)
        qrel[f"q{q}"] = {f"d{i}": int(t) for i, t in enumerate(targets)}
        run[f"q{q}"] = {f"d{i}": float(s) for i, s in enumerate(scores)}
        rows += [(q, float(s), int(t)) for s, t in zip(scores, targets, strict=True)]
    order = rng.permutation(len(rows))
    metric = RankingMetrics()
    _feed(metric, [rows[i] for i in order], batch_size=64, indices=[int(i) for i in order])
    ours = metric.compute()
    theirs = pytrec_eval.RelevanceEvaluator(qrel, {"map", "recip_rank"}).evaluate(run)
    assert ours["map"].item() == pytest.approx(np.mean([v["map"] for v in theirs.values()]), abs=1e-6)
    assert ours["mrr"].item() == pytest.approx(np.mean([v["recip_rank"] for v in theirs.values()]), abs=1e-6)
    assert ours["questions"].item() == 200


def test_ranking_score_is_the_logit_margin_and_does_not_saturate():
    """Two confident candidates: P(match) is exactly 1.0 for both in float32, the margins still order them."""
    from matching.metrics import match_margin

    logits = torch.tensor([[-10.0, 15.0], [-10.0, 25.0]])
    assert torch.equal(torch.softmax(logits, -1)[:, 1], torch.ones(2))
    margin = match_margin(logits)
    assert margin.tolist() == [25.0, 35.0]
    metric = RankingMetrics()
    metric.update(margin, torch.tensor([0, 1]), torch.zeros(2, dtype=torch.long), torch.arange(2))
    assert metric.compute()["map"] == 1.0  # P(match) ties would rank the incorrect one first (MAP 0.5)


def test_per_question_scores_average_to_the_split_metrics():
    """question_scores (what scores/ files hold) and RankingMetrics (torchmetrics) agree, ties included."""
    rng = np.random.default_rng(0)
    n = 3000
    groups, targets = rng.integers(0, 300, n), (rng.random(n) < 0.2).astype(np.int64)
    scores, indices = rng.normal(size=n).round(1), rng.permutation(n)  # rounded: many ties
    metric = RankingMetrics()
    metric.update(*(torch.tensor(x) for x in (scores, targets, groups, indices)))
    values = metric.compute()
    q = question_scores(scores, targets, groups, indices)
    kept = (q["positives"] > 0) & (q["positives"] < q["candidates"])
    for column, key in (("ap", "map"), ("rr", "mrr"), ("top1", "top1"), ("top2", "top2"), ("top5", "top5")):
        assert q[column][kept].mean() == pytest.approx(float(values[key]), abs=1e-6), key
    assert q["ap"].mean() == pytest.approx(float(values["map_raw"]), abs=1e-6)
    assert q["rr"].mean() == pytest.approx(float(values["mrr_raw"]), abs=1e-6)
    assert int(kept.sum()) == int(values["questions"])


def test_question_scores_by_hand():
    # one question, candidates ranked c (✓, 0.9), a (✗, 0.5), b (✓, 0.5 tied with a: incorrect first), d (✗)
    q = question_scores(np.array([0.5, 0.5, 0.9, 0.1]), np.array([0, 1, 1, 0]), np.zeros(4, np.int64), np.arange(4))
    assert q["ap"][0] == pytest.approx((1 / 1 + 2 / 3) / 2) and q["rr"][0] == 1.0
    assert (q["top1"][0], q["top2"][0], q["top5"][0]) == (0.5, 0.5, 1.0)
