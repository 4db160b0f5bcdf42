"""Exported models (TorchScript, ONNX) give the checkpoint's outputs, with dynamic batch and lengths."""

import json
from pathlib import Path

import pytest
import torch
from conftest import compose_train

from matching.export import main
from matching.saved.onnx_graph import ServingModel, example_inputs
from matching.saved.run_folder import load_run
from matching.training.run import train


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
    run = load_run(ckpt)
    scripted = torch.jit.load(str(tmp_path / "model.pt"))
    for batch, len_a, len_b in SHAPES:
        a, b = example_inputs(len(run.vocab), batch, len_a, len_b, seed=batch)
        torch.testing.assert_close(scripted(a, b), _reference(run, a, b), atol=1e-5, rtol=1e-5)
    text = (tmp_path / "serving.json").read_text()
    spec = json.loads(text)
    assert spec["labels"] == run.labels and (tmp_path / "vocab.txt").read_text() == (run_dir / "vocab.txt").read_text()
    assert spec["checkpoint"] == "best.ckpt" and len(spec["checkpoint_sha256"]) == 64 and str(run_dir) not in text


@pytest.mark.parametrize("run_name", ["snli_run", "wikiqa_run", "intra_run"])
def test_onnx_parity(run_name, request, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    run_dir, _ = request.getfixturevalue(run_name)
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    assert main([f"ckpt={ckpt}", "format=onnx", f"out={tmp_path}"]) == 0
    run = load_run(ckpt)
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
    assert "format must be one of ['hub', 'onnx', 'torchscript']" in capsys.readouterr().err


CLIENT = r'''
"""A client of an exported model that knows nothing of `matching`: onnxruntime, tokenizers and numpy only."""
import json, sys, zlib
from pathlib import Path
import numpy as np, onnxruntime
from tokenizers import Tokenizer

folder, pairs = Path(sys.argv[1]), json.loads(sys.argv[2])
spec = json.loads((folder / "serving.json").read_text())
tokenizer = Tokenizer.from_file(str(folder / spec["tokenizer"]["file"]))
unknown = tokenizer.token_to_id("<oov0>")

def ids(text):
    encoding = tokenizer.encode(text, add_special_tokens=False)
    out = []
    for token, i, (start, end) in zip(encoding.tokens, encoding.ids, encoding.offsets):
        if i == unknown and text[start:end] != "<oov0>":
            word = tokenizer.normalizer.normalize_str(text[start:end])
            i = 2 + zlib.crc32(word.encode("utf-8")) % spec["oov_buckets"]
        out.append(i)
    return out[: spec["max_length"]] if spec["max_length"] else out

def padded(rows):
    out = np.zeros((len(rows), max(map(len, rows))), dtype=np.int64)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out

session = onnxruntime.InferenceSession(str(folder / spec["model"]), providers=["CPUExecutionProvider"])
probs, _ = session.run(None, {"a": padded([ids(a) for a, _ in pairs]), "b": padded([ids(b) for _, b in pairs])})
assert "matching" not in sys.modules
print(json.dumps(probs.tolist()))
'''


def test_a_client_without_matching_scores_like_predict(snli_run, tmp_path, capsys):
    """tokenizer.json + serving.json + model.onnx are enough: the same probabilities as `predict` (to 1e-5),
    unknown words, NFKC forms and punctuation included."""
    import subprocess
    import sys

    from matching.predict import main as predict_main

    pytest.importorskip("onnxruntime")
    run_dir, _ = snli_run
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    assert main([f"ckpt={ckpt}", "format=onnx", f"out={tmp_path}"]) == 0
    pairs = [["A dog runs in the park.", "An animal is outside!"], ["Ｔｈｅ ｃａｔ sleeps", "a qwzx zorblat"],
             ["Two men, smiling; one woman.", "People are happy?"]]  # fmt: skip
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    capsys.readouterr()
    assert predict_main([f"ckpt={ckpt}", f"input={tmp_path / 'pairs.tsv'}"]) == 0
    labels = json.loads((tmp_path / "serving.json").read_text())["labels"]
    expected = [[r["probs"][label] for label in labels] for r in map(json.loads, capsys.readouterr().out.splitlines())]
    done = subprocess.run([sys.executable, "-c", CLIENT, str(tmp_path), json.dumps(pairs)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert [p for row in got for p in row] == pytest.approx([p for row in expected for p in row], abs=1e-5)


TEXTS = ["hi there __eou__ how are you ? __eou__ __eot__ fine , thanks", "Ｆｕｌｌ width, É é!",
         "unknownword __eot__ __eou__x"]  # fmt: skip


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_json_gives_the_ids_of_the_training_tokenizer(text):
    import zlib

    from matching.data.vocab import Tokenizer, Vocabulary, hf_tokenizer

    ours = Tokenizer(keep_tokens=["__eou__", "__eot__"])
    vocab = Vocabulary(["hi", "there", "__eou__", "__eot__", "how", "?", ",", "é", "full"], oov_buckets=7)
    hf = hf_tokenizer(ours, vocab)
    encoding = hf.encode(text, add_special_tokens=False)
    unknown = hf.token_to_id("<oov0>")
    ids = [i if i != unknown else 2 + zlib.crc32(hf.normalizer.normalize_str(text[s:e]).encode()) % 7
           for i, (s, e) in zip(encoding.ids, encoding.offsets, strict=True)]  # fmt: skip
    assert ids == vocab.encode(ours(text)).tolist()
