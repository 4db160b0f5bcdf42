"""Your own files, end to end (issue 46): a run trained on a table of one's own reads that same table, in its own
format and column names, through predict, evaluate, Matcher and the server, with the same answers; a header is never
a pair; relative paths resolve from the working directory; a CSV's quotes are read as CSV says and reported; errors
of the user's paths and machine are the user's."""

import csv
import io
import json
import logging
import os
from pathlib import Path

import pytest
from conftest import FIXTURES, compose_train

from matching.data.tables import read_new_pairs, read_pair_table
from matching.errors import DataFormatError
from matching.training.run import train

OWN = FIXTURES / "own"


def _as_csv(tsv: Path, out: Path) -> Path:
    """The claims fixture as a CSV with other column names (text_left, text_right, label) and a quoted comma."""
    with open(tsv, encoding="utf-8") as f, open(out, "w", encoding="utf-8", newline="") as g:
        writer = csv.writer(g)
        writer.writerow(["id", "text_left", "text_right", "label"])
        for row in list(csv.reader(f, delimiter="\t"))[1:]:
            writer.writerow(row)
    return out


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    """A run trained on CSV files whose texts are in the columns text_left and text_right."""
    tmp = tmp_path_factory.mktemp("csv_run")
    train_csv, dev_csv = (
        _as_csv(OWN / "claims_train.tsv", tmp / "train.csv"),
        _as_csv(OWN / "claims_dev.tsv", tmp / "dev.csv"),
    )
    cfg = compose_train(
        tmp, "task=pairs", f"task.splits.train.path={train_csv}", f"task.splits.dev.path={dev_csv}",
        "task.columns.a=text_left", "task.columns.b=text_right", "trainer.max_epochs=2",
    )  # fmt: skip
    metrics = train(cfg)
    return Path(cfg.paths.output_dir), dev_csv, metrics


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_reads_its_own_training_format_everywhere_with_the_same_answers(csv_run, tmp_path, capsys):
    from matching import Matcher
    from matching.predict import main as predict_main

    run, dev_csv, _ = csv_run
    ckpt = run / "checkpoints" / "best.ckpt"
    rows = list(csv.DictReader(open(dev_csv, encoding="utf-8")))
    # the same CSV it was trained on: the header is skipped, every row is one pair
    assert predict_main([f"ckpt={ckpt}", f"input={dev_csv}", f"output={tmp_path / 'csv.jsonl'}"]) == 0
    assert f"predicted {len(rows)} pairs" in capsys.readouterr().err
    from_csv = _lines(tmp_path / "csv.jsonl")
    # the texts under the run's own column names, as they came in
    assert [(r["text_left"], r["text_right"]) for r in from_csv] == [(r["text_left"], r["text_right"]) for r in rows]
    assert "a" not in from_csv[0] and "b" not in from_csv[0]
    assert [r["line"] for r in from_csv] == list(range(2, len(rows) + 2))
    # JSON Lines with the run's keys, and a TSV whose header is the run's column names
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"text_left": r["text_left"], "text_right": r["text_right"]}) + "\n" for r in rows)
    )
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("text_left\ttext_right\n" + "".join(f"{r['text_left']}\t{r['text_right']}\n" for r in rows))
    for name, path in (("jsonl", jsonl), ("tsv", tsv)):
        assert predict_main([f"ckpt={ckpt}", f"input={path}", f"output={tmp_path / (name + '.out')}"]) == 0
        assert _lines(tmp_path / (name + ".out")) != [] and [
            r["probs"] for r in _lines(tmp_path / (name + ".out"))
        ] == [r["probs"] for r in from_csv]
    assert f"predicted {len(rows)} pairs" in capsys.readouterr().err  # not one more: the header is no pair
    # Matcher with the run's keys
    answers = Matcher.load(run).predict([{"text_left": r["text_left"], "text_right": r["text_right"]} for r in rows])
    for answer, record in zip(answers, from_csv, strict=True):
        assert answer["probs"] == pytest.approx(record["probs"], abs=1e-6)


def test_the_server_takes_the_run_s_own_keys(csv_run):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from matching import Matcher
    from matching.serving.server import serving

    run, dev_csv, _ = csv_run
    rows = list(csv.DictReader(open(dev_csv, encoding="utf-8")))[:3]
    pairs = [{"text_left": r["text_left"], "text_right": r["text_right"]} for r in rows]
    with serving(run / "checkpoints" / "best.ckpt", ["threads=1"]) as url:
        answer = httpx.post(f"{url}/classify", json={"pairs": pairs}, timeout=60)
        info = httpx.get(f"{url}/info", timeout=60).json()
        one_text = httpx.post(f"{url}/classify", json={"pairs": [{"text_left": "only one text"}]}, timeout=60)
    assert answer.status_code == 200, answer.text
    # an HTTP client is told the keys to send, in the model's own names, not a setting of the run's config
    refusal = one_text.json()["error"]
    assert one_text.status_code == 422 and "pairs[0]: cannot tell which columns hold the two texts" in refusal
    assert "the columns are ['text_left']" in refusal
    assert '{"text_left": "first text", "text_right": "second text"}' in refusal and "task.columns" not in refusal
    assert info["model"]["columns"] == {"a": "text_left", "b": "text_right"}
    expected = Matcher.load(run).predict(pairs)
    for served, local in zip(answer.json()["predictions"], expected, strict=True):
        assert served["label"] == local["label"]
        assert served["probs"] == pytest.approx(local["probs"], abs=1e-5)


def test_a_labelled_file_is_scored_with_the_task_s_metrics(csv_run, tmp_path, capsys):
    from matching.evaluate import main as evaluate_main

    run, dev_csv, metrics = csv_run
    ckpt = run / "checkpoints" / "best.ckpt"
    out = tmp_path / "scored.json"
    assert evaluate_main([f"ckpt={ckpt}", f"input={dev_csv}", f"out={out}"]) == 0
    record = json.loads(out.read_text())
    assert record["input"] == str(dev_csv) and record["pairs"] == {"input": 4}
    # the dev file it was selected on, read again as an input: the same accuracy as the run's best epoch
    assert record["metrics"]["input/acc"] == pytest.approx(metrics["val/acc"])
    assert "input/acc" in capsys.readouterr().out
    assert evaluate_main([f"ckpt={ckpt}", f"input={tmp_path / 'none.csv'}"]) == 2
    assert "none.csv" in capsys.readouterr().err


def test_own_pairs_train_coda_centred_and_the_saved_run_reloads_it(csv_run):
    """task=pairs trains CoDA with token centring unless told otherwise (conf/task/pairs.yaml); the run's config.yaml
    says so, and every command on the run composes the saved aligner, not the default of its task."""
    from omegaconf import OmegaConf

    from matching import Matcher
    from matching.cli import compose_config

    run, _, _ = csv_run
    saved = OmegaConf.load(run / "config.yaml")
    assert saved.aligner._target_.endswith(".CoDAAligner") and saved.aligner.center_tokens is True
    assert saved.choices.aligner == "coda"
    expected = OmegaConf.to_container(saved.aligner)
    for command in ("evaluate", "predict", "visualize", "export", "serve"):
        cfg = compose_config(command, [f"ckpt={run}"])
        assert OmegaConf.to_container(cfg.aligner, resolve=True) == expected, command
    assert OmegaConf.to_container(Matcher.load(run).config.aligner, resolve=True) == expected


@pytest.mark.parametrize(
    ("header", "preferred", "expected"),
    [
        ("text_left\ttext_right\n", {"a": "text_left", "b": "text_right"}, 1),  # the run's own names
        ("Sentence1\tSentence2\n", {}, 1),  # a usual pair, any case
        ("", {}, 1),  # no header: by position
    ],
)
def test_a_header_is_never_a_pair(header, preferred, expected):
    data = (header + "The shop is open.\tThe shop is closed.\n").encode()
    pairs = list(read_new_pairs(io.BytesIO(data), where="in.tsv", preferred=preferred))
    assert [(p.a, p.b) for p in pairs] == [("The shop is open.", "The shop is closed.")]
    assert pairs[0].line == (2 if header else 1)


def test_columns_named_for_one_input_and_a_group_column(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("q,cand,qid\nwho wrote it,Shakespeare did.,Q1\nwho wrote it,It rained.,Q1\n")
    pairs = list(read_new_pairs(path, named={"a": "q", "b": "cand", "group": "qid"}))
    assert [(p.a, p.b, p.group, p.line) for p in pairs] == [
        ("who wrote it", "Shakespeare did.", "Q1", 2),
        ("who wrote it", "It rained.", "Q1", 3),
    ]
    with pytest.raises(DataFormatError, match="no column 'answer'"):
        list(read_new_pairs(path, named={"a": "q", "b": "answer"}))


def test_relative_split_paths_resolve_from_the_working_directory(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    for name in ("claims_train.tsv", "claims_dev.tsv"):
        (work / name).write_text((OWN / name).read_text())
    monkeypatch.chdir(work)
    cfg = compose_train(
        tmp_path, "task=pairs", "task.splits.train.path=claims_train.tsv", "task.splits.dev.path=claims_dev.tsv",
        "task.columns.a=claim", "task.columns.b=evidence", "task.columns.label=verdict", "trainer.max_epochs=1",
    )  # fmt: skip
    assert Path(cfg.paths.data_dir) != work  # the files are not under paths.data_dir
    assert 0 <= train(cfg)["val/acc"] <= 1
    from matching.data.sources import CorpusNotFoundError

    cfg = compose_train(tmp_path, "task=pairs", "task.splits.train.path=missing.tsv", "trainer.max_epochs=1")
    with pytest.raises(CorpusNotFoundError) as caught:
        train(cfg)
    message = str(caught.value)
    assert f"missing.tsv in the working directory ({work})" in message and "under paths.data_dir=" in message


def test_a_csv_field_over_several_lines_is_read_and_counted(tmp_path, caplog):
    path = tmp_path / "t.csv"
    path.write_text('a,b,label\nx one,"y\nstill y",1\nz one,w one,0\n"p, q",r one,1\n')
    with caplog.at_level(logging.WARNING, logger="matching.data.tables"):
        pairs = list(read_pair_table(path))
    assert [(p.a, p.b, p.line) for p in pairs] == [("x one", "y\nstill y", 2), ("z one", "w one", 4),
                                                   ("p, q", "r one", 5)]  # fmt: skip
    assert "1 text runs over several lines" in caplog.text and "lines 2-3" in caplog.text


def test_an_unclosed_quote_names_the_line_where_it_opened(tmp_path):
    path = tmp_path / "t.csv"
    rows = [f"s{i} x,t{i} y,1" for i in range(10)]
    rows[3] = 's3 x,"t3 y,1'
    path.write_text("a,b,label\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataFormatError, match=r"t.csv, line 5: a quote opens a field .* never closes"):
        list(read_pair_table(path))


def test_a_rare_third_label_is_a_warning_with_each_count_and_the_way_out(tmp_path, caplog):
    """A yes/no file with one `maybe` row: the run would be a 3-class model (no F1, AP, ROC-AUC). The warning says
    so with every label's count, and task.labels + data.on_bad_example=skip trains the two-label model."""
    from matching.training.build import build_datamodule

    rows = [(f"claim number {i} about things", f"evidence number {i} about them", "yes" if i % 2 else "no")
            for i in range(200)]  # fmt: skip
    rows[17] = ("claim seventeen", "evidence seventeen", "maybe")
    path = tmp_path / "verdicts.tsv"
    path.write_text("claim\tevidence\tverdict\n" + "".join("\t".join(r) + "\n" for r in rows))
    files = [
        "task=pairs",
        f"task.splits.train.path={path}",
        f"task.splits.dev.path={path}",
        "task.columns.label=verdict",
    ]
    with caplog.at_level(logging.WARNING, logger="matching.data.sources"):
        dm = build_datamodule(compose_train(tmp_path, *files))
    assert dm.labels == ["maybe", "no", "yes"]
    said = caplog.text
    assert "3 labels seen ('maybe': 1, 'no': 100, 'yes': 99), so this trains a 3-class model" in said
    assert "task.labels=[no,yes] and data.on_bad_example=skip" in said
    caplog.clear()
    dm = build_datamodule(compose_train(tmp_path, *files, "task.labels=[no,yes]", "data.on_bad_example=skip"))
    dm.setup("fit")
    assert dm.labels == ["no", "yes"] and len(dm.splits["train"]) == 199 and "trains a" not in caplog.text


def test_a_stray_quote_is_reported_where_it_opened_not_where_the_runaway_field_closed(tmp_path):
    """A quote opening a field on line 6 swallows lines 6-15 up to a quote inside a text on line 15: the message
    names line 6 (where the stray quote is), and line 15 (where the reader stopped)."""
    path = tmp_path / "claims.csv"
    rows = [f"claim {i} here,evidence {i} there,yes" for i in range(14)]
    rows[4] = '"claim 4 here,evidence 4 there,yes'  # line 6: a stray quote
    rows[13] = 'he said "hi" there,evidence 13,no'  # line 15: a quote in a text closes the runaway field
    path.write_text("claim,evidence,verdict\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataFormatError) as err:
        list(read_pair_table(path))
    message = str(err.value)
    assert message.startswith(f"{path}, line 6: a quote opens a field") and "runs on to line 15" in message
    assert "lines 6-15 were swallowed" in message and "stray quote on line 6" in message


def test_a_json_array_followed_by_more_data_says_where_the_array_ended():
    data = b'[{"a": "x y", "b": "z w"},\n {"a": "p q", "b": "r s"}]\n{"a": "t", "b": "u"}\n'
    with pytest.raises(DataFormatError, match="line 3: the JSON array that starts on line 1 ends on line 2"):
        list(read_new_pairs(io.BytesIO(data), where="<stdin>"))


def test_errors_of_the_user_s_paths_are_the_user_s(csv_run, tmp_path, capsys):
    from matching.predict import main as predict_main

    run, dev_csv, _ = csv_run
    ckpt = f"ckpt={run / 'checkpoints' / 'best.ckpt'}"
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert predict_main([ckpt, f"input={dev_csv}", f"output={a_file}/sub/out.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(a_file) in err and "Traceback" not in err and "bug" not in err
    assert len(err.strip().splitlines()) == 1 or err.strip().splitlines()[-1].startswith("error: ")
    # an output folder that does not exist yet is created, as most tools do
    out = tmp_path / "new" / "folder" / "out.jsonl"
    assert predict_main([ckpt, f"input={dev_csv}", f"output={out}"]) == 0 and len(_lines(out)) == 4


def test_a_run_directory_under_a_file_is_the_user_s_mistake(tmp_path):
    import subprocess
    import sys

    from conftest import cli_overrides

    a_file = tmp_path / "a_file"
    a_file.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "matching.train", *cli_overrides(tmp_path), f"hydra.run.dir={a_file}/run"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and str(a_file) in last and "Traceback" not in done.stderr


def test_a_benchmark_run_scores_a_file_in_its_corpus_s_format(wikiqa_run, tmp_path):
    from conftest import evaluate

    run, _ = wikiqa_run
    ckpt = run / "checkpoints" / "best.ckpt"
    dev = evaluate(ckpt)
    scored = evaluate(ckpt, overrides=[f"input={FIXTURES / 'wikiqa' / 'WikiQA-dev.tsv'}"], out=tmp_path / "x.json")
    assert scored["input/map"] == pytest.approx(dev["val/map"]) and scored["input/mrr"] == pytest.approx(dev["val/mrr"])
