"""The renderers of the figures measured outside the studies (matching.studies.published.measured_elsewhere): the
reranking frontier and the denormals sitting, each rendered from its own data file. That every figure of the README
and the site is quoted from its record, or rendered: tests/test_quotes.py."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES_FILE = ROOT / "docs" / "figures" / "measured_elsewhere.yaml"


def _new_sitting() -> dict:
    """A frontier data file as bench_rerank.py writes it since its sittings time both sides on both runtimes: our
    fine-tuned model indexed on PyTorch, with its encoder on ONNX Runtime and that encoder in int8, and the
    CrossEncoder on each, one thread, 3 passes; ratios against the same runtime and precision and the fastest."""

    def row(model, side, runtime, precision, rank, rank_new, map_, **more):
        return {
            "model": model,
            "side": side,
            "runtime": runtime,
            "precision": precision,
            "threads": 1,
            "repeats": 3,
            "rank": rank,
            "rank_range": [rank * 0.9, rank * 1.1],
            "rank_new": rank_new,
            "rank_new_range": [rank_new * 0.9, rank_new * 1.1],
            "predict": rank,
            "map": map_,
            "mrr": 90.0,
            "questions": 65,
            "index_seconds": None,
            "index_candidates": None,
            "index_mb_per_1000": None,
            **more,
        }

    index = {"index_seconds": 14.6, "index_seconds_range": [14.2, 15.1], "index_candidates": 1019,
             "index_mb_per_1000": 39.08}  # fmt: skip
    ort = "ONNX Runtime encoder, PyTorch aligner"
    return {"command": "python benchmarks/bench_rerank.py --task trecqa ...", "date": "2030-01-02 03:04 UTC",
            "torch": "2.13.0+cpu", "questions": 65, "pairs": 1117, "repeats": 3,
            "sitting": {"processor": "AMD EPYC", "cpuid": {"cpu family": "25", "model": "17"}, "cores": 2,
                        "load_before": [0.31, 0.5, 0.6], "load_after": [1.02, 0.9, 0.7],
                        "load_note": "nothing else of ours ran",
                        "versions": {"torch": "2.13.0+cpu", "onnxruntime": "1.32.0", "sentence_transformers": "6.2.0"}},
            "results": [
                row("fine-tuned+index", "ours", "PyTorch", "fp32", 370.0, 66.0, 81.12, **index, against="cross-encoder",
                    x_new=1.0, x_new_range=[0.9, 1.1], x_indexed=5.4, x_indexed_range=[5.2, 5.6],
                    best_cross_encoder="cross-encoder+onnx+int8", x_best_new=0.5, x_best_new_range=[0.4, 0.6],
                    x_best_indexed=2.6, x_best_indexed_range=[2.5, 2.7]),
                row("fine-tuned+index+ort", "ours", ort, "fp32", 750.0, 69.0, 81.12, **index,
                    against="cross-encoder+onnx", x_new=0.8, x_new_range=[0.7, 0.9], x_indexed=7.5,
                    x_indexed_range=[7.1, 7.9], best_cross_encoder="cross-encoder+onnx+int8", x_best_new=0.5,
                    x_best_new_range=[0.4, 0.6], x_best_indexed=5.3, x_best_indexed_range=[5.0, 5.6]),
                row("fine-tuned+index+ort+int8", "ours", ort, "int8", 700.0, 80.0, 80.95, **index,
                    against="cross-encoder+onnx+int8", x_new=0.6, x_new_range=[0.5, 0.7], x_indexed=4.9,
                    x_indexed_range=[4.6, 5.2], best_cross_encoder="cross-encoder+onnx+int8", x_best_new=0.6,
                    x_best_new_range=[0.5, 0.7], x_best_indexed=4.9, x_best_indexed_range=[4.6, 5.2]),
                row("cross-encoder", "cross-encoder", "PyTorch", "fp32", 69.0, 69.0, 77.58),
                row("cross-encoder+onnx", "cross-encoder", "ONNX Runtime", "fp32", 100.0, 100.0, 77.58),
                row("cross-encoder+onnx+int8", "cross-encoder", "ONNX Runtime", "int8", 142.0, 142.0, 77.31),
            ]}  # fmt: skip


def test_the_frontier_sentence_names_the_runtimes_of_every_ratio(tmp_path):
    """Each task's clause from its own data file: every ratio with the runtimes and precision of both sides, the
    median of the passes with its range, our fastest against the CrossEncoder's fastest, the processor; WikiQA's
    first sitting (one pass, the CrossEncoder on PyTorch only) said to be one, its ratio with our encoder on ONNX
    Runtime said to be against the CrossEncoder on PyTorch; without WikiQA's file, the earlier figure likewise."""
    from matching.studies.published import measured_elsewhere as published

    frontier_sentence, trecqa_frontier_table = published.frontier_sentence, published.trecqa_frontier_table
    wikiqa_frontier_table = published.wikiqa_frontier_table

    (tmp_path / FIGURES_FILE.name).write_text(FIGURES_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    assert "has not run yet" in trecqa_frontier_table(tmp_path)
    assert "against the CrossEncoder on PyTorch, one pass each" in frontier_sentence(tmp_path)
    (tmp_path / "rerank_frontier_trecqa.json").write_text(json.dumps(_new_sitting()), encoding="utf-8")
    said = frontier_sentence(tmp_path)
    assert "has not run yet" in wikiqa_frontier_table(tmp_path)
    assert ("WikiQA dev, an earlier sitting against the CrossEncoder trained 2 epochs, on PyTorch, with our encoder on "
            "ONNX Runtime") in said  # fmt: skip
    trecqa = said.split("WikiQA")[0]
    assert "**5.4x** (5.2–5.6) the CrossEncoder's pairs/s with both on PyTorch fp32" in trecqa
    assert "**7.5x** (7.1–7.9) with both on ONNX Runtime fp32 (our aligner on PyTorch)" in trecqa
    assert "**4.9x** (4.6–5.2) with both on ONNX Runtime int8 (our aligner on PyTorch)" in trecqa
    assert ("our fastest (ONNX Runtime encoder, PyTorch aligner fp32) against the CrossEncoder's fastest (ONNX Runtime "
            "int8): **5.3x** (5.0–5.6)") in trecqa  # fmt: skip
    assert "1.0x, 0.8x, 0.6x in the same order" in trecqa and "14.6 s for 1,019 candidates" in trecqa
    assert "81.12, 81.12, 80.95 against the CrossEncoder's 77.58, 77.58, 77.31" in trecqa
    assert "median of 3 passes" in trecqa and "AMD EPYC (family 25, model 17), 2 cores, 2030-01-02 03:04 UTC" in trecqa
    table = trecqa_frontier_table(tmp_path)
    assert (
        "AMD EPYC (family 25, model 17), 2 cores, torch 2.13.0+cpu, ONNX Runtime 1.32.0, sentence-transformers 6.2.0"
        in table
    )
    assert "load average 0.31 before, 1.02 after; nothing else of ours ran" in table
    assert ("| fine-tuned+index+ort | ONNX Runtime encoder, PyTorch aligner | fp32 | 1 | 69 (62–76) | 750 (675–825) | "
            "0.8x (0.7–0.9) / 7.5x (7.1–7.9) | 5.3x (5.0–5.6), cross-encoder+onnx+int8 | 14.6 (14.2–15.1) | 39.08 | "
            "81.12 | 90.00 |") in table  # fmt: skip
    assert "| cross-encoder+onnx+int8 | ONNX Runtime | int8 | 1 | 142 (128–156) | 142 (128–156) | – | – |" in table

    first = {"command": "python benchmarks/bench_rerank.py --task wikiqa ...", "date": "2026-11-29 03:14 UTC",
             "torch": "2.13.0+cpu", "questions": 296, "pairs": 2733, "results": [
                 {"model": "fine-tuned+index", "threads": 1, "rank": 415.0, "rank_new": 89.0, "predict": 1004.0,
                  "map": 79.17, "mrr": 79.75, "questions": 122, "index_seconds": 24.2, "index_candidates": 2707,
                  "index_mb_per_1000": 37.43, "x_new": 1.6, "x_indexed": 7.3},
                 {"model": "fine-tuned+index+ort", "threads": 1, "rank": 586.0, "rank_new": 67.0, "predict": 811.0,
                  "map": 79.17, "mrr": 79.75, "questions": 122, "index_seconds": 35.9, "index_candidates": 2707,
                  "index_mb_per_1000": 37.43, "x_new": 1.2, "x_indexed": 10.3},
                 {"model": "cross-encoder", "threads": 1, "rank": 57.0, "rank_new": 57.0, "predict": 65.0,
                  "map": 78.91, "mrr": 79.9, "questions": 122, "index_seconds": None, "index_candidates": None,
                  "index_mb_per_1000": None}]}  # fmt: skip
    (tmp_path / "rerank_frontier_wikiqa.json").write_text(json.dumps(first), encoding="utf-8")
    wikiqa = frontier_sentence(tmp_path).split("WikiQA dev")[1]
    assert "an earlier sitting (2026-11-29 03:14 UTC: one pass a row, the processor not recorded" in wikiqa
    assert ("**7.3x** the CrossEncoder's pairs/s with both on PyTorch fp32, **10.3x** with our encoder on ONNX Runtime "
            "against the CrossEncoder on PyTorch") in wikiqa  # fmt: skip
    assert "both on ONNX Runtime" not in wikiqa and "1.6x, 1.2x in the same order" in wikiqa
    table = wikiqa_frontier_table(tmp_path)
    assert "one pass a row, the processor not recorded" in table and "× the CrossEncoder on PyTorch fp32" in table
    assert (
        "| fine-tuned+index+ort | ONNX Runtime encoder, PyTorch aligner | fp32 | 1 | 67 | 586 | 1.2x / 10.3x | – |"
        in table
    )


def test_the_committed_frontier_files_render():
    """The committed data files render, each table naming its runtimes; in a sitting of both runtimes each of our
    ratios is against the CrossEncoder on the same runtime family and precision; a first sitting's clause says that
    our encoder on ONNX Runtime was set against the CrossEncoder on PyTorch."""
    from matching.studies.published.measured_elsewhere import frontier_clause, frontier_rows, frontier_table

    for task in ("trecqa", "wikiqa"):
        found = frontier_rows(FIGURES_FILE.parent, task)
        if found is None:
            continue
        data, rows = found
        assert "| runtime | precision |" in frontier_table(FIGURES_FILE.parent, task)
        clause = frontier_clause(FIGURES_FILE.parent, task, task)
        if "sitting" not in data:
            assert "one pass a row, the processor not recorded" in clause
            assert "against the CrossEncoder on PyTorch" in clause and "both on ONNX Runtime" not in clause
            continue
        for r in rows.values():
            if r["side"] == "ours" and "against" in r:
                theirs = rows[(r["against"], r["threads"])]
                assert r["precision"] == theirs["precision"]
                assert ("ONNX" in r["runtime"]) == ("ONNX" in theirs["runtime"])


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
