"""The renderers of the figures measured outside the studies (matching.studies.published.measured_elsewhere): the
reranking frontier and the denormals sitting, each rendered from its own data file. That every figure of the README
and the site is quoted from its record, or rendered: tests/test_quotes.py."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES_FILE = ROOT / "docs" / "figures" / "measured_elsewhere.yaml"


def test_the_frontier_sentence_quotes_each_task_from_its_own_data_file(tmp_path):
    from matching.studies.published.measured_elsewhere import frontier_sentence, wikiqa_frontier_table

    (tmp_path / FIGURES_FILE.name).write_text(FIGURES_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    trecqa = json.loads((FIGURES_FILE.parent / "rerank_frontier_trecqa.json").read_text(encoding="utf-8"))
    (tmp_path / "rerank_frontier_trecqa.json").write_text(json.dumps(trecqa), encoding="utf-8")
    assert "has not run yet" in wikiqa_frontier_table(tmp_path)
    assert "an earlier sitting" in frontier_sentence(tmp_path)  # WikiQA's file not there yet: said to be older

    wikiqa = {**trecqa, "date": "2030-01-02 03:04 UTC", "questions": 122, "pairs": 2733, "results": [
        {**trecqa["results"][0], "model": "cross-encoder", "map": 78.91, "rank": 50.0, "rank_new": 50.0},
        {**trecqa["results"][4], "model": "fine-tuned+index+ort", "map": 79.5, "x_indexed": 12.3, "x_new": 1.1,
         "index_seconds": 33.3, "index_candidates": 2733},
    ]}  # fmt: skip
    (tmp_path / "rerank_frontier_wikiqa.json").write_text(json.dumps(wikiqa), encoding="utf-8")
    said = frontier_sentence(tmp_path)
    assert "an earlier sitting" not in said
    assert "WikiQA dev **12.3x**" in said and "**1.1x** on texts seen once" in said
    assert "33.3 s for 2,733 candidates" in said and "79.50 against 78.91 dev MAP (2030-01-02 03:04 UTC)" in said
    assert "| fine-tuned+index+ort | 1 |" in wikiqa_frontier_table(tmp_path)


def test_the_denormals_table_is_rendered_from_its_sitting_file(tmp_path):
    """docs/results/performance.md's denormals block: each case's training seconds kept and flushed, their ratio, the
    first and last epoch both ways and whether the dev scores agree, from benchmarks/denormals.py's file; without the
    file it says the sitting has not run."""
    from matching.studies.published.measured_elsewhere import denormals_table

    assert "has not run yet" in denormals_table(tmp_path)
    run = {"train_seconds": 132.3, "first_epoch": 10.2, "last_epoch": 21.1}
    data = {"command": "python benchmarks/denormals.py --case frozen", "date": "2030-01-02 03:04 UTC",
            "processor": "a CPU", "cores": 2, "torch": "2.13.0", "results": [
                {"case": "frozen", "what": "CoDA over the frozen MiniLM encoder", "kept": run, "same_scores": True,
                 "flushed": {**run, "train_seconds": 107.8, "last_epoch": 13.4}, "speedup": 1.23},
                {"case": "static", "what": "CoDA over static MiniLM vectors", "kept": run, "flushed": run,
                 "speedup": 1.0, "same_scores": False}]}  # fmt: skip
    (tmp_path / "denormals.json").write_text(json.dumps(data), encoding="utf-8")
    table = denormals_table(tmp_path)
    assert (
        "| CoDA over the frozen MiniLM encoder | 132.3 | 107.8 | 1.23x | 10.2 → 21.1 | 10.2 → 13.4 | the same" in table
    )
    assert table.splitlines()[-1].endswith("| 1.00x | 10.2 → 21.1 | 10.2 → 21.1 | differ |")
    assert "(2030-01-02 03:04 UTC, a CPU, 2 cores, torch 2.13.0;" in table
