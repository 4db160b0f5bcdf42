"""`make demo`: the sample it ships (format, split, vector coverage, licence note), how the sample is rebuilt, and the
demo itself run end to end from a folder with no data/ (on a cut-down sample in the default suite; in full, slow)."""

import gzip
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURE_VECTORS, FIXTURES, ROOT, SUBPROCESS_ENV

from matching import DEMO_DATA
from matching.cli import compose_config
from matching.data.readers import read_snli_jsonl
from matching.demo import DemoError, check_sample, comparison
from matching.demo_sample import DEV, NEW_PAIRS, TRAIN, VECTORS, make_sample, sample_words
from matching.results.rows import Comparison, Row


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in gzip.open(path, "rt", encoding="utf-8")]


def test_the_shipped_sample_is_snli_split_by_premise():
    train, dev = _records(DEMO_DATA / TRAIN), _records(DEMO_DATA / DEV)
    assert (len(train), len(dev)) == (3000, 500)
    for records in (train, dev):  # SNLI's own lines: every field as distributed, a gold label on each
        assert {"sentence1", "sentence2", "gold_label", "captionID", "pairID", "sentence1_parse"} <= set(records[0])
        assert {r["gold_label"] for r in records} == {"entailment", "neutral", "contradiction"}
    assert not {r["captionID"] for r in train} & {r["captionID"] for r in dev}  # no premise on both sides
    assert not {r["pairID"] for r in train} & {r["pairID"] for r in dev}
    assert len(list(read_snli_jsonl(DEMO_DATA / TRAIN))) == 3000  # what a run reads


def test_the_shipped_vectors_cover_every_word_of_the_sample():
    texts = [r[k] for name in (TRAIN, DEV) for r in _records(DEMO_DATA / name) for k in ("sentence1", "sentence2")]
    new = [json.loads(line) for line in (DEMO_DATA / NEW_PAIRS).read_text().splitlines()]
    texts += [p[k] for p in new for k in ("premise", "hypothesis")]
    lines = gzip.open(DEMO_DATA / VECTORS, "rt", encoding="utf-8").read().splitlines()
    words = [line.split(" ", 1)[0] for line in lines]
    assert set(words) == sample_words(texts) and len(words) == len(set(words))
    for line in lines[:50]:
        values = line.split(" ")[1:]
        assert len(values) == 300 and all(re.fullmatch(r"-?\d+\.\d{4}", v) for v in values)
    assert {p["expected"] for p in new} == {"entailment", "neutral", "contradiction"}


def test_the_sample_is_small_attributed_and_package_data():
    sizes = sum(f.stat().st_size for f in DEMO_DATA.iterdir())
    assert sizes < 4_000_000
    note = (DEMO_DATA / "README.md").read_text()
    for needed in ("CC BY-SA 4.0", "Bowman", "Apache-2.0", "all-MiniLM-L6-v2", "python -m matching.demo_sample"):
        assert needed in note, needed
    pyproject = (ROOT / "pyproject.toml").read_text()  # (that the wheel carries it: tests/test_packaging.py)
    assert 'matching-demo = "matching.demo:main"' in pyproject


def test_the_sample_is_rebuilt_byte_for_byte(tmp_path):
    """demo_sample's recipe on SNLI-format input: the same files give the same bytes; whole premises per side."""
    snli = FIXTURES / "snli" / "snli_1.0_train.jsonl"  # 12 labelled pairs over 5 premises
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        written = make_sample(snli, FIXTURE_VECTORS, out, train_pairs=6, dev_pairs=3, seed=0, decimals=4)
    assert (written["train"], written["dev"]) == (6, 3) and written["vectors"] > 0
    for name in (TRAIN, DEV, VECTORS):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    train, dev = _records(first / TRAIN), _records(first / DEV)
    dev_premises = {r["captionID"] for r in dev}
    assert not {r["captionID"] for r in train} & dev_premises
    originals = [json.loads(line) for line in snli.read_text().splitlines()]
    order = [r["pairID"] for r in originals]
    assert [r["pairID"] for r in train] == sorted((r["pairID"] for r in train), key=order.index)  # file order kept
    with pytest.raises(ValueError, match="fewer than train_pairs"):
        make_sample(snli, FIXTURE_VECTORS, tmp_path / "big", train_pairs=20, dev_pairs=3)


def test_experiment_demo_trains_on_the_shipped_files_wherever_it_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the clone: the files are found through the package
    cfg = compose_config("train", ["experiment=demo"])
    assert cfg.task.name == "snli_sample" and not cfg.task.get("paper") and cfg.task.test_splits == []
    assert Path(cfg.task.splits.train.path) == DEMO_DATA / TRAIN and Path(cfg.task.splits.dev.path) == DEMO_DATA / DEV
    assert Path(cfg.embeddings.path) == DEMO_DATA / VECTORS
    plain = compose_config("train", ["task=snli"])  # the full corpus keeps its meaning
    assert plain.task.splits.train.path == "snli/snli_1.0_train.jsonl" and plain.task.paper.coda.acc == 85.71


def test_a_missing_sample_is_one_clear_error(tmp_path, monkeypatch):
    from matching import demo

    monkeypatch.setattr(demo, "DEMO_DATA", tmp_path)
    with pytest.raises(DemoError, match="reinstall"):
        check_sample()


def _rows(**accuracies):
    return [Row("snli_sample", a, "F=none", "dev", "acc", m, s, 2, (1, 2), None, 2, {}, Comparison())
            for a, (m, s) in accuracies.items()]  # fmt: skip


def test_the_comparison_says_what_the_seed_aware_test_resolves():
    """The demo's verdict is the report's method-level test: 'not resolved' with what 500 pairs and 2 seeds could
    resolve and the seeds that would, never 'equal'; 'resolved' only when p < 0.05; the test over the pairs alone
    is shown as what it is (these trained models); one seed a side gets no verdict."""
    noise, real = _rows(softmax=(57.3, 0.4), coda=(64.2, 4.8)), _rows(softmax=(57.3, 0.4), coda=(66.0, 0.5))
    noise[1] = replace(noise[1], comparison=Comparison("softmax F=none", 6.9, -20.1, 33.9, 0.29, 500, 31.0,
                       "not resolved", seed_counts="2 vs 2", seeds_needed=9, units_ci_low=3.5, units_ci_high=10.3,
                       units_p=0.0002))  # fmt: skip
    real[1] = replace(real[1], comparison=Comparison("softmax F=none", 8.7, 5.6, 11.8, 0.004, 500, 4.1, "resolved",
                                                     seed_counts="2 vs 2"))  # fmt: skip
    within = " ".join(comparison(noise, 500))
    assert "Dev accuracy (mean ± std over seeds, the same F=none): softmax 57.30 ± 0.40, coda 64.20 ± 4.80" in within
    assert (
        "coda − softmax F=none: +6.90 points over 500 dev pairs and 2 vs 2 seeds: 95 % CI [-20.10, +33.90] "
        "counting both the seeds and the pairs, p = 0.29: not resolved (which is not the same as equal)" in within
    )
    assert (
        "resolve a difference of about 31.0 points" in within and "about 9 seeds a side would resolve +6.90" in within
    )
    assert "Over the pairs alone, the seeds fixed: [+3.50, +10.30], p = 0.0002" in within
    assert "resolved on this sample, with these settings, for the aligners" in " ".join(comparison(real, 500))
    one = _rows(softmax=(57.3, 0.0), coda=(66.0, 0.0))
    nan = float("nan")
    one[1] = replace(one[1], comparison=Comparison("softmax F=none", 8.7, nan, nan, nan, 500, nan, "too few seeds",
                                                   seed_counts="1 vs 1"))  # fmt: skip
    assert "no verdict about the aligners" in " ".join(comparison(one, 500))
    assert comparison(_rows(softmax=(57.3, 0.4)), 500) == []


def test_the_demo_compares_with_the_same_score_function_and_centring_when_every_aligner_has_them(tmp_path):
    """CoDA centres its tokens by default and softmax does not: the demo holds centring the same for both, as it
    holds F, so that its verdict is the aligner's (the centring table, docs/results/index.md)."""
    from omegaconf import OmegaConf

    from matching.demo import train_command

    args = train_command(OmegaConf.create({"aligners": ["softmax", "coda"], "seeds": [1, 2], "train": ""}), tmp_path)
    assert "aligner.projection=none" in args and "aligner.center_tokens=true" in args
    args = train_command(OmegaConf.create({"aligners": ["softmax", "conflict"], "seeds": [1], "train": ""}), tmp_path)
    assert not any(a.startswith("aligner.projection") for a in args)  # conflict has no F
    assert "aligner.center_tokens=true" in args  # but it has centring


def _run_demo(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    """`python -m matching.demo` from a folder that is not the clone and has no data/, offline."""
    env = SUBPROCESS_ENV | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "matching.demo", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def _check_outputs(out: Path, aligners: list[str], stdout: str) -> None:
    assert "| snli_sample | coda |" in stdout and "| snli_sample | softmax |" in stdout  # the report's table
    assert "Dev accuracy (mean ± std over seeds" in stdout and "Go further:" in stdout
    assert "coda − softmax F=none aligner.center_tokens=true: " in stdout  # the paired test, F and centring held
    assert " over 500 dev pairs and " in stdout
    for aligner in aligners:
        predictions = [json.loads(line) for line in (out / f"predictions_{aligner}.jsonl").read_text().splitlines()]
        assert len(predictions) == 6 and predictions[0]["a"] == "A man is playing a guitar on a stage."
        assert (out / f"alignment_{aligner}.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "report.md").is_file() and (out / "report.csv").is_file()
    runs = sorted(p.name for p in (out / "runs").iterdir() if p.is_dir())
    assert all("_snli_sample_" in name for name in runs)  # the run directories say it is the sample


def test_the_demo_runs_end_to_end_offline_from_any_folder(tmp_path):
    """The whole demo on a cut-down run (200 training pairs, 1 epoch, a small model): train both aligners, compare,
    predict, draw; the full run is the slow test below."""
    out = tmp_path / "demo"
    small = "task.epochs=1 task.splits.train.stop=200 model.hidden=16 trainer.enable_progress_bar=false"
    done = _run_demo(tmp_path, "seeds=[1]", f"train={small}", f"out={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    _check_outputs(out, ["softmax", "coda"], done.stdout)
    assert {p.name for p in (tmp_path / "data").iterdir()} == {"cache"}  # no corpus needed; caches only


def test_a_training_failure_stops_the_demo_with_one_paragraph(tmp_path, monkeypatch, capsys):
    from matching import demo

    launched = []

    def failing(command, **kwargs):  # what train does with a mistake in an override: its paragraph, status 2
        launched.append(command)
        return subprocess.CompletedProcess(command, 2)

    monkeypatch.setattr(demo.subprocess, "run", failing)
    code = demo.main(["seeds=[1]", "train=no_such_key=1 model.hidden=8", f"out={tmp_path / 'demo'}"])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the log's lines (the new pairs' columns, read first)
    assert code == 2 and last.startswith("error: training stopped with exit status 2") and "Traceback" not in err
    (command,) = launched
    assert command[1:3] == ["-m", "matching.train"] and "experiment=demo" in command
    assert command[-2:] == ["no_such_key=1", "model.hidden=8"] and "aligner=softmax,coda" in command


@pytest.mark.slow
def test_the_full_demo(tmp_path):
    """What `make demo` runs: 2 aligners x 2 seeds x 10 epochs on the whole sample (about 3 minutes on 2 cores)."""
    out = tmp_path / "demo"
    done = _run_demo(tmp_path, f"out={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    _check_outputs(out, ["softmax", "coda"], done.stdout)
    assert len(list((out / "runs").glob("*_seed2"))) == 2
    metrics = [json.loads(p.read_text()) for p in (out / "runs").glob("*/metrics.json")]
    assert all(m["val/acc"] > 0.45 for m in metrics)  # it learns: chance is 1/3
