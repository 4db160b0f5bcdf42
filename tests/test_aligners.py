import math
from functools import partial

import pytest
import torch

from matching.model.aligners import (
    CoDAAligner,
    CogAligner,
    ConflictAligner,
    DifferentialAligner,
    ScalableSoftmaxAligner,
    SigmoidAligner,
    SoftmaxAligner,
    SoftmaxConflictAligner,
    SoftpickAligner,
)
from matching.model.attention import AttentionAligner
from matching.model.layers import center_over_pair, masked_softmax

DIM = 6
ALIGNERS = {
    "softmax": partial(SoftmaxAligner, hidden=5),
    "coda": partial(CoDAAligner, hidden=5),
    "coda_separate_scaled": partial(CoDAAligner, hidden=5, gate_projection="separate", center_e=True, scale=True),
    "coda_gate_scale": partial(CoDAAligner, hidden=5, gate="scale", phi_n="arctan"),
    "coda_center_tokens": partial(CoDAAligner, hidden=5, center_tokens=True),
    "conflict": partial(ConflictAligner, hidden=5),
    "softmax_conflict": partial(SoftmaxConflictAligner, hidden=5),
    "softmax_centred": partial(SoftmaxAligner, hidden=5, center_tokens=True),
    "conflict_centred": partial(ConflictAligner, hidden=5, center_tokens=True),
    "softmax_conflict_centred": partial(SoftmaxConflictAligner, hidden=5, projection="none", center_tokens=True),
    "differential": partial(DifferentialAligner, hidden=5, center_tokens=True),
    "differential_parikh": partial(DifferentialAligner, hidden=5, projection="parikh"),
    "cog": partial(CogAligner, hidden=5, center_tokens=True),
    "softpick": partial(SoftpickAligner, hidden=5, center_tokens=True),
    "sigmoid": partial(SigmoidAligner, hidden=5, center_tokens=True),
    "sigmoid_no_bias_linear": partial(SigmoidAligner, hidden=5, projection="linear", length_bias=False),
    "ssmax": partial(ScalableSoftmaxAligner, hidden=5, center_tokens=True),
    "softmax_gated": partial(SoftmaxAligner, hidden=5, output_gate=True),
    "coda_gated": partial(CoDAAligner, hidden=5, center_tokens=True, output_gate=True),
    "softpick_gated": partial(SoftpickAligner, hidden=5, center_tokens=True, output_gate=True),
}


def _inputs(batch=3, la=4, lb=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(batch, la, DIM, generator=g), torch.randn(batch, lb, DIM, generator=g)
    return a, b, torch.ones(batch, la, dtype=torch.bool), torch.ones(batch, lb, dtype=torch.bool)


@pytest.mark.parametrize("name", ALIGNERS)
def test_shapes(name):
    aligner = ALIGNERS[name](dim=DIM).eval()
    a, b, ma, mb = _inputs()
    out = aligner(a, b, ma, mb)
    assert out.a_aligned.shape == (3, 4, DIM * aligner.copies)
    assert out.b_aligned.shape == (3, 5, DIM * aligner.copies)
    assert out.matrices and all(m.shape == (3, 4, 5) for m in out.matrices.values())


@pytest.mark.parametrize("name", ALIGNERS)
def test_padding_has_zero_weight_and_no_effect(name):
    aligner = ALIGNERS[name](dim=DIM).eval()
    a, b, ma, mb = _inputs(batch=2, la=4, lb=5)
    ref = aligner(a, b, ma, mb)
    # Append 3 padding positions to a and 2 to b, filled with large garbage values.
    a_pad = torch.cat([a, 50 * torch.randn(2, 3, DIM)], dim=1)
    b_pad = torch.cat([b, 50 * torch.randn(2, 2, DIM)], dim=1)
    ma_pad = torch.cat([ma, torch.zeros(2, 3, dtype=torch.bool)], dim=1)
    mb_pad = torch.cat([mb, torch.zeros(2, 2, dtype=torch.bool)], dim=1)
    out = aligner(a_pad, b_pad, ma_pad, mb_pad)
    torch.testing.assert_close(out.a_aligned[:, :4], ref.a_aligned, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.b_aligned[:, :5], ref.b_aligned, atol=1e-5, rtol=1e-5)
    for key, matrix in out.matrices.items():
        if key in ("gate", "affinity"):  # CoDA's intermediates; M (below) is what pools
            continue
        assert torch.all(matrix[:, 4:, :] == 0) and torch.all(matrix[:, :, 5:] == 0), key
        torch.testing.assert_close(matrix[:, :4, :5], ref.matrices[key], atol=1e-5, rtol=1e-5)


def test_softmax_weights_are_distributions_over_valid_positions():
    aligner = SoftmaxAligner(DIM, hidden=5).eval()
    a, b, ma, mb = _inputs(batch=1, la=3, lb=4)
    mb[0, 3] = False
    w = aligner(a, b, ma, mb).matrices
    torch.testing.assert_close(w["softmax_a"].sum(2), torch.ones(1, 3))
    torch.testing.assert_close(w["softmax_b"][:, :, :3].sum(1), torch.ones(1, 3))
    assert torch.all(w["softmax_b"][:, :, 3] == 0)


def test_masked_softmax_all_masked_row_is_zero_not_nan():
    scores = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    mask = torch.tensor([[True, True], [False, False]])
    out = masked_softmax(scores, mask, dim=1)
    assert torch.isfinite(out).all() and torch.all(out[1] == 0)
    assert abs(out[0].float().sum().item() - 1) < 1e-2


def _sigmoid(x):
    return 1 / (1 + math.exp(-x))


# Hand-worked CoDA case with identity projections (projection="none"), dim 2:
# a1=(1,0), a2=(0,2); b1=(1,1), b2=(2,0)
# E = a·bᵀ = [[1, 2], [2, 0]];  L1 distances [[1, 1], [2, 4]] so N = -[[1, 1], [2, 4]]  (mean N = -2, mean E = 5/4)
A = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
B = torch.tensor([[[1.0, 1.0], [2.0, 0.0]]])
E = [[1.0, 2.0], [2.0, 0.0]]
N = [[-1.0, -1.0], [-2.0, -4.0]]
GATES = {
    "none": lambda n: _sigmoid(n),
    "center": lambda n: _sigmoid(n + 2.0),
    "scale": lambda n: 2 * _sigmoid(n),
}


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("center_e", [False, True])
def test_coda_matches_hand_computed_example(gate, center_e):
    aligner = CoDAAligner(2, projection="none", gate=gate, center_e=center_e)
    mask = torch.ones(1, 2, dtype=torch.bool)
    out = aligner(A, B, mask, mask)
    shift = 1.25 if center_e else 0.0
    m = [[math.tanh(E[i][j] - shift) * GATES[gate](N[i][j]) for j in range(2)] for i in range(2)]
    expected_m = torch.tensor([m])
    torch.testing.assert_close(out.matrices["M"], expected_m)
    # a_aligned = M b, b_aligned = Mᵀ a
    expected_a = torch.tensor([[[m[i][0] * B[0, 0, k] + m[i][1] * B[0, 1, k] for k in range(2)] for i in range(2)]])
    expected_b = torch.tensor([[[m[0][j] * A[0, 0, k] + m[1][j] * A[0, 1, k] for k in range(2)] for j in range(2)]])
    torch.testing.assert_close(out.a_aligned, expected_a)
    torch.testing.assert_close(out.b_aligned, expected_b)


@pytest.mark.parametrize(("phi_e", "phi_n"), [("sigmoid", "tanh"), ("tanh", "algebraic"), ("sigmoid", "arctan")])
def test_coda_activation_options_and_temperatures(phi_e, phi_n):
    funcs = {
        "tanh": math.tanh,
        "sigmoid": _sigmoid,
        "arctan": math.atan,
        "algebraic": lambda x: x / math.sqrt(1 + x * x),
    }
    aligner = CoDAAligner(2, projection="none", gate="none", phi_e=phi_e, phi_n=phi_n, alpha=0.5, beta=2.0)
    mask = torch.ones(1, 2, dtype=torch.bool)
    m = aligner(A, B, mask, mask).matrices["M"]
    expected = [[funcs[phi_e](0.5 * E[i][j]) * funcs[phi_n](2.0 * N[i][j]) for j in range(2)] for i in range(2)]
    torch.testing.assert_close(m, torch.tensor([expected]))


def test_coda_centering_uses_valid_positions_only():
    aligner = CoDAAligner(2, projection="none", gate="center", center_e=True)
    a_pad = torch.cat([A, torch.full((1, 1, 2), 9.0)], dim=1)
    ma = torch.tensor([[True, True, False]])
    mb = torch.ones(1, 2, dtype=torch.bool)
    padded = aligner(a_pad, B, ma, mb).matrices["M"]
    plain = aligner(A, B, mb, mb).matrices["M"]
    torch.testing.assert_close(padded[:, :2], plain)
    assert torch.all(padded[:, 2] == 0)


def test_coda_center_tokens_removes_a_constant_offset_and_ignores_padding():
    """The model's projection has a bias c: every token vector carries it. Scored as given, E gains ‖c‖² and
    cᵀ(a_i + b_j) and M changes; with center_tokens it does not (F_E minus the pair's mean F_E over valid tokens),
    and a padded token changes nothing."""
    a, b, ma, mb = _inputs(batch=2, la=4, lb=3, seed=4)
    offset = torch.full((1, 1, DIM), 0.7)
    plain = CoDAAligner(DIM, projection="none").eval()
    centred = CoDAAligner(DIM, projection="none", center_tokens=True).eval()
    moved = (plain(a, b, ma, mb).matrices["M"] - plain(a + offset, b + offset, ma, mb).matrices["M"]).abs().max()
    assert moved > 0.05
    torch.testing.assert_close(
        centred(a, b, ma, mb).matrices["M"], centred(a + offset, b + offset, ma, mb).matrices["M"]
    )
    a_pad = torch.cat([a, torch.full((2, 1, DIM), 9.0)], dim=1)
    ma_pad = torch.cat([ma, torch.zeros(2, 1, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(centred(a_pad, b, ma_pad, mb).matrices["M"][:, :4], centred(a, b, ma, mb).matrices["M"])


#: Every aligner whose scores compare the inputs through a map that carries a constant offset into a constant offset
#: (F = none or linear) or that centres the inputs themselves (conflict, the attention parts).
OFFSET_CASES = {
    "softmax F=none": partial(SoftmaxAligner, projection="none"),
    "softmax F=linear": partial(SoftmaxAligner, hidden=5, projection="linear"),
    "coda F=none": partial(CoDAAligner, projection="none"),
    "coda F=linear": partial(CoDAAligner, hidden=5, projection="linear"),
    "conflict l1": partial(ConflictAligner, hidden=5),
    "conflict literal": partial(ConflictAligner, hidden=5, score="literal"),
    "softmax_conflict F=none": partial(SoftmaxConflictAligner, hidden=5, projection="none"),
    **{
        f"attention {score}": partial(AttentionAligner, hidden=5, score=score)
        for score in ("dot", "scaled_dot", "similarity", "general", "biased_general", "activated_general", "additive")
    },
    "attention dot, 2 heads, sparsemax": partial(AttentionAligner, score="dot", heads=2, distribution="sparsemax"),
    "differential F=linear": partial(DifferentialAligner, hidden=5),
    "cog F=none": partial(CogAligner, projection="none"),
    "cog F=linear": partial(CogAligner, hidden=5, projection="linear"),
    "softpick F=none": partial(SoftpickAligner, projection="none"),
    "softpick F=linear": partial(SoftpickAligner, hidden=5, projection="linear"),
    "sigmoid F=none": partial(SigmoidAligner, projection="none"),
    "sigmoid F=linear": partial(SigmoidAligner, hidden=5, projection="linear"),
    "ssmax F=none": partial(ScalableSoftmaxAligner, projection="none"),
}


@pytest.mark.parametrize("name", OFFSET_CASES)
def test_a_constant_offset_in_every_token_changes_no_centred_aligner(name):
    """Token centring, the option of every aligner: the same vector added to every token of both sides (a
    projection's bias) leaves every matrix the aligner computes unchanged, padding tokens of any value included;
    the aligned vectors, weighted sums of the inputs as given, move by the offset times the weights' sums. Without
    centring the matrices change (except where an aligner's scores ignore the offset by construction)."""
    torch.manual_seed(0)
    aligner = OFFSET_CASES[name](dim=DIM, center_tokens=True).eval()
    plain = OFFSET_CASES[name](dim=DIM).eval()
    plain.load_state_dict(aligner.state_dict())
    a, b, ma, mb = _inputs(batch=2, la=4, lb=3, seed=5)
    ma[1, 3] = False  # a padding token, holding a value of its own
    offset = torch.linspace(-0.9, 1.3, DIM).view(1, 1, DIM)
    before, after = aligner(a, b, ma, mb), aligner(a + offset, b + offset, ma, mb)
    for key, matrix in before.matrices.items():
        torch.testing.assert_close(after.matrices[key], matrix, atol=1e-5, rtol=1e-5, msg=f"{name}: {key} moved")
    if name not in ("conflict literal", "attention similarity"):
        moved = max(
            (plain(a + offset, b + offset, ma, mb).matrices[key] - m).abs().max()
            for key, m in plain(a, b, ma, mb).matrices.items()
        )
        assert moved > 1e-3, f"{name}: the offset should move the uncentred aligner's matrices"


def test_token_centring_subtracts_the_pairs_mean_over_valid_tokens_of_both_sides():
    a = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [50.0, 50.0]]])  # the third token is padding
    b = torch.tensor([[[2.0, 4.0]]])
    ma, mb = torch.tensor([[True, True, False]]), torch.tensor([[True]])
    ca, cb = center_over_pair(a, b, ma, mb)
    mean = torch.tensor([2.0, 2.0])  # (1+3+2)/3, (0+2+4)/3
    torch.testing.assert_close(ca[0, :2], a[0, :2] - mean)
    torch.testing.assert_close(cb[0], b[0] - mean)
    ca16, cb16 = center_over_pair(a.bfloat16(), b.bfloat16(), ma, mb)
    assert ca16.dtype == cb16.dtype == torch.bfloat16


@pytest.mark.parametrize(
    "group",
    [
        "softmax",
        "conflict",
        "softmax_conflict",
        "attention",
        "coda",
        "differential",
        "cog",
        "softpick",
        "sigmoid",
        "ssmax",
    ],
)
def test_every_aligner_config_takes_center_tokens(group):
    """`aligner=<any> aligner.center_tokens=true` composes and reaches the aligner (CoDA's default is true, and the
    aligners after it: differential, cog, softpick, sigmoid, ssmax)."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from matching.configs import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"aligner={group}", "aligner.center_tokens=true"])
    aligner = instantiate(cfg.aligner)(dim=cfg.model.hidden)
    assert aligner.center_tokens is True
    if group == "softmax_conflict":
        assert aligner.attention.center_tokens and aligner.conflict.center_tokens


@pytest.mark.parametrize("gate", ["center", "scale", "none"])
@pytest.mark.parametrize("phi_n", ["sigmoid", "tanh", "arctan", "algebraic"])
def test_coda_m_range(gate, phi_n):
    aligner = CoDAAligner(DIM, hidden=5, gate=gate, phi_n=phi_n, alpha=5.0).eval()
    a, b, ma, mb = _inputs(batch=4, la=7, lb=6, seed=3)
    m = aligner(3 * a, 3 * b, ma, mb).matrices["M"]
    # |φ_E| ≤ 1; sup|φ_N| is 1 (π/2 for arctan), doubled by gate="scale" except for sigmoid, where N ≤ 0
    # keeps 2·sigmoid(N) ≤ 1.
    bound = math.pi / 2 if phi_n == "arctan" else 1.0
    if gate == "scale" and phi_n != "sigmoid":
        bound *= 2
    assert m.abs().max() <= bound


def test_coda_has_no_softmax(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("softmax must not be used by CoDA")

    monkeypatch.setattr(torch, "softmax", forbidden)
    monkeypatch.setattr(torch.nn.functional, "softmax", forbidden)
    monkeypatch.setattr("matching.model.aligners.weightings.masked_softmax", forbidden)
    a, b, ma, mb = _inputs()
    CoDAAligner(DIM, hidden=5)(a, b, ma, mb)


@pytest.mark.parametrize("name", ALIGNERS)
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    aligner = ALIGNERS[name](dim=DIM)
    a, b, ma, mb = _inputs()
    a.requires_grad_(True)
    out = aligner(a, b, ma, mb)
    (out.a_aligned.square().sum() + out.b_aligned.square().sum()).backward()
    for pname, p in aligner.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
    assert a.grad.abs().sum() > 0


def test_score_bias_is_added_to_the_scores():
    aligner = SoftmaxAligner(2, projection="none")
    mask = torch.ones(1, 2, dtype=torch.bool)
    bias = torch.tensor([[0.0, 100.0], [100.0, 0.0]])
    w = aligner(A, B, mask, mask, score_bias=bias).matrices["softmax_a"]
    assert w[0, 0, 1] > 0.99 and w[0, 1, 0] > 0.99


def test_wrong_input_dimension_is_a_clear_error():
    aligner = SoftmaxAligner(DIM, hidden=5)
    a, b, ma, mb = _inputs()
    with pytest.raises(ValueError, match="built for 6-d inputs"):
        aligner(a[..., :4], b[..., :4], ma, mb)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gate": "bogus"}, "gate normalisation"),
        ({"phi_n": "relu"}, "phi_n activation"),
        ({"alpha": -1.0}, "non-negative"),
    ],
)
def test_coda_bad_options_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CoDAAligner(DIM, **kwargs)


def test_coda_default_can_subtract_and_parikh_f_cannot():
    """CoDA's point (paper §2.3): tanh(E), and so M, takes negative values to subtract a token of b. With the
    literal DecompAtt F (ReLU output) E = F(a)ᵀF(b) ≥ 0 and M ≥ 0 on any input."""
    torch.manual_seed(0)
    a, b, ma, mb = _inputs(batch=4, la=7, lb=6, seed=5)
    signed = CoDAAligner(DIM, hidden=8).eval()  # F_E: the identity on (signed) inputs
    parikh = CoDAAligner(DIM, hidden=8, projection="parikh").eval()
    assert (signed(a, b, ma, mb).matrices["M"] < 0).any()
    assert (signed(a, b, ma, mb).matrices["affinity"] > 0).any()
    assert (parikh(a, b, ma, mb).matrices["M"] >= 0).all()


def test_coda_hand_built_case_where_m_must_be_negative():
    """One linear layer as F_E: opposite directions give E < 0, so M = tanh(E)·gate(N) < 0 and a_aligned = M b
    points away from b (the vector is subtracted)."""
    aligner = CoDAAligner(2, hidden=2, dropout=0.0, projection="linear", gate="scale")
    linear = aligner.project_e[1]
    assert linear.bias is None  # a bias would add ‖b‖² to every E_ij
    with torch.no_grad():
        linear.weight.copy_(torch.eye(2))
    a = torch.tensor([[[1.0, 0.0]]])
    b = torch.tensor([[[-1.0, 0.0]]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    out = aligner(a, b, mask, mask)
    expected = math.tanh(-1.0) * 2 * _sigmoid(-2.0)  # E = -1, N = -‖a − b‖₁ = -2
    torch.testing.assert_close(out.matrices["M"], torch.tensor([[[expected]]]))
    assert out.matrices["M"].item() < 0
    torch.testing.assert_close(out.a_aligned, expected * b)  # a negative multiple of b


def test_unknown_projection_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown projection 'relu'"):
        CoDAAligner(DIM, projection="relu")


def test_conflict_weights_differ_from_token_to_token():
    """The default score aligns token by token: rows (each a_i over b) and columns differ."""
    torch.manual_seed(0)
    aligner = ConflictAligner(DIM, hidden=5).eval()
    a, b, ma, mb = _inputs(batch=2, la=4, lb=5, seed=1)
    w = aligner(a, b, ma, mb).matrices
    rows, cols = w["conflict_a"], w["conflict_b"]
    assert (rows - rows[:, :1]).abs().amax(dim=(1, 2)).min() > 1e-3  # some row differs from the first, per example
    assert (cols - cols[:, :, :1]).abs().amax(dim=(1, 2)).min() > 1e-3


def test_conflict_literal_eq7_gives_every_token_the_same_weights():
    """Eq. 7 as printed is linear in u'_i − v'_j: c_ij = s(a_i) − s(b_j), and the softmax over j removes s(a_i)."""
    torch.manual_seed(0)
    aligner = ConflictAligner(DIM, hidden=5, score="literal").eval()
    a, b, ma, mb = _inputs(batch=2, la=4, lb=5, seed=1)
    w = aligner(a, b, ma, mb).matrices
    torch.testing.assert_close(w["conflict_a"], w["conflict_a"][:, :1].expand_as(w["conflict_a"]))
    torch.testing.assert_close(w["conflict_b"], w["conflict_b"][:, :, :1].expand_as(w["conflict_b"]))


def test_conflict_l1_score_is_the_weighted_l1_distance():
    """c_ij = Σ_k w_k |u'_ik − v'_jk| with signed weights, checked against the explicit 4-D computation."""
    torch.manual_seed(0)
    aligner = ConflictAligner(DIM, hidden=5, dropout=0.0)
    with torch.no_grad():
        aligner.score.weight.copy_(torch.tensor([[0.5, -1.0, 2.0, 0.0, -0.3]]))
    a, b, ma, mb = _inputs(batch=2, la=3, lb=4, seed=2)
    u, v = torch.tanh(aligner.project_a(a)), torch.tanh(aligner.project_b(b))
    c = ((u.unsqueeze(2) - v.unsqueeze(1)).abs() * aligner.score.weight.squeeze(0)).sum(-1)  # (B, La, Lb)
    torch.testing.assert_close(aligner(a, b, ma, mb).matrices["conflict_a"], torch.softmax(c, dim=2))
