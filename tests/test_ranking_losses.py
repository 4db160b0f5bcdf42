"""The ranking losses (matching.training.losses) against hand-computed values and gradients, and the batches of whole
queries they train on (matching.training.batching.QueryBatchSampler)."""

import logging
import math

import numpy as np
import pytest
import torch

from matching.data.preparation import Budget
from matching.errors import ConfigError
from matching.training.batching import QueryBatchSampler
from matching.training.losses import (
    ListwiseSoftmax,
    PairwiseHinge,
    PointwiseCrossEntropy,
    listwise_softmax,
    pairwise_hinge,
)


def test_pairwise_hinge_by_hand():
    # query 0: positive 2.0, negatives 1.5 and -1.0; query 1: positive 0.0, negative 0.5; query 2 has no negative
    scores = torch.tensor([2.0, 1.5, -1.0, 0.0, 0.5, 3.0], requires_grad=True)
    targets = torch.tensor([1, 0, 0, 1, 0, 1])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    loss = pairwise_hinge(scores, targets, groups, margin=1.0)
    # pairs: (2.0, 1.5) -> 1 - 0.5 = 0.5; (2.0, -1.0) -> max(0, 1 - 3) = 0; (0.0, 0.5) -> 1 + 0.5 = 1.5
    assert loss.item() == pytest.approx((0.5 + 0.0 + 1.5) / 3)
    loss.backward()
    # d/ds_pos = -1/3 per active pair, d/ds_neg = +1/3 per active pair; the inactive pair and query 2 give nothing
    expected = torch.tensor([-1 / 3, 1 / 3, 0.0, -1 / 3, 1 / 3, 0.0])
    torch.testing.assert_close(scores.grad, expected)


def test_pairwise_margin_and_ungrouped_pairs():
    scores = torch.tensor([1.0, 0.0])
    # with margin 2 the pair (1, 0) costs 1; pairs without a group (-1) are queries of their own: no pair at all
    assert pairwise_hinge(scores, torch.tensor([1, 0]), torch.tensor([5, 5]), margin=2.0).item() == pytest.approx(1.0)
    alone = torch.tensor([1.0, 0.0], requires_grad=True)
    loss = pairwise_hinge(alone, torch.tensor([1, 0]), torch.tensor([-1, -1]), margin=1.0)
    assert loss.item() == 0.0
    loss.backward()
    assert alone.grad.tolist() == [0.0, 0.0]


def test_listwise_softmax_by_hand():
    # query 0: scores (1, 2, 0) with positives 0 and 1; query 1: (0, 0) with positive 0; query 2: no positive
    scores = torch.tensor([1.0, 2.0, 0.0, 0.0, 0.0, 4.0, 5.0], requires_grad=True)
    targets = torch.tensor([1, 1, 0, 1, 0, 0, 0])
    groups = torch.tensor([7, 7, 7, 3, 3, 9, 9])
    loss = listwise_softmax(scores, targets, groups)
    z = math.exp(1) + math.exp(2) + 1
    p = [math.exp(1) / z, math.exp(2) / z, 1 / z]
    q0 = -(math.log(p[0]) + math.log(p[1])) / 2  # the target spread evenly over the two positives
    q1 = math.log(2)
    assert loss.item() == pytest.approx((q0 + q1) / 2, rel=1e-6)
    loss.backward()
    # d/ds_i of -(1/|P|) sum_p log softmax_p = softmax_i - target_i / |P|, then halved (mean over two queries)
    expected = [(p[0] - 0.5) / 2, (p[1] - 0.5) / 2, p[2] / 2, (0.5 - 1) / 2, 0.5 / 2, 0.0, 0.0]
    torch.testing.assert_close(scores.grad, torch.tensor(expected))


def test_listwise_is_stable_for_large_scores():
    scores = torch.tensor([1000.0, 0.0, -1000.0])
    loss = listwise_softmax(scores, torch.tensor([1, 0, 0]), torch.tensor([0, 0, 0]))
    assert loss.item() == pytest.approx(0.0, abs=1e-6)


def test_each_loss_object_computes_its_function_on_the_match_margins_and_checks_its_settings():
    logits = torch.tensor([[0.0, 2.0], [0.5, 2.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.5]])
    batch = {"label": torch.tensor([1, 0, 0, 1, 0]), "group": torch.tensor([0, 0, 0, 1, 1])}
    margins = logits[:, 1] - logits[:, 0]
    assert PairwiseHinge(2.0)(logits, batch) == pairwise_hinge(margins, batch["label"], batch["group"], 2.0)
    assert ListwiseSoftmax()(logits, batch) == listwise_softmax(margins, batch["label"], batch["group"])
    assert PairwiseHinge.compares_candidates and ListwiseSoftmax.compares_candidates
    assert not PointwiseCrossEntropy.compares_candidates
    with pytest.raises(ConfigError, match="loss.margin must be a positive number, got 0"):
        PairwiseHinge(margin=0)


def test_balanced_class_weights_come_from_the_training_split_label_counts():
    logits, labels = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]]), torch.tensor([0, 1, 1])
    loss = PointwiseCrossEntropy("balanced", label_counts={"no": 90, "yes": 10})
    torch.testing.assert_close(loss.class_weights, torch.tensor([100 / 180, 100 / 20]))
    weighted = torch.nn.functional.cross_entropy(logits, labels, weight=loss.class_weights)
    assert loss(logits, {"label": labels}) == weighted
    assert PointwiseCrossEntropy()(logits, {"label": labels}) == torch.nn.functional.cross_entropy(logits, labels)
    with pytest.raises(ConfigError, match=r"one weight per label \['no', 'yes'\], got \[1.0\]"):
        PointwiseCrossEntropy([1.0], label_counts={"no": 90, "yes": 10})
    with pytest.raises(ConfigError, match="null, 'balanced' or a list of 2 numbers, got 'inverse'"):
        PointwiseCrossEntropy("inverse", label_counts={"no": 90, "yes": 10})
    assert "class_weights" not in dict(loss.state_dict())  # a loss adds nothing to a checkpoint


def _queries(sizes, positives=1):
    """groups and match labels of queries with `sizes` candidates each, the first `positives` of each a match."""
    groups = np.concatenate([np.full(n, q) for q, n in enumerate(sizes)])
    labels = np.concatenate([(np.arange(n) < positives).astype(int) for n in sizes])
    return groups, labels


def _batches(sampler, epoch=0):
    sampler.set_epoch(epoch)
    return [list(b) for b in sampler]


def test_whole_queries_in_every_batch():
    groups, labels = _queries([3, 5, 2, 4, 1, 6])
    lengths = np.arange(len(groups)) % 7 + 3
    sampler = QueryBatchSampler(lengths, 8, labels=labels, groups=groups, seed=1)
    batches = _batches(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(groups)))  # every pair once
    for batch in batches:
        assert len(batch) <= 8
        for q in set(groups[batch]):  # a query in a batch is there whole
            assert sorted(i for i in batch if groups[i] == q) == np.flatnonzero(groups == q).tolist()
    assert len(sampler) == len(batches) == len(_batches(sampler, epoch=1))  # the same number every epoch
    assert _batches(sampler, 1) != batches or len(batches) == 1
    assert _batches(QueryBatchSampler(lengths, 8, labels=labels, groups=groups, seed=1), 0) == batches  # seeded


def test_a_query_over_the_batch_size_is_split_keeping_its_positives(caplog):
    groups, labels = _queries([2, 11], positives=2)
    sampler = QueryBatchSampler(np.full(len(groups), 4), 5, labels=labels, groups=groups, seed=0)
    with caplog.at_level(logging.INFO):
        sampler = QueryBatchSampler(np.full(len(groups), 4), 5, labels=labels, groups=groups, seed=0)
    assert "1 of 2 training queries have more candidates than one batch holds" in caplog.text
    big = np.flatnonzero(groups == 1)
    parts = [b for b in _batches(sampler) if set(groups[b]) == {1}]
    positives, negatives = big[:2], big[2:]
    assert len(parts) == 3  # 9 negatives, 3 beside the 2 positives in each part of 5
    for part in parts:
        assert set(positives) <= set(part) and len(part) <= 5
    assert sorted(i for p in parts for i in p if i in negatives) == negatives.tolist()  # each negative once
    assert [set(b) for b in _batches(sampler) if set(groups[b]) == {0}] == [{0, 1}]  # the small query stays whole


def test_the_memory_budget_splits_a_query_too():
    groups, labels = _queries([4, 4])
    sides = np.array([[10, 10]] * 4 + [[10, 40]] * 4)
    budget = Budget(cells=800)  # 2 pairs of 10 x 40, 8 pairs of 10 x 10
    sampler = QueryBatchSampler(sides.sum(1), 64, labels=labels, groups=groups, seed=0, sides=sides, budget=budget)
    batches = _batches(sampler)
    assert {tuple(sorted(b)) for b in batches if set(groups[b]) == {0}} == {(0, 1, 2, 3)}  # fits whole
    long_parts = [sorted(b) for b in batches if set(groups[b]) == {1}]
    assert sorted(long_parts) == [[4, 5], [4, 6], [4, 7]]  # its positive (4) beside one negative at a time
    for batch in batches:
        assert budget.fits(len(batch), sides[batch, 0].max(), sides[batch, 1].max())


def test_queries_without_a_positive_and_a_negative_are_counted(caplog):
    groups, labels = _queries([3, 2, 2])
    labels[groups == 1] = 0  # no positive
    labels[groups == 2] = 1  # no negative
    with caplog.at_level(logging.INFO):
        QueryBatchSampler(np.full(len(groups), 4), 8, labels=labels, groups=groups, seed=0)
    assert "2 of 3 training queries lack a positive or a negative candidate" in caplog.text


@pytest.mark.parametrize("kind", ["pairwise", "listwise"])
def test_a_ranking_loss_trains_and_evaluates_as_pointwise_does(make_cfg, kind):
    from matching.training.run import train

    cfg = make_cfg("task=wikiqa", "trainer.max_epochs=2", f"loss={kind}")
    metrics = train(cfg)
    assert 0 < metrics["val/map"] <= 1 and metrics["val/questions"] > 0
    assert np.isfinite(metrics["val/loss"])  # the pointwise dev loss is logged whatever the training loss


def test_class_weights_belong_to_the_pointwise_loss():
    from matching.cli import OverrideError, compose_config

    with pytest.raises(OverrideError, match=r"unknown config key 'loss.class_weights'; valid keys at loss: "
                       r"\['_target_'\]; it is a key of loss=pointwise\."):  # fmt: skip
        compose_config("train", ["task=wikiqa", "loss=listwise", "loss.class_weights=balanced"])
    with pytest.raises(OverrideError, match="it is a key of loss=pairwise"):
        compose_config("train", ["task=wikiqa", "loss.margin=2"])


def test_a_loss_setting_that_cannot_train_is_refused_before_training(make_cfg):
    from matching.training.run import train

    with pytest.raises(ConfigError, match="loss.margin must be a positive number, got 0"):
        train(make_cfg("task=wikiqa", "loss=pairwise", "loss.margin=0"))


def test_the_old_spelling_of_the_loss_still_chooses_it(make_cfg, caplog):
    """`loss.kind=<option>` (study specs, notes, saved sweeps) is read as `loss=<option>`, with a warning."""
    from matching.cli import compose_config

    with caplog.at_level(logging.WARNING):
        cfg = compose_config("train", ["task=wikiqa", "loss.kind=pairwise", "loss.margin=2"])
    assert cfg.loss == {"_target_": "matching.training.losses.pairwise.PairwiseHinge", "margin": 2}
    assert "loss.kind=pairwise is now spelled loss=pairwise" in caplog.text
    assert make_cfg("task=wikiqa", "loss.kind=listwise").loss == compose_config("train", ["loss=listwise"]).loss


@pytest.mark.parametrize(("overrides", "said"), [
    (["loss.kind=hinge"], "loss.kind must be one of ['listwise', 'pairwise', 'pointwise'], got 'hinge'"),
    (["loss=pairwise"], "compares the candidates of one query: it needs a ranking task"),
])  # fmt: skip
def test_a_loss_that_cannot_train_is_refused_before_any_data_is_read(make_cfg, tmp_path, overrides, said):
    """The loss's settings are checked with the config: with a data folder that does not exist, the error is the
    loss's, not the missing corpus's (which reading would have met first)."""
    from matching.training.run import train

    with pytest.raises(ConfigError) as err:
        train(make_cfg(*overrides, f"paths.data_dir={tmp_path / 'nowhere'}"))
    assert said in str(err.value)
