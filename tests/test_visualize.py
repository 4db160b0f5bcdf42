"""Alignment heat-maps and histograms write valid PNGs with the matrices each aligner uses."""

import json
import struct

import pytest

from matching.matcher import Matcher
from matching.runs import load_trained
from matching.visualize import main, matrix_values


def _png_size(path):
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", data[16:24])


def test_heatmap_for_coda_shows_affinity_gate_and_m(wikiqa_run, tmp_path, capsys):
    run, _ = wikiqa_run
    out = tmp_path / "pair.png"
    code = main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "a=how big is the moon",
                 "b=The Moon is the fifth largest natural satellite.", f"out={out}"])  # fmt: skip
    assert code == 0 and f"wrote {out}" in capsys.readouterr().out
    width, height = _png_size(out)
    assert width > 300 and height > 200
    aligned = Matcher.load(run).align("how big is the moon", "the moon is large .")
    tokens_a, tokens_b, matrices = aligned["a_tokens"], aligned["b_tokens"], aligned["matrices"]
    assert set(matrices) == {"affinity", "gate", "M"}
    assert matrices["M"].shape == (len(tokens_a), len(tokens_b)) == (5, 5)


def test_heatmap_for_softmax_labels_tokens_with_null(make_cfg, tmp_path):
    from matching.train import train

    cfg = make_cfg("trainer.max_epochs=1", "model.null_token=true", "intra=softmax")
    train(cfg)
    run = load_trained(f"{cfg.paths.output_dir}/checkpoints/best.ckpt")
    aligned = Matcher(run).align("A dog runs.", "An animal moves")
    tokens_a, tokens_b, matrices = aligned["a_tokens"], aligned["b_tokens"], aligned["matrices"]
    assert tokens_a[0] == tokens_b[0] == "<null>" and tokens_a[1:] == ["a", "dog", "runs", "."]
    assert {"softmax_a", "softmax_b", "intra_a/softmax_a"} <= set(matrices)
    assert matrices["softmax_a"].sum(1) == pytest.approx([1.0] * len(tokens_a), abs=1e-5)
    out = tmp_path / "intra.png"
    assert main([f"ckpt={cfg.paths.output_dir}/checkpoints/best.ckpt", "a=A dog runs.", "b=An animal moves",
                 "show_intra=true", f"out={out}"]) == 0  # fmt: skip
    _png_size(out)


def test_histogram_mode_over_the_dev_set(wikiqa_run, tmp_path, capsys):
    run, _ = wikiqa_run
    values = matrix_values(load_trained(run / "checkpoints" / "best.ckpt"))
    assert set(values) == {"affinity", "gate", "M"}
    assert len(values["M"]) == len(values["gate"]) > 100
    assert values["M"].min() >= -1 and values["M"].max() <= 1
    out = tmp_path / "hist.png"
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "mode=histogram", f"out={out}"]) == 0
    _png_size(out)
    summary = json.loads(out.with_suffix(".json").read_text())
    m = values["M"]
    assert summary["M"]["negative"] == pytest.approx(float((m < 0).mean()))
    assert summary["M"]["cells"] == len(m) and summary["M"]["min"] == pytest.approx(float(m.min()))
    assert 0 < summary["M"]["negative"] < 1  # the default CoDA subtracts as well as adds, on real text
    assert "negative" in capsys.readouterr().out


def test_usage_errors(wikiqa_run, capsys):
    run, _ = wikiqa_run
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "a=only one side"]) == 2
    assert "needs both texts" in capsys.readouterr().err
    assert main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "mode=pie"]) == 2
    assert "mode must be heatmap or histogram" in capsys.readouterr().err
