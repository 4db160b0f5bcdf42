"""The README's Python section runs as written, against a fixture run put where its code looks."""

import ast
import subprocess
import sys

import pytest

from matching import Matcher
from tests.conftest import ROOT, SUBPROCESS_ENV


def python_section() -> str:
    """The code block of the README's "Use a trained model from Python"."""
    section = (ROOT / "README.md").read_text().split("### Use a trained model from Python\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_python_section_runs_as_written(wikiqa_run, tmp_path):
    run_dir, _ = wikiqa_run
    runs = tmp_path / "outputs" / "runs" / "wikiqa" / "coda"
    runs.mkdir(parents=True)
    (runs / "2026-01-01_00-00-00").symlink_to(run_dir)
    (runs / "2026-01-02_00-00-00").mkdir()  # a newer run killed before its first checkpoint: not "the latest run"
    (runs / "2026-01-02_00-00-00" / "train.log").write_text("killed\n")
    code = python_section()
    assert 10 <= len(code.splitlines()) <= 12 and "Matcher.load(run)" in code
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env=SUBPROCESS_ENV, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ranked, answers, aligned = done.stdout.splitlines()
    matcher = Matcher.load(run_dir)
    question, candidates = "how big is the moon", ["Paris is in France.", "Its diameter is 3,474 km."]
    expected = [*matcher.rank(question, candidates, top_k=1), *matcher.predict([(question, c) for c in candidates])]
    for got, want in zip([*ast.literal_eval(ranked), *ast.literal_eval(answers)], expected, strict=True):
        assert got == pytest.approx(want, abs=1e-6)
    assert aligned.startswith("['how', 'big', 'is', 'the', 'moon'] {'affinity': (5, ")
