"""Exported models (TorchScript, ONNX) give the checkpoint's outputs, with dynamic batch and lengths."""

import json
from pathlib import Path

import pytest
import torch
from conftest import compose_train

from matching.export import ServingModel, example_inputs, main
from matching.runs import load_trained
from matching.train import train


@pytest.fixture(scope="module")
def intra_run(tmp_path_factory):
    """Intra-sentence CoDA attention and the NULL token: the shape-dependent parts of the model."""
    cfg = compose_train(
        tmp_path_factory.mktemp("intra"), "trainer.max_epochs=1", "aligner=softmax_conflict", "intra=coda",
        "model.null_token=true",
    )  # fmt: skip
    train(cfg)
    return Path(cfg.paths.output_dir), None


SHAPES = [(1, 4, 3), (3, 7, 5), (6, 13, 2)]  # (batch, len_a, len_b), none of them the traced one alone


def _reference(run, a, b):
    with torch.no_grad():
        return ServingModel(run.model)(a, b)


@pytest.mark.parametrize("run_name", ["snli_run", "wikiqa_run", "intra_run"])
def test_torchscript_parity(run_name, request, tmp_path):
    run_dir, _ = request.getfixturevalue(run_name)
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    assert main([f"ckpt={ckpt}", "format=torchscript", f"out={tmp_path}"]) == 0
    run = load_trained(ckpt)
    scripted = torch.jit.load(str(tmp_path / "model.pt"))
    for batch, len_a, len_b in SHAPES:
        a, b = example_inputs(len(run.vocab), batch, len_a, len_b, seed=batch)
        torch.testing.assert_close(scripted(a, b), _reference(run, a, b), atol=1e-5, rtol=1e-5)
    spec = json.loads((tmp_path / "serving.json").read_text())
    assert spec["labels"] == run.labels and (tmp_path / "vocab.txt").read_text() == (run_dir / "vocab.txt").read_text()


@pytest.mark.parametrize("run_name", ["snli_run", "wikiqa_run", "intra_run"])
def test_onnx_parity(run_name, request, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    run_dir, _ = request.getfixturevalue(run_name)
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    assert main([f"ckpt={ckpt}", "format=onnx", f"out={tmp_path}"]) == 0
    run = load_trained(ckpt)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for batch, len_a, len_b in SHAPES:
        a, b = example_inputs(len(run.vocab), batch, len_a, len_b, seed=batch)
        probs, logits = session.run(None, {"a": a.numpy(), "b": b.numpy()})
        ref_probs, ref_logits = _reference(run, a, b)
        torch.testing.assert_close(torch.from_numpy(probs), ref_probs, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(torch.from_numpy(logits), ref_logits, atol=1e-4, rtol=1e-4)


def test_unknown_format_is_a_clear_error(snli_run, capsys):
    run_dir, _ = snli_run
    assert main([f"ckpt={run_dir / 'checkpoints' / 'best.ckpt'}", "format=tflite"]) == 2
    assert "format must be one of ['onnx', 'torchscript']" in capsys.readouterr().err
