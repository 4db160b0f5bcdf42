"""Inputs a careful user really has: very long texts (memory bounded by the batch budget), prediction input in
every shape, and mistakes caught before any data is read."""

import json

import numpy as np
import pytest

from matching.data.preparation import BatchTooLargeError, Budget
from matching.predict import main as predict_main
from matching.training.batching import BucketBatchSampler

# ------------------------------------------------------------------ family 1: memory bounded by the input


def _cells(batch, sides):
    return len(batch) * sides[batch, 0].max() * sides[batch, 1].max()


def _tokens(batch, sides):
    return len(batch) * (sides[batch, 0].max() + sides[batch, 1].max())


def test_budget_batches_respect_every_limit_and_keep_the_order():
    rng = np.random.default_rng(0)
    sides = rng.integers(1, 60, size=(500, 2))
    sides[123] = (2000, 40)  # one very long text
    order = np.arange(500)
    batches = Budget(cells=100_000, tokens=3_000).batches(order, sides, max_pairs=32)
    assert np.array_equal(np.concatenate(batches), order)
    assert all(len(b) <= 32 and _cells(b, sides) <= 100_000 and _tokens(b, sides) <= 3_000 for b in batches)
    assert [123] in [b.tolist() for b in batches]  # 2 x 2000 x 40 cells would not fit: it goes alone


def test_training_batches_fit_the_budget_and_their_number_is_the_same_every_epoch():
    rng = np.random.default_rng(1)
    sides = rng.integers(3, 40, size=(1000, 2))
    sides[[10, 500]] = [(5000, 12), (300, 300)]
    budget = Budget(cells=64 * 256 * 256, tokens=32_768)
    sampler = BucketBatchSampler(sides.sum(1), 64, shuffle=True, seed=3, sides=sides, budget=budget)
    counts = set()
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = [np.array(b) for b in sampler]
        counts.add(len(batches))
        assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
        assert all(_cells(b, sides) <= budget.cells and _tokens(b, sides) <= budget.tokens for b in batches)
    assert counts == {len(sampler)}


def test_evaluation_batches_fit_the_budget():
    sides = np.array([[10, 10]] * 50 + [[3000, 20]] + [[10, 10]] * 50)
    sampler = BucketBatchSampler(sides.sum(1), 256, shuffle=False, sides=sides, budget=Budget(200_000, 4_000))
    batches = [np.array(b) for b in sampler]
    assert len(batches) == len(sampler) and all(_cells(b, sides) <= 200_000 for b in batches)
    assert all(_tokens(b, sides) <= 4_000 for b in batches) and sum(map(len, batches)) == len(sides)


def test_a_pair_too_long_to_align_alone_is_named_before_anything_is_allocated():
    with pytest.raises(BatchTooLargeError, match=r"line 7 has 5000 x 3000 tokens .* data.max_length"):
        Budget(cells=1_000_000).check(np.array([[10, 10], [5000, 3000]]), "pairs.tsv", lines=[3, 7])
    with pytest.raises(BatchTooLargeError, match=r"pair 1 has 900 x 200 tokens"):
        Budget(tokens=1_000).check(np.array([[900, 200]]), "pairs.tsv")


def test_predict_splits_a_batch_around_a_long_text_and_reports_cuts(snli_run, tmp_path, capsys):
    run, _ = snli_run
    long_text = " ".join(["dog"] * 3000)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"a dog runs\tan animal moves\n{long_text}\tan animal\nthe cat sleeps\ta cat rests\n")
    ckpt = f"ckpt={run / 'checkpoints' / 'best.ckpt'}"
    assert predict_main([ckpt, f"input={pairs}", "data.max_length=1000", "data.batch_cells=30000"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3 and "1 had a text cut to data.max_length=1000" in captured.err
    assert predict_main([ckpt, f"input={pairs}", "data.max_length=null", "data.batch_cells=5000"]) == 2
    err = capsys.readouterr().err
    assert "line 2 has 3000 x 2 tokens" in err and "Traceback" not in err


def test_training_with_a_very_long_sentence_truncates_and_counts_it(make_cfg, tmp_path, caplog):
    from conftest import FIXTURES

    from matching.training.build import build_datamodule

    lines = (FIXTURES / "snli" / "snli_1.0_train.jsonl").read_text().splitlines()
    record = json.loads(lines[0]) | {"sentence1": " ".join(["word"] * 5000)}
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    dm = build_datamodule(make_cfg(f"task.splits.train.path={path}"))
    dm.setup("fit")
    assert max(len(a) for a in dm.splits["train"].a) == 512
    assert "1 pairs had a side longer than max_length=512 and were truncated" in caplog.text
    assert sum(len(b) for b in dm.train_dataloader().batch_sampler) == len(dm.splits["train"])


@pytest.mark.parametrize("setting", ["data.batch_size=0", "data.max_length=-3", "data.batch_cells=abc",
                                     "data.on_bad_example=ignore"])  # fmt: skip
def test_bad_data_settings_are_named(make_cfg, setting):
    from matching.training.build import build_datamodule

    with pytest.raises(ValueError, match=setting.split("=")[0]):
        build_datamodule(make_cfg(setting))


# ---------------------------------------------------------- family 3: prediction input that cannot be misread


def _pairs(data: bytes, fmt: str = "auto"):
    import io

    from matching.data.tables import read_new_pairs

    return [(p.a, p.b, p.group, p.line) for p in read_new_pairs(io.BytesIO(data), where="input", format=fmt)]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"a\tb\nx one\ty one\n", [("x one", "y one", None, 2)]),
        (b"\xef\xbb\xbfa\tb\nx\ty\n", [("x", "y", None, 2)]),  # a header after a byte-order mark
        (b"Question\tAnswer\tqid\nwho\the\tQ1\n", [("who", "he", "Q1", 2)]),
        (b'\xef\xbb\xbf{"a": "x", "b": "y"}\n\n{"premise": "p", "hypothesis": "h"}\n', [("x", "y", None, 1),
                                                                                     ("p", "h", None, 3)]),
        (b'[{"a": "x", "b": "y", "group": 7},\n {"sentence1": "s", "sentence2": "t"}]\n', [("x", "y", "7", 1),
                                                                                         ("s", "t", None, 2)]),
        (b"a dog\tan animal\n", [("a dog", "an animal", None, 1)]),  # no header
    ],
)  # fmt: skip
def test_every_input_shape_is_read_as_meant(data, expected):
    assert _pairs(data) == expected


@pytest.mark.parametrize(
    ("data", "fmt", "message"),
    [
        (b"a dog\ta cat\n\xe9t\xe9\tsummer\n", "auto", r"line 2: byte b'\\xe9' at byte offset 0"),
        (b'[{"a": "x", "b": "y"}, {"a": "x"}]', "auto", "line 1: cannot tell which columns hold the two texts"),
        (b'[{"a": "x", "b": "y"},\n {"a": "x" "b": "y"}]', "auto", "line 2: invalid JSON"),
        (b'{"a": "x", "b": "y"}\n', "tsv", "input: expected 2 or 3 columns"),
        (b'{"a": "x", "b": null}\n', "auto", "line 1: column 'b' holds None, not a text"),
        (b"x\ty\n", "xml", "input_format must be one of"),
        (
            b'[{"a": "x", "b": "y"}]\n{"a": "z", "b": "w"}\n',
            "auto",
            "line 2: the JSON array that starts on line 1 ends on line 1",
        ),
    ],
)
def test_misread_input_is_an_error_naming_the_place(data, fmt, message):
    from matching.errors import DataFormatError

    with pytest.raises(DataFormatError, match=message):
        _pairs(data, fmt)


def test_stdin_and_files_in_any_encoding_wrapper(snli_run, tmp_path, capsys, monkeypatch):
    import gzip
    import io
    import sys

    run, _ = snli_run
    ckpt = f"ckpt={run / 'checkpoints' / 'best.ckpt'}"
    lines = b'\xef\xbb\xbf{"a": "a dog runs", "b": "an animal moves"}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines)))
    assert predict_main([ckpt, "input=-"]) == 0  # JSON Lines with a BOM on stdin
    assert json.loads(capsys.readouterr().out)["a"] == "a dog runs"
    packed = tmp_path / "pairs.tsv.gz"
    packed.write_bytes(gzip.compress(b"a\tb\na dog runs\tan animal moves\n"))
    assert predict_main([ckpt, f"input={packed}"]) == 0 and len(capsys.readouterr().out.splitlines()) == 1
    assert predict_main([ckpt, f"input={tmp_path}"]) == 2
    assert "a folder" in capsys.readouterr().err


# ------------------------------------------------- family 4: mistakes caught before any data is read


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lr=abc", "optim.lr='abc': expected a number"),
        ("model.hidden=1.5", "model.hidden=1.5: expected a whole number"),
        ("model.null_token=yes", "model.null_token='yes': expected true or false"),
        ("trainer.max_epochs=abc", "trainer.max_epochs='abc': expected a whole number"),
        ("callbacks.early_stopping.patience=ten", "callbacks.early_stopping.patience='ten'"),
        ("++aligner.temperature=2", "aligner.temperature: matching.model.aligners.SoftmaxAligner takes no argument"),
        ("embeddings.top_words=many", "embeddings.top_words='many'"),
    ],
)
def test_a_bad_setting_is_named_before_any_data_is_read(override, message, tmp_path, capsys):
    """The corpus folder does not even exist: the setting must be reported first."""
    from conftest import cli_overrides

    from matching import train

    argv = [*cli_overrides(tmp_path), f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'none'}"]
    assert train.main([*argv, override]) == 2
    err = capsys.readouterr().err
    assert message in err and "not found" not in err and "Traceback" not in err


def test_a_checkpoint_evaluated_as_another_kind_of_task_is_refused(wikiqa_run, capsys):
    from matching.evaluate import main as evaluate_main

    run, _ = wikiqa_run
    assert evaluate_main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "task.kind=classify"]) == 2
    assert "is a 'rank' model but task.kind is 'classify'" in capsys.readouterr().err


def test_corpus_paths_that_are_not_what_they_claim(make_cfg, tmp_path):
    from conftest import FIXTURES

    from matching.errors import DataFormatError
    from matching.training.build import build_datamodule

    with pytest.raises(DataFormatError, match="is a folder, but this corpus format is one file per split"):
        build_datamodule(make_cfg(f"task.splits.dev.path={tmp_path}")).setup("fit")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="holds no pair with a label"):
        build_datamodule(make_cfg(f"task.splits.dev.path={empty}")).setup("fit")
    named_gz = tmp_path / "dev.jsonl.gz"  # plain text behind a .gz name
    named_gz.write_bytes((FIXTURES / "snli" / "snli_1.0_dev.jsonl").read_bytes())
    dm = build_datamodule(make_cfg(f"task.splits.dev.path={named_gz}"))
    dm.setup("fit")
    assert len(dm.splits["dev"]) == 9
