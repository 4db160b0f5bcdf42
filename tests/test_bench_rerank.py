"""benchmarks/bench_rerank.py: each of our rows is set against the CrossEncoder on the same runtime and precision and
against its fastest row, medians of the passes with each pass's own ratio for the range; the CrossEncoder on ONNX
Runtime scores as on PyTorch; a machine folder never reaches the data file's command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import load_by_path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_rerank.py"


@pytest.fixture(scope="module")
def bench():
    return load_by_path("bench_rerank", SCRIPT)


def result(model, side, runtime, precision, passes, new=None, threads=1):
    median = sorted(passes)[len(passes) // 2]
    return {"model": model, "side": side, "runtime": runtime, "precision": precision, "threads": threads,
            "rank": median, "rank_passes": passes, "rank_new_passes": new or passes}  # fmt: skip


def test_each_ratio_is_against_the_cross_encoder_on_the_same_runtime_and_precision(bench):
    ort = bench.RUNTIMES["ort"]
    results = [
        result("fine-tuned+index", "ours", "PyTorch", "fp32", [400.0, 360.0, 380.0], new=[70.0, 60.0, 66.0]),
        result("fine-tuned+index+ort", "ours", ort, "fp32", [800.0, 700.0, 750.0]),
        result("fine-tuned+onnx+int8", "ours", "ONNX Runtime", "int8", [300.0, 300.0, 300.0]),
        result("cross-encoder", "cross-encoder", "PyTorch", "fp32", [80.0, 60.0, 70.0]),
        result("cross-encoder+onnx", "cross-encoder", "ONNX Runtime", "fp32", [100.0, 100.0, 100.0]),
        result("cross-encoder+onnx+int8", "cross-encoder", "ONNX Runtime", "int8", [150.0, 150.0, 150.0]),
        result("fine-tuned+index", "ours", "PyTorch", "fp32", [500.0], threads=2),  # no CrossEncoder at 2 threads
    ]
    bench.with_ratios(results)
    torch_row, ort_row, int8_row, *theirs, alone = results
    assert torch_row["against"] == "cross-encoder"
    assert torch_row["x_indexed"] == round(380 / 70, 1) and torch_row["x_indexed_range"] == [5.0, 6.0]
    assert torch_row["x_new"] == round(66 / 70, 1) and torch_row["x_new_range"] == [0.9, 1.0]
    assert ort_row["against"] == "cross-encoder+onnx" and ort_row["x_indexed"] == 7.5
    assert int8_row["against"] == "cross-encoder+onnx+int8" and int8_row["x_indexed"] == 2.0
    assert {r["best_cross_encoder"] for r in (torch_row, ort_row, int8_row)} == {"cross-encoder+onnx+int8"}
    assert torch_row["x_best_indexed"] == round(380 / 150, 1) and ort_row["x_best_indexed"] == 5.0
    assert all("x_new" not in r for r in theirs) and "x_new" not in alone and "best_cross_encoder" not in alone


def test_the_flags_of_a_model_name_say_how_it_runs(bench):
    with pytest.raises(SystemExit, match="unknown flag"):
        bench.matcher_row("fine-tuned+gpu", "run", [], 1)
    with pytest.raises(SystemExit, match="no index"):
        bench.matcher_row("fine-tuned+onnx+index", "run", [], 1)
    with pytest.raises(SystemExit, match="ONNX Runtime"):
        bench.matcher_row("fine-tuned+int8", "run", [], 1)


def test_no_folder_of_this_machine_reaches_the_command(bench, tmp_path):
    said = bench.said_command(["--data-dir", str(tmp_path), "--model", "fine-tuned+index+ort+int8=/tmp/runs/coda",
                               "--cross-encoder", "/tmp/ce/seed1/model", "--cross-encoder-as", "torch,onnx,onnx+int8",
                               "--threads", "1", "--json", "docs/figures/rerank_frontier_trecqa.json",
                               "--chart=/tmp/out/chart.png"])  # fmt: skip
    assert said == ["--data-dir", "/path/to/corpora", "--model", "fine-tuned+index+ort+int8=<fine-tuned run>",
                    "--cross-encoder", "<CrossEncoder folder>", "--cross-encoder-as", "torch,onnx,onnx+int8",
                    "--threads", "1", "--json", "docs/figures/rerank_frontier_trecqa.json",
                    "--chart=chart.png"]  # fmt: skip


def test_a_file_written_outside_docs_is_said_by_its_name_not_as_the_cross_encoder(bench):
    """A sitting written to /tmp/s/x.json once published its command with `--json <CrossEncoder folder>`."""
    said = bench.said_command(["--pairs", "/home/me/WikiQA-dev.tsv", "--json", "/tmp/s/rerank_int8.json"])
    assert said == ["--pairs", "/path/to/WikiQA-dev.tsv", "--json", "rerank_int8.json"]


@pytest.mark.slow
def test_the_cross_encoder_on_onnx_runtime_scores_as_on_pytorch(bench, tmp_path):
    """A small CrossEncoder (2 layers, random weights, MiniLM's tokenizer) exported into its folder's onnx/ and run by
    ONNX Runtime inside sentence-transformers' CrossEncoder gives PyTorch's scores, int8 close to them; other weights
    saved in the folder are exported again, not run from the old graph."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from matching.model.pretrained_encoder import MINILM, locate_encoder

    minilm = locate_encoder(MINILM[0])
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=1)  # fmt: skip
    folder = tmp_path / "ce"
    BertForSequenceClassification(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(Path(minilm) / name, folder / name)
    agreement: dict = {}
    rows = {how: bench.cross_encoder_row(str(folder), how, 1, agreement) for how in ("torch", "onnx", "onnx+int8")}
    assert (folder / "onnx" / "model.onnx").is_file()
    pairs = ("what is a glacier cave", ["a cave formed in the ice of a glacier", "a river", "ice"])
    torch_scores = rows["torch"].scores(*pairs)
    assert rows["onnx"].scores(*pairs) == pytest.approx(torch_scores, abs=1e-5)
    assert rows["onnx+int8"].scores(*pairs) == pytest.approx(torch_scores, abs=0.05)
    assert agreement["cross-encoder+onnx"] < 1e-5 and agreement["cross-encoder+onnx+int8"] < 0.05
    assert [rows[h].runtime for h in rows] == ["torch", "onnx", "onnx"]
    assert [rows[h].precision for h in rows] == ["fp32", "fp32", "int8"]
    json.dumps(agreement)  # the data file records it
    BertForSequenceClassification(config).save_pretrained(folder)  # other weights in the same folder: exported again
    again: dict = {}
    retrained = bench.cross_encoder_row(str(folder), "onnx", 1, again)
    assert again["cross-encoder+onnx"] < 1e-5 and retrained.scores(*pairs) != pytest.approx(torch_scores, abs=1e-5)
