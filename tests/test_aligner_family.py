"""The aligners as one family keep every number they had: each config of conf/aligner/ (and variants: centred, gated,
every distribution of the design space, intra-sentence aligners), built in a tiny model (hidden 8) from seed 0, gives
the same parameters under the same names (a saved run's state_dict loads), the same logits and matrices on a fixed
padded batch, and, in training mode from seed 1 (dropout), the same logits and gradients, bit for bit, as the code that
wrote tests/fixtures/aligner_family.json (the single-file aligners, before they became a package).

A new option is recorded by `python tests/test_aligner_family.py --write` (the cases missing only); a change that means
to change numbers rewrites them all (`--rewrite`)."""

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "aligner_family.json"
VOCAB, EMB, HIDDEN = 30, 6, 8

#: case -> (conf/aligner option, its overrides, the model's own arguments: intra aligner option, null token)
CASES: dict[str, tuple[str, dict, dict]] = {
    **{name: (name, {}, {}) for name in sorted(p.stem for p in (ROOT / "conf" / "aligner").glob("*.yaml"))},
    "softmax_centred_gated": ("softmax", {"center_tokens": True, "output_gate": True}, {}),
    "softmax_linear_scaled": ("softmax", {"projection": "linear", "scale": True}, {}),
    "coda_variants": (
        "coda",
        {
            "gate": "scale",
            "phi_n": "arctan",
            "center_e": True,
            "gate_projection": "separate",
            "scale": True,
            "center_tokens": False,
            "output_gate": True,
        },
        {},
    ),
    "coda_parikh_gate_none": ("coda", {"projection": "parikh", "gate": "none", "phi_e": "sigmoid"}, {}),
    "conflict_literal_centred_gated": (
        "conflict",
        {"score": "literal", "center_tokens": True, "output_gate": True},
        {},
    ),
    "softmax_conflict_gated": ("softmax_conflict", {"center_tokens": True, "output_gate": True}, {}),
    "differential_parikh_scaled_gated": (
        "differential",
        {"projection": "parikh", "scale": True, "output_gate": True},
        {},
    ),
    "cog_linear_gated": ("cog", {"projection": "linear", "output_gate": True}, {}),
    "softpick_parikh_gated": ("softpick", {"projection": "parikh", "output_gate": True, "eps": 1e-3}, {}),
    "sigmoid_no_bias_scaled": ("sigmoid", {"length_bias": False, "scale": True, "output_gate": True}, {}),
    "ssmax_linear_gated": ("ssmax", {"projection": "linear", "s_init": 0.3, "output_gate": True}, {}),
    **{
        f"attention_{d}": ("attention", {"distribution": d}, {})
        for d in ("temperature", "sigmoid", "sparsemax", "entmax")
    },
    "attention_entmax_bisect": ("attention", {"distribution": "entmax", "alpha": 1.3}, {}),
    "attention_sparsemax_heads": ("attention", {"distribution": "sparsemax", "heads": 2, "score": "general"}, {}),
    "attention_feature_wise_gated": (
        "attention",
        {"feature_wise": True, "output_gate": True, "center_tokens": True},
        {},
    ),
    "attention_additive_sigmoid": ("attention", {"score": "additive", "distribution": "sigmoid", "heads": 2}, {}),
    "attention_temperature_scaled_dot": ("attention", {"score": "scaled_dot", "distribution": "temperature"}, {}),
    "intra_softmax_null": ("softmax", {}, {"intra": "softmax", "null_token": True}),
    "intra_coda": ("coda", {}, {"intra": "coda"}),
}


def _aligner(option: str, overrides: dict):
    node = OmegaConf.load(ROOT / "conf" / "aligner" / f"{option}.yaml")
    node.hidden, node.dropout = HIDDEN, 0.2
    for key, value in overrides.items():
        node[key] = value
    return instantiate(node)


def _model(case: str):
    from matching.model.decomposable import DecomposableAttention

    option, overrides, extra = CASES[case]
    torch.manual_seed(0)
    vectors = torch.randn(VOCAB, EMB)
    intra = _aligner(extra["intra"], {}) if "intra" in extra else None
    return DecomposableAttention(vectors, 3, _aligner(option, overrides), hidden=HIDDEN, dropout=0.2,
                                 null_token=extra.get("null_token", False), intra_aligner=intra)  # fmt: skip


def _batch():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randint(2, VOCAB, (3, 6), generator=g), torch.randint(2, VOCAB, (3, 5), generator=g)
    a[1, 3:], b[1, 2:], a[2, 5:] = 0, 0, 0  # padding in two examples
    return a, b, torch.tensor([0, 2, 1])


def _digest(t: torch.Tensor) -> str:
    t = t.detach().contiguous() + 0  # −0.0 and 0.0 alike, as torch.equal has them
    return hashlib.sha256(str((t.dtype, tuple(t.shape))).encode() + t.numpy().tobytes()).hexdigest()[:16]


def record(case: str) -> dict:
    """What the fixture holds of one case: parameter names and digests, logits (exact floats) and matrix digests
    in eval mode, logits and gradient digests of a training step from seed 1."""
    model = _model(case)
    a, b, labels = _batch()
    state = {k: _digest(v) for k, v in model.state_dict().items()}
    model.eval()
    with torch.no_grad():
        out = model(a, b)
    model.train()
    torch.manual_seed(1)
    trained = model(a, b)
    torch.nn.functional.cross_entropy(trained.logits, labels).backward()
    return {
        "state": state,
        "logits": out.logits.flatten().tolist(),
        "matrices": {k: _digest(v) for k, v in out.matrices.items()},
        "train_logits": trained.logits.detach().flatten().tolist(),
        "grads": {k: _digest(p.grad) for k, p in model.named_parameters() if p.grad is not None},
    }


@pytest.mark.parametrize("case", CASES)
def test_every_aligner_keeps_its_parameters_logits_and_seeds(case):
    saved = json.loads(FIXTURE.read_text())
    if case not in saved:  # an option added since: record it once (`--write` adds the missing cases only)
        pytest.skip(f"{case} is not in {FIXTURE.name} yet: python tests/test_aligner_family.py --write")
    now, then = record(case), saved[case]
    assert list(now["state"]) == list(then["state"]), "a saved run's parameter names changed"
    assert now["state"] == then["state"], "the parameters a seed draws changed"
    assert torch.equal(torch.tensor(now["logits"]), torch.tensor(then["logits"]))
    assert now["matrices"] == then["matrices"]
    assert torch.equal(torch.tensor(now["train_logits"]), torch.tensor(then["train_logits"]))
    assert now["grads"] == then["grads"]


@pytest.mark.parametrize(
    "name", ["softmax", "temperature", "sigmoid", "cog", "softpick", "ssmax", "sparsemax", "entmax"]
)
def test_every_weighting_is_a_dot_aligner_and_a_distribution_and_says_what_its_weights_are(name):
    """One registry: each weighting weighs dot scores (`DotAligner`) and any compatibility function's, per head
    (`aligner=attention`), padding 0 both ways; its matrices' caption and range are what it declares."""
    from matching.model.aligners import CAPTIONS, DotAligner
    from matching.model.attention import AttentionAligner
    from matching.model.matrices import matrix_title, value_range

    torch.manual_seed(0)
    a, b = torch.randn(2, 4, 8), torch.randn(2, 3, 8)
    mask_a, mask_b = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]).bool(), torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    dot = DotAligner(8, dropout=0.0, weighting=name, center_tokens=True)
    parts = AttentionAligner(8, dropout=0.0, score="general", distribution=name, heads=2)
    for aligner in (dot, parts):
        out = aligner(a, b, mask_a, mask_b)
        for m in out.matrices.values():
            assert torch.isfinite(m).all() and m[0, 3].abs().sum() == 0 and m[0, :, 2].abs().sum() == 0
    assert set(dot(a, b, mask_a, mask_b).matrices) == {f"{name}_a", f"{name}_b"}
    assert matrix_title(f"{name}_a", {}).startswith(f"{name}_a: weights aligning each a token to b (")
    assert value_range(f"{name}_b", {}) == list(CAPTIONS[name].values)
    assert value_range("attention_a", {"aligner": {"distribution": name}}) == list(CAPTIONS[name].values)


def test_the_dot_aligners_signatures_name_their_weightings_options():
    """What the config checks read: a key an aligner does not take is named before any data is read."""
    import inspect

    from matching.model.aligners import ScalableSoftmaxAligner, SigmoidAligner, SoftmaxAligner, SoftpickAligner

    assert inspect.signature(SoftmaxAligner).parameters["projection"].default == "parikh"
    assert "eps" not in inspect.signature(SoftmaxAligner).parameters
    assert inspect.signature(SoftpickAligner).parameters["eps"].default == 1e-6
    assert inspect.signature(SigmoidAligner).parameters["length_bias"].default is True
    assert inspect.signature(ScalableSoftmaxAligner).parameters["s_init"].default == 0.43
    assert SigmoidAligner(8).options == {"length_bias": True}
    assert ScalableSoftmaxAligner(8, s_init=0.3).learned_constants() == {"s": pytest.approx(0.3)}


if __name__ == "__main__" and sys.argv[1:] in (["--write"], ["--rewrite"]):
    kept = json.loads(FIXTURE.read_text()) if FIXTURE.exists() and sys.argv[1] == "--write" else {}
    FIXTURE.write_text(json.dumps({case: kept.get(case) or record(case) for case in CASES}, indent=1) + "\n")
    print(f"wrote {FIXTURE}: {len(CASES) - len(kept)} cases recorded, {len(kept)} kept")
