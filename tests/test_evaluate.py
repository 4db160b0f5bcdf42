"""Evaluate a checkpoint from its run directory: parity with training, and refusals with clear messages."""

import json
import shutil

import pytest

from matching.cli import compose_config
from matching.data.encoding import LabelError
from matching.errors import RunError
from matching.evaluate import evaluate as evaluate_command
from matching.evaluate import main


def evaluate(checkpoint, split="dev", overrides=(), out=None):
    """The evaluate command as `matching-evaluate ckpt=... split=... [out=...] [overrides]` composes it."""
    extra = [f"out={out}"] if out else []
    return evaluate_command(compose_config("evaluate", [f"ckpt={checkpoint}", f"split={split}", *extra, *overrides]))


def test_train_then_evaluate_parity_classification(snli_run):
    run, trained = snli_run
    metrics = evaluate(run / "checkpoints" / "best.ckpt", "dev")
    assert {"val/macro_f1", "val/f1_entailment", "val/precision_neutral", "val/recall_contradiction"} <= set(metrics)
    assert set(metrics) == {k for k in trained if k.startswith("val/")}
    for key in metrics:
        assert metrics[key] == pytest.approx(trained[key], abs=1e-6), key
    saved = json.loads((run / "eval_dev.json").read_text())
    assert "positive_label" not in saved  # three labels: no binary metrics
    assert saved["metrics"]["val/acc"] == pytest.approx(trained["val/acc"], abs=1e-6)
    assert saved["pairs"] == {"dev": 9}


def test_train_then_evaluate_parity_ranking(wikiqa_run):
    run, trained = wikiqa_run
    metrics = evaluate(run / "checkpoints" / "best.ckpt", "dev", out=str(run / "x.json"))
    assert {"val/p1", "val/mrr10", "val/ndcg10"} <= set(metrics)
    assert set(metrics) == {k for k in trained if k.startswith("val/")}
    for key in metrics:
        assert metrics[key] == pytest.approx(trained[key], abs=1e-6), key


def test_per_question_scores_average_to_the_metrics(wikiqa_run, snli_run):
    """scores/val.csv, written by train and again by evaluate, holds the units whose means are the logged metrics."""
    import csv

    from matching.training.scores import unit_scores

    for (run, trained), checks in ((wikiqa_run, {"map": "val/map", "mrr": "val/mrr", "map_raw": "val/map_raw",
                                                 "top1": "val/top1", "p1": "val/p1", "mrr10": "val/mrr10",
                                                 "ndcg10": "val/ndcg10"}), (snli_run, {"acc": "val/acc"})):  # fmt: skip
        written_by_train = (run / "scores" / "val.csv").read_text()
        for name, key in checks.items():
            units = unit_scores(run, "val", name)
            assert sum(units.values()) / len(units) == pytest.approx(trained[key], abs=1e-5), (run, name)
        evaluate(run / "checkpoints" / "best.ckpt", "dev")
        assert (run / "scores" / "val.csv").read_text() == written_by_train
    pairs = list(csv.DictReader(open(wikiqa_run[0] / "scores" / "val_pairs.csv")))
    assert [int(p["rank"]) for p in pairs if p["unit"] == pairs[0]["unit"]] == list(range(1, 1 + sum(
        p["unit"] == pairs[0]["unit"] for p in pairs)))  # fmt: skip
    assert len(unit_scores(wikiqa_run[0], "val", "map")) == trained_questions(wikiqa_run[1])


def trained_questions(metrics):
    return int(metrics["val/questions"])


def test_evaluate_test_split_and_data_overrides(snli_run, tmp_path):
    run, _ = snli_run
    from conftest import FIXTURES

    other = tmp_path / "copy.jsonl"
    shutil.copy(FIXTURES / "snli" / "snli_1.0_dev.jsonl", other)
    on_test = evaluate(run / "checkpoints" / "best.ckpt", "test")
    assert "test/acc" in on_test
    moved = evaluate(run / "checkpoints" / "best.ckpt", "test", [f"task.splits.test.path={other}"])
    dev = evaluate(run / "checkpoints" / "best.ckpt", "dev")
    assert moved["test/acc"] == pytest.approx(dev["val/acc"])  # the same file, read as the test split


def test_refuses_a_vocabulary_that_does_not_match(snli_run, tmp_path):
    run, _ = snli_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    with open(copy / "vocab.txt", "a") as f:
        f.write("extra-word\n")
    with pytest.raises(RunError, match="vocabulary mismatch"):
        evaluate(copy / "checkpoints" / "best.ckpt")


def test_refuses_another_label_space(snli_run):
    run, _ = snli_run
    with pytest.raises(RunError, match="label space mismatch"):
        evaluate(run / "checkpoints" / "best.ckpt", "dev", ["task.labels=[yes,no,maybe]"])


def test_refuses_data_with_labels_outside_the_label_space(snli_run, tmp_path):
    run, _ = snli_run
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence1": "A dog runs.", "sentence2": "An animal moves.", "gold_label": "entails"}\n')
    with pytest.raises(LabelError, match="entails"):
        evaluate(run / "checkpoints" / "best.ckpt", "dev", [f"task.splits.dev.path={bad}"])


def test_refuses_a_corrupt_checkpoint(snli_run, tmp_path):
    run, _ = snli_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    ckpt = copy / "checkpoints" / "best.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    with pytest.raises(RunError, match="corrupt"):
        evaluate(ckpt)


def test_refuses_a_checkpoint_from_another_task(snli_run, wikiqa_run, tmp_path):
    snli, _ = snli_run
    wikiqa, _ = wikiqa_run
    copy = tmp_path / "run"
    shutil.copytree(wikiqa, copy)
    shutil.copy(snli / "checkpoints" / "best.ckpt", copy / "checkpoints" / "best.ckpt")
    with pytest.raises(RunError, match="trained on task 'snli'"):
        evaluate(copy / "checkpoints" / "best.ckpt")


def test_cli_errors_are_one_clear_line(snli_run, capsys):
    run, _ = snli_run
    assert main([]) == 2
    assert "missing ckpt=" in capsys.readouterr().err
    assert main([f"ckpt={run / 'checkpoints' / 'nope.ckpt'}"]) == 2
    assert "best.ckpt" in capsys.readouterr().err  # lists the checkpoints that do exist
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "split=validation"]) == 2
    assert "unknown split 'validation'" in capsys.readouterr().err
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "paths.dat_dir=/x"]) == 2
    assert "unknown config key 'paths.dat_dir'" in capsys.readouterr().err


def test_cli_prints_a_table(snli_run, capsys):
    run, _ = snli_run
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}"]) == 0
    out = capsys.readouterr().out
    assert "val/acc" in out and "wrote" in out


def test_a_run_from_another_version_is_a_clear_error(snli_run, tmp_path):
    """A saved config with an option this version no longer has (e.g. the old aligner.project) is named."""
    import shutil

    import yaml

    from matching.errors import RunError
    from matching.saved.run_folder import load_run

    run_dir, _ = snli_run
    old = shutil.copytree(run_dir, tmp_path / "old_run")
    config = yaml.safe_load((old / "config.yaml").read_text())
    config["aligner"]["project"] = True
    (old / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(RunError, match=r"aligner.project: .*takes no option 'project'.*another version of matching"):
        load_run(old / "checkpoints" / "best.ckpt")
