"""Predict on new pairs: TSV, JSON Lines and stdin; classification and ranking; errors with line numbers."""

import io
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from matching.data.tables import read_new_pairs
from matching.predict import main


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def test_classification_from_tsv_and_jsonl_agree(snli_run, tmp_path, capsys):
    run, _ = snli_run
    ckpt = run / "checkpoints" / "best.ckpt"
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("a\tb\nA man plays a guitar.\tA person makes music.\nTwo dogs run.\tThe cats sleep.\n")
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text(
        json.dumps({"sentence1": "A man plays a guitar.", "sentence2": "A person makes music."}) + "\n\n"
        + json.dumps({"a": "Two dogs run.", "b": "The cats sleep."}) + "\n"
    )  # fmt: skip
    code, from_tsv, err = _run([f"ckpt={ckpt}", f"input={tsv}", "batch_size=1"], capsys)
    assert code == 0 and "predicted 2 pairs" in err
    code, from_jsonl, _ = _run([f"ckpt={ckpt}", f"input={jsonl}"], capsys)
    assert code == 0
    assert [r["label"] for r in from_tsv] == [r["label"] for r in from_jsonl]
    for record in from_tsv:
        assert set(record["probs"]) == {"entailment", "neutral", "contradiction"}
        assert sum(record["probs"].values()) == pytest.approx(1, abs=1e-5)
        assert record["label"] == max(record["probs"], key=record["probs"].get)
    assert from_jsonl[0]["probs"] == pytest.approx(from_tsv[0]["probs"], abs=1e-6)


def test_ranking_from_stdin_groups_and_orders_candidates(wikiqa_run, tmp_path):
    run, _ = wikiqa_run
    lines = [
        {"question": "how big is the moon", "answer": "The Moon is the fifth largest moon.", "qid": "Q1"},
        {"question": "how big is the moon", "answer": "Paris is in France.", "qid": "Q1"},
        {"question": "how big is the moon", "answer": "Its diameter is 3,474 km.", "qid": "Q1"},
        {"question": "who wrote hamlet", "answer": "Hamlet is a tragedy by Shakespeare."},
        {"question": "who wrote hamlet", "answer": "Bananas are yellow."},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\n"
    out = tmp_path / "ranked.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "matching.predict", f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "input=-",
         f"output={out}"],
        input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["group"] for g in groups] == ["Q1", "who wrote hamlet"]
    assert sorted(c["line"] for c in groups[0]["ranking"]) == [1, 2, 3]
    scores = [c["score"] for c in groups[0]["ranking"]]
    assert scores == sorted(scores, reverse=True)
    p_match = [c["p_match"] for c in groups[0]["ranking"]]
    assert p_match == sorted(p_match, reverse=True) and all(0 <= p <= 1 for p in p_match)


@pytest.mark.parametrize("with_group", [False, True])
def test_ranking_collects_a_group_wherever_its_lines_are(wikiqa_run, tmp_path, capsys, with_group):
    """The same question on lines 1 and 3 (grouped by its text, or by a group column) is one group, ranked once;
    groups come out in the order of their first line."""
    run, _ = wikiqa_run
    rows = [("q one", "cand a", "G1"), ("q two", "cand b", "G2"), ("q one", "cand c", "G1")]
    tsv = tmp_path / "q.tsv"
    tsv.write_text("".join("\t".join(row if with_group else row[:2]) + "\n" for row in rows))
    code, records, err = _run([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"input={tsv}"], capsys)
    assert code == 0, err
    assert [r["group"] for r in records] == (["G1", "G2"] if with_group else ["q one", "q two"])
    assert sorted(c["line"] for c in records[0]["ranking"]) == [1, 3] and records[0]["a"] == "q one"
    assert [c["b"] for c in records[1]["ranking"]] == ["cand b"]
    assert "predicted 3 pairs" in err


def test_one_pair_is_counted_in_the_singular(snli_run, tmp_path, capsys):
    run, _ = snli_run
    tsv = tmp_path / "one.tsv"
    tsv.write_text("A man plays a guitar.\tA person makes music.\n")
    code, records, err = _run([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"input={tsv}"], capsys)
    assert code == 0 and len(records) == 1 and "predicted 1 pair\n" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": "x", "b": "y"}\n{"a": "x", "b": \n', "line 2: invalid JSON"),
        ('{"text": "x"}\n', "cannot tell which columns hold the two texts"),
        ("only one column\n", "input.txt: expected 2 or 3 columns"),
    ],
)
def test_malformed_input_names_the_line(text, message):
    from matching.errors import DataFormatError

    with pytest.raises(DataFormatError, match=message):
        list(read_new_pairs(io.StringIO(text), where="input.txt"))


def test_help_names_every_input_format(capsys):
    assert main(["--help"]) == 0
    usage = capsys.readouterr().out
    assert "TSV" in usage and "JSON Lines" in usage and "JSON array" in usage


def test_usage_errors(snli_run, capsys):
    run, _ = snli_run
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}"]) == 2
    assert "usage" in capsys.readouterr().err
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "input=/no/such/file.tsv"]) == 2
    assert "/no/such/file.tsv" in capsys.readouterr().err


def test_a_word_seen_only_in_the_vectors_file_gets_its_own_vector(snli_run, tmp_path, capsys):
    """'album' is in neither SNLI fixture split but in the vectors file: predict gives it its vector (no vectors
    file needed at that time), while a word with no vector hashes to an OOV bucket."""
    import numpy as np
    import torch
    from conftest import FIXTURE_VECTORS

    from matching.data.pairs import Pair
    from matching.saved.run_folder import load_run

    run_dir, _ = snli_run
    run = load_run(run_dir / "checkpoints" / "best.ckpt")
    line = next(x for x in FIXTURE_VECTORS.read_text().splitlines() if x.startswith("album "))
    vector = np.array(line.split()[1:], dtype=np.float32)
    a = run.text.prepare([Pair("an album", "qwzx", "")]).a
    album, qwzx = int(a[0][1]), int(run.text.prepare([Pair("qwzx", "x", "")]).a[0][0])
    assert album == run.vocab.index["album"] and album >= run.vocab.first_word_id
    assert qwzx == run.vocab.bucket("qwzx")
    row = run.model.embedding.weight[album].float()
    torch.testing.assert_close(row, torch.from_numpy(vector / np.linalg.norm(vector)), atol=2e-3, rtol=2e-3)

    pairs = tmp_path / "p.tsv"
    pairs.write_text("an album\ta record\nan qwzx\ta record\n")
    code, records, _ = _run([f"ckpt={run_dir / 'checkpoints' / 'best.ckpt'}", f"input={pairs}"], capsys)
    assert code == 0 and records[0]["probs"] != records[1]["probs"]


def test_predict_reads_the_checkpoint_and_the_config_once(wikiqa_run, tmp_path, capsys, monkeypatch):
    """A pair's way through `predict`: the run's config.yaml read once (to compose the command), its weights once
    (torch.load of the checkpoint; no safetensors file is read), whatever the input."""
    import safetensors
    import safetensors.torch
    import torch
    from omegaconf import OmegaConf

    run, _ = wikiqa_run
    reads = {"torch.load": 0, "safetensors": 0, "config.yaml": 0}

    def counted(key, real, path_of=lambda *a, **k: None):
        def wrapper(*args, **kwargs):
            if path_of(*args, **kwargs) in (None, "config.yaml"):
                reads[key] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(torch, "load", counted("torch.load", torch.load))
    monkeypatch.setattr(safetensors.torch, "load_file", counted("safetensors", safetensors.torch.load_file))
    monkeypatch.setattr(safetensors, "safe_open", counted("safetensors", safetensors.safe_open))
    name = lambda file, *a, **k: "config.yaml" if str(file).endswith("config.yaml") else "other"  # noqa: E731
    monkeypatch.setattr(OmegaConf, "load", counted("config.yaml", OmegaConf.load, name))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("what is a cat\ta cat is an animal\tq1\nwhat is a cat\tdogs bark\tq1\nwho wrote it\tshe did\tq2\n")
    code, records, err = _run([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"input={pairs}"], capsys)
    assert code == 0 and "predicted 3 pairs" in err and [r["group"] for r in records] == ["q1", "q2"]
    assert reads == {"torch.load": 1, "safetensors": 0, "config.yaml": 1}
