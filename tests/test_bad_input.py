"""Bad input a user can cause gets a clear message: what was wrong, where, and what to do.

Cases covered elsewhere: missing corpus file or folder (test_data, test_readers, test_ranking_readers),
truncated .gz, malformed JSON line, wrong TSV column count, non-UTF-8 byte (test_readers,
test_ranking_readers), vectors of the wrong dimension and garbled vectors lines (test_embeddings), corrupt
checkpoint, checkpoint from another task, vocabulary or label-space mismatch (test_evaluate), unknown aligner
option (test_configs), malformed predict input (test_predict). This file adds the rest.
"""

import json
import logging

import pytest
from hydra.errors import ConfigCompositionException

from matching.data.encoding import EmptyTextError, LabelError
from matching.data.tables import read_new_pairs
from matching.errors import RunError
from matching.training.build import build_datamodule
from matching.training.run import train


def _snli(tmp_path, rows):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "gold_label": y}) + "\n" for a, b, y in rows))
    return path


ROWS = [("A dog runs.", "An animal moves.", "entailment"), ("A cat sleeps.", "A cat naps.", "entails"),
        ("Two men talk.", "   ", "neutral"), ("Kids play.", "Children are playing.", "entailment")]  # fmt: skip


def test_unknown_label_is_reported_with_file_and_line(make_cfg, tmp_path):
    bad = _snli(tmp_path, ROWS[:2])
    with pytest.raises(LabelError) as err:
        build_datamodule(make_cfg(f"task.splits.dev.path={bad}")).setup("fit")
    message = str(err.value)
    assert f"{bad}, line 2" in message and "'entails'" in message and "data.on_bad_example=skip" in message


def test_empty_text_is_reported_with_file_and_line(make_cfg, tmp_path):
    bad = _snli(tmp_path, [ROWS[0], ROWS[2]])
    with pytest.raises(EmptyTextError, match=rf"{bad}, line 2: the second text is empty"):
        build_datamodule(make_cfg(f"task.splits.dev.path={bad}")).setup("fit")


def test_bad_examples_can_be_counted_and_skipped(make_cfg, tmp_path, caplog):
    bad = _snli(tmp_path, ROWS)
    dm = build_datamodule(make_cfg(f"task.splits.dev.path={bad}", "data.on_bad_example=skip"))
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert len(dm.splits["dev"]) == 2
    assert "skipped 1 pairs because label 'entails' is outside" in caplog.text and "(lines 2)" in caplog.text
    assert "skipped 1 pairs because the second text is empty (lines 3)" in caplog.text


def test_overlong_sentences_are_truncated_and_counted(make_cfg, tmp_path, caplog):
    long = " ".join(["word"] * 500) + "."
    path = _snli(tmp_path, [(long, "Short.", "neutral"), ROWS[0]])
    dm = build_datamodule(make_cfg(f"task.splits.dev.path={path}", "data.max_length=50"))
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    dev = dm.splits["dev"]
    assert dev.truncated == 1 and max(len(a) for a in dev.a) == 50
    assert "1 pairs had a side longer than max_length=50 and were truncated" in caplog.text


def test_unwritable_output_directory_is_refused_before_any_work(make_cfg, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cfg = make_cfg()
    cfg.paths.output_dir = str(blocker / "run")
    with pytest.raises(RunError, match="cannot write to the output directory .*paths.output_root"):
        train(cfg)


def test_unknown_task_lists_the_valid_choices(make_cfg):
    with pytest.raises(ConfigCompositionException) as err:
        make_cfg("task=quora")
    message = str(err.value)
    assert "quora" in message and all(t in message for t in ["snli", "mnli", "wikiqa", "trecqa", "ubuntu"])


def test_unknown_config_key_names_the_key(make_cfg):
    with pytest.raises(ConfigCompositionException, match="model.hiden"):
        make_cfg("model.hiden=100")


def test_predict_input_with_an_empty_text_names_the_line():
    import io

    from matching.errors import DataFormatError

    with pytest.raises(DataFormatError, match="input.tsv, line 2: the first text is empty"):
        list(read_new_pairs(io.StringIO("a dog\ta cat\n \tsomething\n"), where="input.tsv"))
