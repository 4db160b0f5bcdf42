"""The aligners after CoDA (differential, cog, softpick, sigmoid with its length bias) and the output gate over any
aligner: each one's defining property on hand-built cases, bf16, and the ONNX export."""

import math
from functools import partial

import pytest
import torch
from torch import nn

from matching.errors import ConfigError
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
    softpick,
)
from matching.model.attention import AttentionAligner

DIM = 6
#: The new aligners as their configs build them (centred; F = none, differential's linear).
NEW = {
    "differential": partial(DifferentialAligner, hidden=5, center_tokens=True),
    "cog": partial(CogAligner, hidden=5, center_tokens=True),
    "softpick": partial(SoftpickAligner, hidden=5, center_tokens=True),
    "sigmoid": partial(SigmoidAligner, hidden=5, center_tokens=True),
    "ssmax": partial(ScalableSoftmaxAligner, hidden=5, center_tokens=True),
}
#: Every aligner the output gate applies to.
GATED = {
    **NEW,
    "softmax": partial(SoftmaxAligner, hidden=5),
    "coda": partial(CoDAAligner, hidden=5, center_tokens=True),
    "conflict": partial(ConflictAligner, hidden=5),
    "softmax_conflict": partial(SoftmaxConflictAligner, hidden=5),
    "attention": partial(AttentionAligner, hidden=5, heads=2),
}


def _inputs(batch=2, la=4, lb=5, seed=0, ragged=True):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(batch, la, DIM, generator=g), torch.randn(batch, lb, DIM, generator=g)
    ma, mb = torch.ones(batch, la, dtype=torch.bool), torch.ones(batch, lb, dtype=torch.bool)
    if ragged:  # the last example's sentences are shorter than the batch's
        ma[-1, la - 1 :] = False
        mb[-1, lb - 2 :] = False
    return a, b, ma, mb


def _identity(aligner, width=2):
    """Set a linear F (dropout, then a bias-free linear layer) to the identity."""
    with torch.no_grad():
        aligner[1].weight.copy_(torch.eye(width))


# ------------------------------------------------------------------------------------------- differential


def test_differential_weights_are_the_difference_of_two_softmaxes_and_take_both_signs():
    aligner = DifferentialAligner(2, hidden=2, dropout=0.0, lambda_init=0.8).eval()
    _identity(aligner.project_1)
    with torch.no_grad():
        aligner.project_2[1].weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 0.0]]))  # F₂ sees the first feature only
        for p in (aligner.lambda_q1, aligner.lambda_k1, aligner.lambda_q2, aligner.lambda_k2):
            p.zero_()  # λ = e⁰ − e⁰ + λ_init
    a = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    b = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    ma, mb = torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)
    out = aligner(a, b, ma, mb)
    e1 = a @ b.transpose(1, 2)
    e2 = (a @ aligner.project_2[1].weight.T) @ (b @ aligner.project_2[1].weight.T).transpose(1, 2)
    expected = torch.softmax(e1, 2) - 0.8 * torch.softmax(e2, 2)
    torch.testing.assert_close(out.matrices["differential_a"], expected)
    torch.testing.assert_close(out.matrices["differential_b"], torch.softmax(e1, 1) - 0.8 * torch.softmax(e2, 1))
    weights = out.matrices["differential_a"]
    assert (weights < 0).any() and (weights > 0).any()
    torch.testing.assert_close(weights.sum(2), torch.full((1, 2), 0.2))  # each row sums to 1 − λ
    torch.testing.assert_close(out.a_aligned, expected @ b)


def test_differential_lambda_is_the_papers_reparametrisation():
    aligner = DifferentialAligner(DIM, hidden=5)
    q1, k1, q2, k2 = aligner.lambda_q1, aligner.lambda_k1, aligner.lambda_q2, aligner.lambda_k2
    expected = math.exp((q1 @ k1).item()) - math.exp((q2 @ k2).item()) + 0.2
    assert aligner.weight_lambda().item() == pytest.approx(expected, rel=1e-6)
    assert all(0.01 < p.detach().std().item() < 0.5 for p in (q1, k1, q2, k2))  # N(0, 0.1²) at initialisation


def test_the_learned_scalars_a_weights_table_prints_are_the_aligners_own():
    """λ as the weights are built with it, also below 0 (nothing bounds it: the second softmax is then added); ssmax's
    s; the attention parts' learned temperature; none for an aligner without one."""
    differential = DifferentialAligner(DIM, hidden=5)
    assert differential.learned_constants() == {"λ": pytest.approx(differential.weight_lambda().item())}
    with torch.no_grad():
        differential.lambda_q2.fill_(1.0), differential.lambda_k2.fill_(1.0)  # exp(5) on the subtracted side
    lam = differential.learned_constants()["λ"]
    assert lam < 0
    a, b, ma, mb = _inputs(batch=1, la=3, lb=4, seed=2)
    weights = differential.eval()(a, b, ma, mb).matrices["differential_a"]
    assert torch.all(weights >= 0)  # no weight below 0, and each real row sums to 1 − λ > 1
    torch.testing.assert_close(weights.sum(2)[ma], torch.full((int(ma.sum()),), 1 - lam))
    assert ScalableSoftmaxAligner(DIM, s_init=0.7).learned_constants() == {"s": pytest.approx(0.7)}
    temperature = AttentionAligner(DIM, distribution="temperature")
    with torch.no_grad():
        temperature.distribution.log_temperature.fill_(math.log(2.5))
    assert temperature.learned_constants() == {"τ": pytest.approx(2.5)}
    assert AttentionAligner(DIM).learned_constants() == {} and CoDAAligner(DIM).learned_constants() == {}


def test_differential_refuses_one_projection_for_both_maps():
    with pytest.raises(ConfigError, match="aligner.projection=none would make the two the same map"):
        DifferentialAligner(DIM, projection="none")


# ------------------------------------------------------------------------------------------------ cog


def test_cog_weights_are_signed_and_normalised_by_their_magnitudes():
    aligner = CogAligner(2, projection="none").eval()
    a = torch.tensor([[[1.0, 0.0], [0.0, -2.0]]])
    b = torch.tensor([[[1.0, 1.0], [-2.0, 0.0], [0.5, 0.5], [7.0, 7.0]]])  # the last token is padding
    ma, mb = torch.ones(1, 2, dtype=torch.bool), torch.tensor([[True, True, True, False]])
    w = aligner(a, b, ma, mb).matrices["cog_a"]
    e = (a @ b.transpose(1, 2))[0, :, :3]  # [[1, −2, 0.5], [−2, 0, −1]]
    expected = torch.sign(e) * torch.exp(e.abs()) / torch.exp(e.abs()).sum(1, keepdim=True)
    torch.testing.assert_close(w[0, :, :3], expected)
    assert torch.all(w[..., 3] == 0)
    assert (w < 0).any() and (w > 0).any() and w[0, 1, 1] == 0  # a score of 0: weight 0
    assert float(w[0, 0].abs().sum()) == pytest.approx(1.0)  # a row without a zero score: |weights| sum to 1


# ------------------------------------------------------------------------------------------- softpick


def test_softpick_is_the_papers_formula_with_exact_zeros_and_a_row_of_zeros():
    aligner = SoftpickAligner(2, projection="none", eps=1e-6).eval()
    a = torch.tensor([[[1.0, 0.0], [0.0, -1.0], [0.0, 0.0]]])  # a_2 scores ≤ 0 against every b; a_3 scores 0
    b = torch.tensor([[[1.0, 0.0], [0.5, 3.0], [-2.0, 1.0], [9.0, 9.0]]])  # the last token is padding
    ma, mb = torch.ones(1, 3, dtype=torch.bool), torch.tensor([[True, True, True, False]])
    out = aligner(a, b, ma, mb)
    w = out.matrices["softpick_a"]
    e = (a @ b.transpose(1, 2))[0, :, :3]
    expected = torch.relu(torch.expm1(e)) / (torch.expm1(e).abs().sum(1, keepdim=True) + 1e-6)
    torch.testing.assert_close(w[0, :, :3], expected)
    assert w[0, 0, 2] == 0 and w[0, 0, 0] > 0  # E < 0: exactly 0
    assert torch.all(w[0, 1:] == 0)  # every score ≤ 0: the row attends to nothing
    assert torch.all(out.a_aligned[0, 1:] == 0)
    assert torch.all(w[..., 3] == 0)
    assert float(w[0, 0].sum()) < 1  # the negative score takes its share of the denominator


def test_softpick_is_stable_for_large_scores_and_matches_the_plain_formula():
    scores = torch.tensor([[[300.0, 299.0, -500.0], [-300.0, -299.0, -1.0], [0.3, -0.2, 0.1]]])
    mask = torch.ones(1, 1, 3, dtype=torch.bool)
    w = softpick(scores, mask, dim=2)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w[0, 0], torch.tensor([1 / (1 + math.e**-1), math.e**-1 / (1 + math.e**-1), 0.0]))
    assert torch.all(w[0, 1] == 0)
    plain = torch.relu(torch.expm1(scores[0, 2])) / (torch.expm1(scores[0, 2]).abs().sum() + 1e-6)
    torch.testing.assert_close(w[0, 2], plain)
    bf16 = softpick(scores.bfloat16(), mask, dim=2)
    assert bf16.dtype == torch.bfloat16 and torch.isfinite(bf16).all() and torch.all(bf16[0, 1] == 0)
    x = scores.clone().requires_grad_(True)
    softpick(x, mask, dim=2).square().sum().backward()
    assert torch.isfinite(x.grad).all()


def test_softpick_zero_eps_is_a_clear_error():
    with pytest.raises(ConfigError, match="aligner.eps must be positive"):
        SoftpickAligner(DIM, eps=0.0)


# -------------------------------------------------------------------------------------------- sigmoid


def test_sigmoid_bias_is_minus_log_of_the_attended_sentences_unpadded_length():
    biased = SigmoidAligner(DIM, projection="none").eval()
    plain = SigmoidAligner(DIM, projection="none", length_bias=False).eval()
    a, b, ma, mb = _inputs(batch=2, la=4, lb=5, seed=1)  # example 2: 3 of a's 4 tokens, 3 of b's 5
    with_bias, without = biased(a, b, ma, mb).matrices, plain(a, b, ma, mb).matrices
    for example, (len_a, len_b) in enumerate([(4, 5), (3, 3)]):
        rows, cols = slice(0, len_a), slice(0, len_b)
        logit = torch.logit(with_bias["sigmoid_a"][example, rows, cols].double())
        unbiased = torch.logit(without["sigmoid_a"][example, rows, cols].double())
        torch.testing.assert_close(logit - unbiased, torch.full_like(logit, -math.log(len_b)), atol=1e-4, rtol=0)
        logit = torch.logit(with_bias["sigmoid_b"][example, rows, cols].double())
        torch.testing.assert_close(logit - unbiased, torch.full_like(logit, -math.log(len_a)), atol=1e-4, rtol=0)
    for matrix in with_bias.values():  # padding: exactly 0
        assert torch.all(matrix[1, 3:] == 0) and torch.all(matrix[1, :, 3:] == 0)
    from matching.model.aligners.weightings import sigmoid

    zero_scores = sigmoid(torch.zeros(2, 1, 5), mb.unsqueeze(1), 2, length_bias=True)  # σ(0 − log n), valid entries
    torch.testing.assert_close(torch.logit(zero_scores[:, 0, 0]), -torch.log(torch.tensor([5.0, 3.0])))


# ---------------------------------------------------------------------------------------------- ssmax


def test_ssmax_is_a_softmax_of_the_scores_times_s_log_n_with_n_the_unpadded_length():
    aligner = ScalableSoftmaxAligner(DIM, projection="none", s_init=0.7).eval()
    a, b, ma, mb = _inputs(batch=2, la=4, lb=5, seed=7)  # example 2: 3 of a's 4 tokens, 3 of b's 5
    w = aligner(a, b, ma, mb).matrices
    e = a @ b.transpose(1, 2)
    for example, (len_a, len_b) in enumerate([(4, 5), (3, 3)]):
        scores = e[example, :len_a, :len_b]
        torch.testing.assert_close(
            w["ssmax_a"][example, :len_a, :len_b], torch.softmax(0.7 * math.log(len_b) * scores, 1)
        )
        torch.testing.assert_close(
            w["ssmax_b"][example, :len_a, :len_b], torch.softmax(0.7 * math.log(len_a) * scores, 0)
        )
    assert torch.all(w["ssmax_a"][1, 3:] == 0) and torch.all(w["ssmax_a"][1, :, 3:] == 0)
    assert isinstance(aligner.s, nn.Parameter)


# ---------------------------------------------------------------------------------------------- the gate


@pytest.mark.parametrize("name", GATED)
def test_the_gate_multiplies_the_ungated_output_by_a_value_in_0_1(name):
    torch.manual_seed(0)
    gated = GATED[name](dim=DIM, output_gate=True).eval()
    ungated = GATED[name](dim=DIM).eval()
    state = {k: v for k, v in gated.state_dict().items() if not k.startswith("output_gate.")}
    ungated.load_state_dict(state)
    a, b, ma, mb = _inputs(seed=2)
    with_gate, without = gated(a, b, ma, mb), ungated(a, b, ma, mb)
    for key, matrix in without.matrices.items():  # the gate leaves the weights alone
        torch.testing.assert_close(with_gate.matrices[key], matrix)
    for x, got, want in ((a, with_gate.a_aligned, without.a_aligned), (b, with_gate.b_aligned, without.b_aligned)):
        factor = torch.sigmoid(gated.output_gate.linear(x))  # σ(W_g x_i), the token's own vector
        assert factor.shape == want.shape and torch.all((factor > 0) & (factor < 1))
        torch.testing.assert_close(got, want * factor)
        nonzero = want.abs() > 1e-6
        ratio = got[nonzero] / want[nonzero]
        assert torch.all((ratio > 0) & (ratio < 1))
    assert gated.output_gate.linear.bias is None


@pytest.mark.parametrize("group", ["softmax", "coda", "conflict", "softmax_conflict", "attention", *NEW])
def test_every_aligner_config_takes_the_output_gate(group):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from matching.configs import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        plain = compose("train", overrides=[f"aligner={group}"])
        cfg = compose("train", overrides=[f"aligner={group}", "aligner.output_gate=true"])
    assert instantiate(plain.aligner)(dim=cfg.model.hidden).output_gate is None
    aligner = instantiate(cfg.aligner)(dim=cfg.model.hidden)
    assert isinstance(aligner.output_gate.linear, nn.Linear)
    assert aligner.output_gate.linear.out_features == aligner.copies * cfg.model.hidden


# ------------------------------------------------------------------------------------- every new aligner


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("name", NEW)
def test_padding_changes_nothing_and_gets_zero_weight(name, gate):
    """One example alone, and the same example in a padded batch beside another: the same matrices and vectors."""
    torch.manual_seed(0)
    aligner = NEW[name](dim=DIM, output_gate=gate).eval()
    a, b, ma, mb = _inputs(batch=1, la=3, lb=4, seed=3, ragged=False)
    alone = aligner(a, b, ma, mb)
    other_a, other_b, _, _ = _inputs(batch=1, la=6, lb=7, seed=4, ragged=False)
    batch_a = torch.cat([torch.cat([a, 40 * torch.randn(1, 3, DIM)], dim=1), other_a])
    batch_b = torch.cat([torch.cat([b, 40 * torch.randn(1, 3, DIM)], dim=1), other_b])
    mask_a = torch.tensor([[True] * 3 + [False] * 3, [True] * 6])
    mask_b = torch.tensor([[True] * 4 + [False] * 3, [True] * 7])
    batched = aligner(batch_a, batch_b, mask_a, mask_b)
    torch.testing.assert_close(batched.a_aligned[:1, :3], alone.a_aligned, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batched.b_aligned[:1, :4], alone.b_aligned, atol=1e-5, rtol=1e-5)
    for key, matrix in batched.matrices.items():
        assert torch.all(matrix[0, 3:] == 0) and torch.all(matrix[0, :, 4:] == 0), key
        torch.testing.assert_close(matrix[:1, :3, :4], alone.matrices[key], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", NEW)
def test_gradients_are_finite_and_reach_every_parameter_even_for_large_scores(name):
    torch.manual_seed(0)
    aligner = NEW[name](dim=DIM, output_gate=True)
    a, b, ma, mb = _inputs(seed=5)
    for scale in (1.0, 30.0):  # 30: scores in the hundreds
        aligner.zero_grad()
        x = (scale * a).requires_grad_(True)
        out = aligner(x, scale * b, ma, mb)
        (out.a_aligned.square().sum() + out.b_aligned.square().sum()).backward()
        assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
        for pname, p in aligner.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), pname
            if scale == 1.0:
                assert p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", NEW)
def test_bf16_is_finite_and_close_to_fp32(name):
    torch.manual_seed(0)
    aligner = NEW[name](dim=DIM, output_gate=True).eval()
    a, b, ma, mb = _inputs(seed=6)
    want = aligner(a, b, ma, mb)
    got = aligner.to(torch.bfloat16)(a.bfloat16(), b.bfloat16(), ma, mb)
    assert got.a_aligned.dtype == torch.bfloat16
    for key, matrix in want.matrices.items():
        assert torch.isfinite(got.matrices[key].float()).all()
        torch.testing.assert_close(got.matrices[key].float(), matrix, atol=0.03, rtol=0.05)
    torch.testing.assert_close(got.a_aligned.float(), want.a_aligned, atol=0.05, rtol=0.05)


@pytest.mark.parametrize(  # the exporter traces each for seconds: differential (two softmaxes, λ) by default
    "name", [n if n == "differential" else pytest.param(n, marks=pytest.mark.slow) for n in NEW]
)
def test_the_onnx_export_runs_each_new_aligner_with_its_gate(name, tmp_path):
    """The model with the aligner (and its gate) through matching-export's ONNX path: onnxruntime gives PyTorch's
    answers at batch sizes and lengths other than the traced ones."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from matching.model.decomposable import DecomposableAttention
    from matching.model.embeddings import ServingInputs
    from matching.saved.onnx_graph import ServingModel, _write_onnx, example_inputs

    torch.manual_seed(0)
    vocab = 30
    aligner = partial(NEW[name].func, **{**NEW[name].keywords, "hidden": 8, "output_gate": True})
    model = DecomposableAttention(torch.randn(vocab, 12), 3, aligner, hidden=8, null_token=True).eval()
    serving = ServingModel(model)
    shapes = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("len_a")},
              {0: torch.export.Dim("batch"), 1: torch.export.Dim("len_b")})  # fmt: skip
    _write_onnx(ServingInputs(serving, example_inputs(vocab), ["a", "b"], shapes), tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for batch, len_a, len_b in [(1, 4, 3), (4, 9, 6)]:
        a, b = example_inputs(vocab, batch, len_a, len_b, seed=batch)
        probs, logits = session.run(None, {"a": a.numpy(), "b": b.numpy()})
        with torch.no_grad():
            want_probs, want_logits = serving(a, b)
        torch.testing.assert_close(torch.from_numpy(logits), want_logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(torch.from_numpy(probs), want_probs, atol=1e-5, rtol=1e-4)


def test_the_published_answer_says_each_question_from_the_pages_rows_and_names_the_tasks_not_run(tmp_path):
    import csv

    from matching.studies.published import signed_aligners

    columns = ["task", "family", "label", "split", "metric", "mean", "std", "n"]
    for prefix in ("coda_centred", "softmax_centred", "twin"):
        columns += [f"{prefix}_{k}" for k in ("diff", "ci", "p", "p_holm", "verdict")]

    def row(family, label, mean, **against):
        values = {"task": "snli_check", "family": family, "label": label, "split": "dev", "metric": "acc",
                  "mean": mean, "std": "0.5", "n": "3"}  # fmt: skip
        for prefix, (diff, low, high, verdict) in against.items():
            values |= {f"{prefix}_diff": diff, f"{prefix}_ci": f"{low} {high}", f"{prefix}_p": "0.01",
                       f"{prefix}_p_holm": "0.02", f"{prefix}_verdict": verdict}  # fmt: skip
        return values

    rows = [
        row("coda_centred", "CoDA, centred", "74.0", softmax_centred=("10.5", "8.0", "13.0", "resolved")),
        row("differential", "differential (F = linear)", "70.0", coda_centred=("-4.0", "-6.0", "-2.0", "resolved")),
        row("softpick", "softpick", "64.0", softmax_centred=("0.5", "-1.0", "2.0", "not resolved")),
        row("coda_centred_gated", "CoDA, centred, gated", "74.5", twin=("0.5", "-1.5", "2.5", "not resolved")),
        {"task": "snli_check", "family": "cog", "label": "cog", "split": "dev", "metric": "acc", "n": "0"},
    ]
    with (tmp_path / "study.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)

    answer = signed_aligners.answer(tmp_path)
    assert "signed, against CoDA centred: differential (F = linear) -4.00 [-6.00, -2.00] (resolved, p = 0.02)" in answer
    assert (
        "attend to nothing, against softmax centred: softpick +0.50 [-1.00, +2.00] (not resolved, p = 0.02)" in answer
    )
    assert "the gate, gated − ungated: CoDA, centred, gated +0.50 [-1.50, +2.50]" in answer
    assert "cog" not in answer  # a family without runs says nothing
    assert answer.endswith("Tasks not run yet: TrecQA clean-dev MAP (65 questions); WikiQA dev MAP (122 questions); "
                           "SNLI check acc, frozen encoder; TrecQA clean-dev MAP, frozen encoder; SciTail dev acc, "
                           "frozen encoder.")  # fmt: skip
    table = signed_aligners.table(tmp_path)
    assert "| CoDA, centred | 74.00 ± 0.50 (3 seeds) | – | +10.50 [+8.00, +13.00], resolved, p = 0.02 | – |" in table
    assert table.index("| CoDA, centred |") < table.index("| CoDA, centred, gated |") < table.index("| differential")
