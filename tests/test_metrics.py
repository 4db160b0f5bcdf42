"""Ranking and classification metrics: hand-computed values, batch boundaries, duplicates, and agreement with
trec_eval (pytrec_eval) and scikit-learn; the metrics of a trained run in metrics.json and in evaluate's JSON."""

import csv
import json
import logging
import math

import numpy as np
import pytest
import torch

from matching.errors import ConfigError
from matching.training.metrics import (
    ClassificationMetrics,
    RankingMetrics,
    check_monitor,
    label_keys,
    metric_names,
    positive_index,
)
from matching.training.question_scores import question_scores

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
    "p1": 0.0,  # neither kept question has a correct candidate first
    "mrr10": 1 / 2,  # every first correct candidate is within the top 10: as mrr
    # group 0: DCG 1/log2(3) + 1/log2(4) over the ideal 1 + 1/log2(3); group 2: 1/log2(3) over 1
    "ndcg10": ((1 / math.log2(3) + 1 / 2) / (1 + 1 / math.log2(3)) + 1 / math.log2(3)) / 2,
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
    from matching.training.metrics import match_margin

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
    for column, key in (("ap", "map"), ("rr", "mrr"), ("top1", "top1"), ("top2", "top2"), ("top5", "top5"),
                        ("p1", "p1"), ("rr10", "mrr10"), ("ndcg10", "ndcg10")):  # fmt: skip
        assert q[column][kept].mean() == pytest.approx(float(values[key]), abs=1e-6), key
    assert q["ap"].mean() == pytest.approx(float(values["map_raw"]), abs=1e-6)
    assert q["rr"].mean() == pytest.approx(float(values["mrr_raw"]), abs=1e-6)
    assert int(kept.sum()) == int(values["questions"])


def test_question_scores_by_hand():
    # one question, candidates ranked c (✓, 0.9), a (✗, 0.5), b (✓, 0.5 tied with a: incorrect first), d (✗)
    q = question_scores(np.array([0.5, 0.5, 0.9, 0.1]), np.array([0, 1, 1, 0]), np.zeros(4, np.int64), np.arange(4))
    assert q["ap"][0] == pytest.approx((1 / 1 + 2 / 3) / 2) and q["rr"][0] == 1.0
    assert (q["top1"][0], q["top2"][0], q["top5"][0]) == (0.5, 0.5, 1.0)


def test_cut_off_metrics_count_only_the_top_ten():
    """The first correct candidate at rank 11 earns 1/11 of MRR and nothing of MRR@10 or NDCG@10; at rank 10, 1/10.
    P@1 counts one correct candidate first, whatever the others (recall@1 is 1/2 with two correct ones)."""
    rows = [(0, 1.0 - i / 100, int(i == 10)) for i in range(12)]  # question 0: correct at rank 11
    rows += [(1, 1.0 - i / 100, int(i == 9)) for i in range(12)]  # question 1: correct at rank 10
    rows += [(2, 0.9, 1), (2, 0.8, 0), (2, 0.7, 1)]  # question 2: correct first, and third
    metric = RankingMetrics()
    _feed(metric, rows, batch_size=5)
    values = {k: v.item() for k, v in metric.compute().items()}
    assert values["mrr"] == pytest.approx((1 / 11 + 1 / 10 + 1) / 3)
    assert values["mrr10"] == pytest.approx((0 + 1 / 10 + 1) / 3)
    ndcg_q2 = (1 + 1 / 2) / (1 + 1 / math.log2(3))
    assert values["ndcg10"] == pytest.approx((0 + 1 / math.log2(11) + ndcg_q2) / 3)
    assert values["p1"] == pytest.approx(1 / 3) and values["top1"] == pytest.approx(1 / 6)


def test_cut_off_metrics_agree_with_trec_eval_on_random_data():
    """ndcg10 is trec_eval's ndcg_cut_10, p1 its P_1, and mrr10 its recip_rank over each question's top 10."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(1)
    rows, qrel, run = [], {}, {}
    for q in range(150):
        n = int(rng.integers(2, 40))
        targets = (rng.random(n) < 0.15).astype(int)
        targets[0], targets[1] = 1, 0
        scores = rng.random(n)
        qrel[f"q{q}"] = {f"d{i}": int(t) for i, t in enumerate(targets)}
        run[f"q{q}"] = {f"d{i}": float(s) for i, s in enumerate(scores)}
        rows += [(q, float(s), int(t)) for s, t in zip(scores, targets, strict=True)]
    metric = RankingMetrics()
    _feed(metric, rows, batch_size=50)
    ours = metric.compute()
    theirs = pytrec_eval.RelevanceEvaluator(qrel, {"ndcg_cut_10", "P_1"}).evaluate(run)
    top10 = {q: dict(sorted(docs.items(), key=lambda d: -d[1])[:10]) for q, docs in run.items()}
    cut = pytrec_eval.RelevanceEvaluator(qrel, {"recip_rank"}).evaluate(top10)
    assert ours["ndcg10"].item() == pytest.approx(np.mean([v["ndcg_cut_10"] for v in theirs.values()]), abs=1e-6)
    assert ours["p1"].item() == pytest.approx(np.mean([v["P_1"] for v in theirs.values()]), abs=1e-6)
    assert ours["mrr10"].item() == pytest.approx(np.mean([v["recip_rank"] for v in cut.values()]), abs=1e-6)
    assert ours["mrr10"].item() < ours["mrr"].item()  # some first correct answers lie beyond rank 10


# Classification. A binary case by hand: log-odds s = logit[yes] - logit[no], the gold label, the prediction.
BINARY = [
    (2.0, 1),  # yes, said yes: TP
    (1.0, 0),  # no, said yes: FP
    (-0.5, 1),  # yes, said no: FN
    (-1.0, 0),  # TN
    (0.5, 1),  # TP
    (-2.0, 0),  # TN
    (3.0, 0),  # FP
]
# positive "yes": TP 2, FP 2, FN 1. Ranked by s: no, yes, no, yes, yes, no, no -> AP = (1/2 + 2/4 + 3/5) / 3;
# AUROC: of the 3 x 4 (yes, no) pairs, 3 + 2 + 2 have the yes above the no.
BINARY_YES = {"precision": 2 / 4, "recall": 2 / 3, "f1": 4 / 7, "ap": 8 / 15, "auroc": 7 / 12}
# positive "no" (ranked by -s: no, no, yes, yes, no, yes, no): AP = (1 + 1 + 3/5 + 4/7) / 4
BINARY_NO = {"precision": 2 / 3, "recall": 2 / 4, "f1": 4 / 7, "ap": (2 + 3 / 5 + 4 / 7) / 4, "auroc": 7 / 12}


def _classified(rows, labels, positive, batch_size=3, repeat_first=0):
    metric = ClassificationMetrics(labels, positive)
    logits = torch.tensor([[0.0, s] for s, _ in rows])
    targets = torch.tensor([t for _, t in rows])
    for start in range(0, len(rows), batch_size):
        end = start + batch_size
        metric.update(logits[start:end], targets[start:end], torch.arange(start, min(end, len(rows))))
    if repeat_first:  # a distributed sampler pads the last batch with the first examples again
        metric.update(logits[:repeat_first], targets[:repeat_first], torch.arange(repeat_first))
    return {k: v.item() for k, v in metric.compute().items()}


@pytest.mark.parametrize("batch_size, repeat_first", [(7, 0), (2, 0), (3, 3)])
def test_binary_metrics_by_hand(batch_size, repeat_first):
    values = _classified(BINARY, ["no", "yes"], 1, batch_size, repeat_first)
    for name, expected in BINARY_YES.items():
        assert values[name] == pytest.approx(expected), name
    assert values["precision_yes"] == values["precision"] and values["f1_yes"] == values["f1"]
    for name, expected in BINARY_NO.items():
        if name not in ("ap", "auroc"):
            assert values[f"{name}_no"] == pytest.approx(expected), name
    assert values["macro_f1"] == pytest.approx(4 / 7)


def test_the_positive_label_chooses_what_binary_metrics_are_of():
    values = _classified(BINARY, ["no", "yes"], 0)
    for name, expected in BINARY_NO.items():
        assert values[name] == pytest.approx(expected), name


def test_ap_and_auroc_are_nan_where_undefined():
    """No positive pair: AP and ROC-AUC are undefined (NaN); no negative pair: ROC-AUC is (AP is 1)."""
    none = _classified([(1.0, 0), (-1.0, 0)], ["no", "yes"], 1)
    assert math.isnan(none["ap"]) and math.isnan(none["auroc"])
    assert none["recall"] == 0.0 and none["precision"] == 0.0  # 0/0 counts as 0, as scikit-learn's zero_division=0
    only = _classified([(1.0, 1), (-1.0, 1)], ["no", "yes"], 1)
    assert only["ap"] == pytest.approx(1.0) and math.isnan(only["auroc"])


def test_multiclass_metrics_by_hand():
    """gold a a b b c c, predicted a b b b a c; the fourth label, d, occurs in neither and is left out of macro-F1
    (as scikit-learn's average="macro" does), its own scores 0."""
    gold, said = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 2]
    metric = ClassificationMetrics(["a", "b", "c", "d"])
    metric.update(torch.nn.functional.one_hot(torch.tensor(said), 4).float(), torch.tensor(gold), torch.arange(6))
    values = {k: v.item() for k, v in metric.compute().items()}
    expected = {"a": (1 / 2, 1 / 2, 1 / 2), "b": (2 / 3, 1, 4 / 5), "c": (1, 1 / 2, 2 / 3), "d": (0, 0, 0)}
    for label, (precision, recall, f1) in expected.items():
        assert values[f"precision_{label}"] == pytest.approx(precision), label
        assert values[f"recall_{label}"] == pytest.approx(recall), label
        assert values[f"f1_{label}"] == pytest.approx(f1), label
    assert values["macro_f1"] == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)
    assert "f1" not in values and "ap" not in values  # binary metrics need a positive label among two


@pytest.mark.parametrize("classes", [2, 5])
def test_classification_agrees_with_scikit_learn(classes):
    """Random logits in steps of 1/4 (many tied scores, exact in float32); class 0 never predicted when there are 5."""
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(classes)
    n = 2000
    logits = (4 * rng.normal(size=(n, classes))).round() / 4
    if classes > 2:
        logits[:, 0] = -10.0
    targets = rng.integers(0, classes, n)
    labels = [f"c{i}" for i in range(classes)]
    positive = 1 if classes == 2 else None
    metric = ClassificationMetrics(labels, positive)
    metric.update(torch.tensor(logits).float(), torch.tensor(targets), torch.arange(n))
    ours = {k: v.item() for k, v in metric.compute().items()}
    predicted = logits.argmax(-1)
    p, r, f, _ = metrics.precision_recall_fscore_support(targets, predicted, labels=range(classes), zero_division=0)
    for i, label in enumerate(labels):
        assert (ours[f"precision_{label}"], ours[f"recall_{label}"], ours[f"f1_{label}"]) == pytest.approx(
            (p[i], r[i], f[i]), abs=1e-6
        )
    assert ours["macro_f1"] == pytest.approx(metrics.f1_score(targets, predicted, average="macro"), abs=1e-6)
    if classes == 2:
        score = torch.tensor(logits).softmax(-1)[:, 1].numpy()  # the probability (float64), as users give it
        truth = targets == 1
        assert ours["ap"] == pytest.approx(metrics.average_precision_score(truth, score), abs=1e-6)
        assert ours["auroc"] == pytest.approx(metrics.roc_auc_score(truth, score), abs=1e-6)
        assert ours["f1"] == pytest.approx(metrics.f1_score(truth, predicted == 1), abs=1e-6)


def test_label_keys_and_their_clashes():
    assert label_keys(["not equivalent", "équivalent", "a/b"]) == ["not_equivalent", "équivalent", "a_b"]
    with pytest.raises(ConfigError, match="two of them alike"):
        label_keys(["a b", "a/b"])


def test_the_positive_label_is_checked():
    assert positive_index(["0", "1"], None) == 1 and positive_index(["entails", "neutral"], "entails") == 0
    assert positive_index(["a", "b", "c"], None) is None
    with pytest.raises(ConfigError, match="not one of the task's labels"):
        positive_index(["0", "1"], "yes")
    with pytest.raises(ConfigError, match="two labels"):
        positive_index(["a", "b", "c"], "a")
    with pytest.raises(ConfigError, match="match label"):
        positive_index(["0", "1"], "0", kind="rank")


def test_a_monitor_must_be_a_dev_metric_the_run_logs():
    check_monitor("val/f1", "classify", ["no", "yes"])
    check_monitor("val/ndcg10", "rank", ["0", "1"])
    check_monitor("val_mismatched/macro_f1", "classify", ["a", "b", "c"], ["val", "val_mismatched"])
    for wrong, kind, labels in (("val/f1", "classify", ["a", "b", "c"]), ("test/acc", "classify", ["a", "b"]),
                                ("val/f2", "classify", ["a", "b"]), ("val/f1", "rank", ["0", "1"])):  # fmt: skip
        with pytest.raises(ConfigError, match="choose one of"):
            check_monitor(wrong, kind, labels)
    assert set(metric_names("classify", ["no", "yes"])) >= {"f1", "ap", "auroc", "macro_f1", "f1_no", "recall_yes"}


def test_a_trained_binary_run_reports_and_selects_by_f1(tmp_path):
    """SciTail (positive label: entails, its first) trained with task.monitor=val/f1: the best checkpoint is the
    epoch of the best dev F1, and metrics.json and evaluate's JSON carry every metric."""
    from conftest import compose_train, evaluate

    from matching.training.run import train

    # lr 0.01: the dev F1 of this seed rises at epoch 2 and falls back (on the machine the test was written on)
    cfg = compose_train(tmp_path, "task=scitail", "trainer.max_epochs=6", "optim.lr=0.01", "task.monitor=val/f1")
    metrics = train(cfg)
    run = tmp_path / "run"
    expected = {"val/acc", "val/f1", "val/precision", "val/recall", "val/ap", "val/auroc", "val/macro_f1",
                "val/f1_entails", "val/f1_neutral", "val/precision_entails", "val/recall_neutral"}  # fmt: skip
    assert expected <= set(json.loads((run / "metrics.json").read_text()))
    assert metrics["val/f1"] == metrics["val/f1_entails"]
    logged = [float(r["val/f1"]) for r in csv.DictReader(open(run / "logs" / "metrics.csv")) if r.get("val/f1")]
    per_epoch = logged[:6]  # then the best checkpoint's final validation
    assert len(logged) == 7 and metrics["best_epoch"] == 1 + int(np.argmax(per_epoch))
    assert metrics["val/f1"] == pytest.approx(max(per_epoch))
    evaluated = evaluate(run / "checkpoints" / "best.ckpt", "dev")
    saved = json.loads((run / "eval_dev.json").read_text())
    assert saved["positive_label"] == "entails"
    for key in expected:
        assert evaluated[key] == pytest.approx(metrics[key], abs=1e-6, nan_ok=True), key


def test_an_unknown_monitor_is_refused_before_any_data_is_prepared(tmp_path):
    from conftest import compose_train

    from matching.training.run import train

    cfg = compose_train(tmp_path, "task=scitail", "task.monitor=val/f2")
    with pytest.raises(ConfigError, match=r"task.monitor='val/f2' is not a metric .* val/f1, val/precision"):
        train(cfg)
    assert not (tmp_path / "run" / "config.yaml").exists()
    cfg = compose_train(tmp_path, "task=scitail", "task.positive_label=contradiction")
    with pytest.raises(ConfigError, match="not one of the task's labels"):
        train(cfg)


def test_a_ranking_no_better_than_chance_is_told_apart_from_one_that_ranks():
    from matching.training.question_scores import chance_map, chance_warning, filtered_map

    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(60), 10)  # 60 questions of 10 candidates, 1-3 correct each
    targets = np.zeros(600, np.int64)
    for q in range(60):
        targets[q * 10 + rng.choice(10, size=1 + q % 3, replace=False)] = 1
    indices = np.arange(600)
    low, high = chance_map(targets, groups)
    assert 0.2 < low < high < 0.55  # a random order of 10 candidates with 1-3 correct
    noise = filtered_map(rng.random(600), targets, groups, indices)
    said = chance_warning("wikiqa val", noise, targets, groups)
    assert said is not None and said.startswith(f"wikiqa val: MAP {noise:.4f} is within what a random order")
    assert f"({low:.4f}-{high:.4f} in 95 % of 200 shuffles)" in said and "docs/how-to/ranking.md" in said
    ranked = filtered_map(targets + 0.5 * rng.random(600), targets, groups, indices)
    assert ranked == 1.0 and chance_warning("wikiqa val", ranked, targets, groups) is None


def test_a_ranking_run_that_learned_nothing_says_so(make_cfg, caplog):
    """An untrained model (lr 0) ranks WikiQA's fixture dev no better than chance: training ends with a warning."""
    from matching.training.run import train

    with caplog.at_level(logging.WARNING, logger="matching.train"):
        train(make_cfg("task=wikiqa", "trainer.max_epochs=1", "optim.lr=0"))
    assert "wikiqa val: MAP" in caplog.text and "ranks no better than chance" in caplog.text
