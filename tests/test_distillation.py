"""Distillation (matching/training/distillation.py, matching.training.losses): the losses against hand-worked values,
the teacher's logits computed once, reused and recomputed when the teacher or the split changes, and students that
train."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose_train

from matching.errors import ConfigError
from matching.training.config_checks import check_config
from matching.training.losses import kl_to_teacher, listwise_kl, margin_mse
from matching.training.run import train


def kl(p: list[float], q: list[float]) -> float:
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))


def test_kl_to_the_teachers_probabilities_by_hand():
    student, teacher = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3.0), 0.0]])  # teacher: 3/4, 1/4
    assert kl_to_teacher(student, teacher, 1.0).item() == pytest.approx(kl([0.75, 0.25], [0.5, 0.5]), abs=1e-6)
    # T = 2: the teacher's logits halved (√3 : 1), the loss scaled by T² = 4
    soft = [math.sqrt(3) / (math.sqrt(3) + 1), 1 / (math.sqrt(3) + 1)]
    assert kl_to_teacher(student, teacher, 2.0).item() == pytest.approx(4 * kl(soft, [0.5, 0.5]), abs=1e-6)
    assert kl_to_teacher(teacher, teacher, 1.0).item() == pytest.approx(0.0, abs=1e-7)


def test_margin_mse_by_hand():
    scores = torch.tensor([2.0, 0.0, 1.0, 5.0, 4.0], requires_grad=True)
    teacher = torch.tensor([3.0, 1.0, 3.0, 0.0, 0.0])
    labels = torch.tensor([1, 0, 0, 1, 1])  # the second query (ids 7) has no negative: it adds nothing
    groups = torch.tensor([4, 4, 4, 7, 7])
    # query 4: (pos 0, neg 1): (2 − 0) − (3 − 1) = 0; (pos 0, neg 2): (2 − 1) − (3 − 3) = 1 → mean of 0², 1²
    loss = margin_mse(scores, teacher, labels, groups)
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    assert scores.grad[3] == 0 and scores.grad[4] == 0
    assert margin_mse(scores, teacher, torch.tensor([1, 1, 1, 1, 1]), groups).item() == 0.0  # no negative at all


def test_listwise_kl_by_hand():
    scores = torch.tensor([0.0, 0.0, 9.0])
    teacher = torch.tensor([math.log(3.0), 0.0, 1.0])
    groups = torch.tensor([1, 1, 2])  # query 2 has one candidate: no distribution to learn
    assert listwise_kl(scores, teacher, groups, 1.0).item() == pytest.approx(kl([0.75, 0.25], [0.5, 0.5]), abs=1e-6)
    soft = [math.sqrt(3) / (math.sqrt(3) + 1), 1 / (math.sqrt(3) + 1)]
    assert listwise_kl(scores, teacher, groups, 2.0).item() == pytest.approx(4 * kl(soft, [0.5, 0.5]), abs=1e-6)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["distill.loss=margin_mse"], "needs a ranking task"),
        (["distill.loss=hinton"], "distill.loss must be one of"),
        (["distill.weight=0"], "distill.weight must be a positive number"),
        (["distill.temperature=-1"], "distill.temperature must be a positive number"),
    ],
)
def test_a_bad_distillation_setting_is_named_before_any_data_is_read(tmp_path, overrides, message):
    cfg = compose_train(tmp_path, "distill.teacher=/some/run", *overrides)
    with pytest.raises(ConfigError, match=message):
        check_config(cfg)


def teacher_record(cfg) -> dict:
    return json.loads((Path(cfg.paths.output_dir) / "teacher" / "teacher.json").read_text())


def test_the_teachers_logits_are_computed_once_reused_then_recomputed_for_another_split(snli_run, tmp_path):
    teacher, _ = snli_run
    common = [f"distill.teacher={teacher}", "trainer.max_epochs=1", f"paths.cache_dir={tmp_path / 'cache'}"]
    first = compose_train(tmp_path / "s1", *common, "seed=1")
    first.paths.cache_dir = str(tmp_path / "cache")
    assert np.isfinite(train(first)["val/acc"])
    record = teacher_record(first)
    assert record["how"].startswith("computed over") and record["teachers"][0]["teacher"] == str(teacher)
    logits = np.load(Path(first.paths.output_dir) / "teacher" / "logits.npy")
    assert logits.shape == (record["key"]["pairs"], 3) and np.isfinite(logits).all()
    second = compose_train(tmp_path / "s2", *common, "seed=2")
    second.paths.cache_dir = str(tmp_path / "cache")
    train(second)
    assert teacher_record(second)["how"].startswith("reused from")  # another seed: the same teacher, the same pairs
    np.testing.assert_array_equal(np.load(Path(second.paths.output_dir) / "teacher" / "logits.npy"), logits)
    fewer = compose_train(tmp_path / "s3", *common, "task.splits.train.stop=6")
    fewer.paths.cache_dir = str(tmp_path / "cache")
    train(fewer)
    assert teacher_record(fewer)["how"].startswith("computed over")  # another split: another key
    assert teacher_record(fewer)["key"]["pairs"] < record["key"]["pairs"]
    # an ensemble of two teachers (here one run twice): the mean of their logits, another key again
    both = compose_train(tmp_path / "s4", *common, f"distill.teacher=[{teacher},{teacher / 'checkpoints'}]")
    both.paths.cache_dir = str(tmp_path / "cache")
    train(both)
    assert len(teacher_record(both)["teachers"]) == 2
    np.testing.assert_allclose(np.load(Path(both.paths.output_dir) / "teacher" / "logits.npy"), logits, atol=1e-5)


@pytest.mark.parametrize("loss", ["margin_mse", "listwise_kl", "kl"])
def test_a_ranking_student_learns_from_a_ranking_teacher(wikiqa_run, tmp_path, loss):
    teacher, _ = wikiqa_run
    cfg = compose_train(tmp_path, "task=wikiqa", "aligner=softmax", "trainer.max_epochs=1",
                        f"distill.teacher={teacher}", f"distill.loss={loss}", "distill.temperature=2")  # fmt: skip
    metrics = train(cfg)
    assert np.isfinite(metrics["val/map"])
    assert teacher_record(cfg)["key"]["pairs"] > 0


def test_a_teacher_of_other_labels_is_refused(wikiqa_run, tmp_path):
    teacher, _ = wikiqa_run
    cfg = compose_train(tmp_path, f"distill.teacher={teacher}", "trainer.max_epochs=1")  # an SNLI student
    with pytest.raises(ConfigError, match="a teacher must be trained on the same labels"):
        train(cfg)
