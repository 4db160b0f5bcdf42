"""dtype=bf16 (matching.model.precision): bfloat16 products and activations with float32 weights, gradients and loss,
for training and every inference command; dtype=fp32 is the model itself, bit for bit."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from matching import Matcher
from matching.data.pairs import Pair
from matching.model import precision
from matching.model.assembly import build_model
from matching.saved.run_folder import load_run
from matching.training.build import build_datamodule, build_systems
from matching.training.run import train
from tests.conftest import evaluate

NLI = [("A man plays a guitar.", "A person makes music."), ("Two dogs run in a field.", "The cats sleep."),
       ("A woman is reading a book.", "Somebody reads."), ("Kids play soccer outside today.", "Children.")]  # fmt: skip

#: How far bf16 inference may be from fp32 on the fixture runs: bf16 keeps 8 significant bits (relative rounding
#: 2⁻⁹ ≈ 0.2 % per operation), and a logit is the end of a few dozen operations. Measured on the fixture runs
#: (softmax on SNLI, CoDA and softmax on WikiQA, logits up to 0.22): at most 0.23 % of the largest logit apart,
#: probabilities at most 1.8e-4 apart (0.42 % and 3.1e-4 while the classifier too computed in bf16).
LOGIT_TOLERANCE = 0.02  # of the largest |logit|
PROBABILITY_TOLERANCE = 1e-3


@pytest.mark.parametrize("fixture", ["snli_run", "wikiqa_run"])  # softmax; CoDA
def test_bf16_inference_is_fp32_within_the_tolerance(fixture, request):
    run_dir, _ = request.getfixturevalue(fixture)
    pairs = [Pair(a, b, "") for a, b in NLI]
    fp32 = Matcher.load(run_dir)
    bf16 = Matcher.load(run_dir, dtype="bf16")
    assert fp32._predictor.backend.dtype == "fp32" and bf16._predictor.backend.dtype == "bf16"
    want, got = fp32.logits(pairs), bf16.logits(pairs)
    assert got.dtype == np.float32
    assert not np.array_equal(got, want)  # it did compute in bf16
    np.testing.assert_allclose(got, want, atol=LOGIT_TOLERANCE * np.abs(want).max(), rtol=0)
    probs = [torch.softmax(torch.from_numpy(x), -1).numpy() for x in (want, got)]
    np.testing.assert_allclose(probs[1], probs[0], atol=PROBABILITY_TOLERANCE, rtol=0)
    aligned = bf16.align(*NLI[0])  # matrices come back as float32 NumPy arrays
    assert all(m.dtype == np.float32 for m in aligned["matrices"].values())


def test_the_commands_take_dtype_and_an_old_run_is_fp32(wikiqa_run, tmp_path):
    run_dir, _ = wikiqa_run
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    fp32 = evaluate(ckpt, out=tmp_path / "fp32.json")
    bf16 = evaluate(ckpt, overrides=["dtype=bf16"], out=tmp_path / "bf16.json")
    assert set(bf16) == set(fp32)
    assert bf16["val/loss"] != fp32["val/loss"]  # computed in bf16
    assert bf16["val/loss"] == pytest.approx(fp32["val/loss"], rel=0.01)
    # a run saved before the dtype key: read as fp32, and dtype=bf16 still overrides it
    config = run_dir / "config.yaml"
    saved = config.read_text()
    try:
        config.write_text("".join(line for line in saved.splitlines(True) if not line.startswith("dtype:")))
        assert load_run(ckpt).cfg.dtype == "fp32"
        assert Matcher.load(run_dir, dtype="bf16")._predictor.backend.dtype == "bf16"
        assert evaluate(ckpt, overrides=["dtype=bf16"], out=tmp_path / "old.json") == bf16
    finally:
        config.write_text(saved)


@pytest.mark.parametrize(
    "aligner",
    ["softmax", "coda", "conflict", "softmax_conflict", "differential", "cog", "softpick", "sigmoid", "ssmax"],
)
def test_a_bf16_step_keeps_float32_weights_and_gradients_close_to_fp32(make_cfg, aligner, tmp_path):
    """Every aligner: conflict's L1 scores once stopped a bf16 run on a CPU (cdist has no bf16 kernel there).
    Cog's weights jump at E = 0 (sign(E)·softmax(|E|) goes from +w to −w), so a score near 0 that bf16's rounded
    activations carry across 0 flips its weight: on this batch 2 of its 171 cells, and the gradients' cosine is 0.982
    (0.99997 with F = linear, where none flips)."""
    cfg = make_cfg(f"aligner={aligner}", "dtype=bf16")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    vectors = dm.vectors.matrix(dm.vocab, cfg.seed, cfg.paths.cache_dir)
    batch = next(iter(dm.train_dataloader()))
    grads = {}
    for dtype in ("fp32", "bf16"):
        torch.manual_seed(0)
        cfg.dtype = dtype  # the system's compute_dtype
        system, _ = build_systems(cfg, build_model(cfg, vectors, len(dm.labels)), dm, tmp_path)
        system.eval()  # no dropout: the two passes see the same network
        logits = system.predict_step(batch).logits
        assert logits.dtype == torch.float32
        F.cross_entropy(logits, batch["label"]).backward()
        params = [p for p in system.model.parameters() if p.requires_grad]
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in params)
        grads[dtype] = torch.cat([p.grad.flatten() for p in params])
    cosine = F.cosine_similarity(grads["fp32"], grads["bf16"], dim=0)
    assert cosine > (0.97 if aligner == "cog" else 0.99), f"bf16 gradient direction differs from fp32's: {cosine:.4f}"
    optimizer = instantiate(cfg.optim)(params)
    optimizer.step()  # fused Adam on the float32 weights, as in training
    assert all(p.dtype == torch.float32 for p in params)


def test_bf16_training_runs_and_logs_its_dtype(make_cfg, caplog):
    caplog.set_level("INFO")
    metrics = train(make_cfg("dtype=bf16", "trainer.max_epochs=1"))
    assert np.isfinite(metrics["val/loss"])
    assert any("numerics:" in r.message and "dtype bf16" in r.getMessage() for r in caplog.records)


def test_fp32_is_the_model_itself_bit_for_bit(make_cfg):
    cfg = make_cfg("aligner=coda")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    model = build_model(cfg, dm.vectors.matrix(dm.vocab, cfg.seed, cfg.paths.cache_dir), len(dm.labels)).eval()
    batch = next(iter(dm.train_dataloader()))
    direct = model(batch["a"], batch["b"])
    through = precision.forward_in(torch.float32, model, batch["a"], batch["b"])
    assert torch.equal(direct.logits, through.logits)
    assert all(torch.equal(direct.matrices[k], through.matrices[k]) for k in direct.matrices)


def test_auto_is_bf16_only_on_a_cpu_with_bf16_arithmetic(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert precision.resolve("auto", "cpu") == torch.bfloat16
    assert precision.resolve("auto", "cuda") == torch.float32
    assert precision.arithmetic_summary("auto") == "bf16 (auto: this CPU has avx512_bf16)"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f", "avx2"}))
    assert precision.resolve("auto", "cpu") == torch.float32
    assert precision.resolve("bf16", "cpu") == torch.bfloat16
    assert "slower than fp32 here" in precision.arithmetic_summary("bf16")


def test_auto_is_the_default_and_the_run_log_says_what_it_chose(make_cfg, monkeypatch, caplog):
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert compose("train").dtype == "auto"
        assert compose("train", overrides=["trainer=gpu"]).dtype == "auto"  # fp32 there: trainer.precision decides
        assert compose("train", overrides=["dtype=fp32"]).dtype == "fp32"  # fp32 one override away
    caplog.set_level("INFO")
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    train(make_cfg("dtype=auto", "trainer.max_epochs=1"))
    assert any("dtype bf16 (auto: this CPU has avx512_bf16)" in r.getMessage() for r in caplog.records)
    caplog.clear()
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512f", "avx2"}))
    train(make_cfg("dtype=auto", "trainer.max_epochs=1"))
    assert any("dtype fp32 (auto: no bf16 arithmetic here)" in r.getMessage() for r in caplog.records)


def test_an_unknown_dtype_says_which_there_are(make_cfg):
    with pytest.raises(ValueError, match=r"dtype='bf61': choose fp32 .* bf16 .* or auto"):
        train(make_cfg("dtype=bf61"))
    with pytest.raises(ValueError, match="dtype='half'"):
        Matcher.load("nowhere", dtype="half")


def test_denormals_flushed_within_the_block_and_the_process_setting_restored_after_it():
    """Inside `denormals_flushed(True)` a float32 product below the smallest normal number is 0; after it the
    process computes with denormals as before, and a caller that already flushed them still does."""
    import torch

    from matching.model.precision import denormals_flushed, flushes_denormals

    def product() -> float:
        return (torch.tensor([1e-30]) * torch.tensor([1e-10])).item()

    before = flushes_denormals()
    try:
        torch.set_flush_denormal(False)
        assert not flushes_denormals() and product() > 0
        with denormals_flushed(True) as flushed:
            assert flushed and flushes_denormals() and product() == 0.0
        assert not flushes_denormals() and product() > 0
        torch.set_flush_denormal(True)
        with denormals_flushed(False) as flushed:
            assert not flushed and product() > 0
        assert flushes_denormals()
    finally:
        torch.set_flush_denormal(before)
