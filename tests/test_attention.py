"""Attention from parts (matching/model/attention.py): each compatibility and distribution function on hand-worked
values, sparsemax and entmax against known simplex projections, padding, rows summing to 1, finite gradients in float32
and bfloat16, and every option composed and trained for a batch."""

import math

import pytest
import torch
from conftest import compose_train

from matching.errors import ConfigError
from matching.model.aligners.simplex import _EntmaxBisect
from matching.model.attention import (
    DISTRIBUTIONS,
    SCORES,
    AttentionAligner,
    Dot,
    General,
    ScaledDot,
    Similarity,
    entmax,
    entmax15,
    head_products,
    sparsemax,
)
from matching.training.run import train

A = torch.tensor([[[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 1.0]]])  # (1, 2, 4)
B = torch.tensor([[[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]]])  # (1, 3, 4)


def test_the_dot_family_by_hand():
    dot = Dot(4, 1)(A, B)[0, 0]
    assert dot.tolist() == [[3.0, 2.0, 0.0], [2.0, 0.0, 3.0]]
    assert ScaledDot(4, 1)(A, B)[0, 0].tolist() == [[1.5, 1.0, 0.0], [1.0, 0.0, 1.5]]  # / √4
    heads = Dot(4, 2)(A, B)[0]  # head 0: features 0-1, head 1: features 2-3
    assert heads[0].tolist() == [[1.0, 2.0, 0.0], [1.0, 0.0, 0.0]] and heads[1].tolist() == [
        [2.0, 0.0, 0.0],
        [1.0, 0.0, 3.0],
    ]
    cos = Similarity(4, 1)(A, B)[0, 0]
    assert cos[0, 0].item() == pytest.approx(3 / (math.sqrt(5) * 2)) and cos[1, 2].item() == pytest.approx(
        3 / (math.sqrt(2) * 3)
    )


def test_general_is_bilinear_and_its_variants_add_a_bias_or_an_activation():
    general = General(4, 1)
    with torch.no_grad():
        general.weight.copy_(torch.eye(4).unsqueeze(0) * 2)
    assert torch.equal(general(A, B), 2 * Dot(4, 1)(A, B))
    biased = SCORES["biased_general"](4, 1)
    with torch.no_grad():
        biased.weight.copy_(torch.eye(4).unsqueeze(0))
        biased.bias.fill_(1.0)
    assert torch.allclose(biased(A, B), Dot(4, 1)(A, B) + A.sum(-1)[:, None, :, None])  # a_iᵀ(W b_j + w)
    activated = SCORES["activated_general"](4, 1)
    with torch.no_grad():
        activated.weight.copy_(torch.eye(4).unsqueeze(0))
    assert torch.allclose(activated(A, B), torch.tanh(Dot(4, 1)(A, B)))


def test_additive_is_w_tanh_of_the_two_projections_and_concat_is_the_same_function():
    additive = SCORES["additive"](4, 1, hidden=3)
    by_hand = torch.tanh(additive.first_a(A)[:, :, None] + additive.first_b(B)[:, None]) @ additive.out.weight.T
    assert torch.allclose(additive(A, B), by_hand.permute(0, 3, 1, 2))
    assert SCORES["concat"] is SCORES["additive"]
    deep = SCORES["deep"](4, 2, hidden=3)
    assert deep(A, B).shape == (1, 2, 2, 3) and len(deep.deeper) == 1


def test_sparsemax_is_the_euclidean_projection_onto_the_simplex():
    z = torch.tensor([1.0, 0.8, 0.1, -1.0])
    assert torch.allclose(sparsemax(z, 0), torch.tensor([0.6, 0.4, 0.0, 0.0]))  # τ = (1 + 0.8 − 1) / 2
    assert torch.allclose(sparsemax(torch.tensor([0.2, 0.2, 0.2]), 0), torch.full((3,), 1 / 3))
    assert torch.equal(sparsemax(torch.tensor([5.0, 0.0, float("-inf")]), 0), torch.tensor([1.0, 0.0, 0.0]))
    rng = torch.Generator().manual_seed(0)
    z = torch.randn(50, 7, generator=rng, dtype=torch.float64)
    p = sparsemax(z, 1)
    projection = _projection_by_optimisation(z)  # minimise ‖p − z‖² over the simplex, independently
    assert torch.allclose(p, projection, atol=1e-6) and torch.allclose(p.sum(1), torch.ones(50, dtype=z.dtype))


def _projection_by_optimisation(z: torch.Tensor) -> torch.Tensor:
    """The simplex projection by bisection on τ of Σ max(z − τ, 0) = 1 (a different algorithm from sorting)."""
    low, high = z.min(1, keepdim=True).values - 1, z.max(1, keepdim=True).values
    for _ in range(200):
        tau = (low + high) / 2
        above = (z - tau).clamp_min(0).sum(1, keepdim=True) >= 1
        low, high = torch.where(above, tau, low), torch.where(above, high, tau)
    return (z - (low + high) / 2).clamp_min(0)


def test_entmax_15_by_sorting_equals_bisection_and_alpha_spans_softmax_to_sparsemax():
    z = torch.tensor([[1.0, 0.8, 0.1, -1.0]], dtype=torch.float64)
    by_hand = torch.tensor([[0.5292, 0.3937, 0.0770, 0.0]], dtype=torch.float64)  # [z/2 − τ]₊², Σ = 1
    assert torch.allclose(entmax15(z, 1), by_hand, atol=1e-4)
    assert torch.allclose(_EntmaxBisect.apply(z, 1.5, 1, 80), entmax15(z, 1), atol=1e-10)
    assert torch.equal(entmax(z, 1, alpha=2.0), sparsemax(z, 1))
    near_softmax = entmax(z, 1, alpha=1.01)
    assert torch.allclose(near_softmax, torch.softmax(z, 1), atol=0.02) and (near_softmax > 0).all()
    for alpha in (1.2, 1.5, 1.8, 2.0):
        assert entmax(z, 1, alpha=alpha).sum().item() == pytest.approx(1.0, abs=1e-9)


def test_the_distributions_gradients_are_exact():
    z = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: sparsemax(x, 1), (z,))
    assert torch.autograd.gradcheck(lambda x: entmax15(x, 1), (z,))
    assert torch.autograd.gradcheck(lambda x: _EntmaxBisect.apply(x, 1.3, 1, 80), (z,), atol=1e-5)


def test_entmax_15_has_a_finite_gradient_where_the_thresholds_discriminant_is_zero():
    # z/2 = [1, 1, 0, 0]: at k = 4 the discriminant 1 − k·(mean of squares − squared mean) is exactly 0. Autograd
    # through √ of it gave NaN everywhere (0 · ∞), and a WikiQA run's loss NaN at its 950th step.
    z = torch.tensor([[2.0, 2.0, 0.0, 0.0]], requires_grad=True)
    p = entmax15(z, 1)
    assert torch.allclose(p, torch.tensor([[0.5, 0.5, 0.0, 0.0]]))
    (p * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    s = torch.tensor([0.5**0.5, 0.5**0.5, 0.0, 0.0])  # p^(2 − α) on the support
    g = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.allclose(z.grad[0], s * (g - (s @ g) / s.sum()))


@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
@pytest.mark.parametrize("score", sorted(SCORES))
def test_every_part_gives_zero_weight_to_padding_rows_that_sum_to_one_and_finite_gradients(score, distribution):
    torch.manual_seed(0)
    a, b = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    mask_a = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mask_b = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    for dtype in (torch.float32, torch.bfloat16):
        aligner = AttentionAligner(8, hidden=6, dropout=0.0, score=score, distribution=distribution, heads=2)
        aligner = aligner.to(dtype)
        x, y = a.detach().to(dtype).requires_grad_(), b.detach().to(dtype).requires_grad_()
        out = aligner(x, y, mask_a, mask_b)
        rows, columns = out.matrices["attention_a"], out.matrices["attention_b"]
        assert rows[0, 4].abs().sum() == 0 and rows[0, :, 2].abs().sum() == 0  # a padding row, a padding column
        assert out.a_aligned[0, 4].abs().sum() == 0 and out.b_aligned[0, 2].abs().sum() == 0
        if aligner.distribution.normalised:
            tolerance = 1e-5 if dtype == torch.float32 else 2e-2
            assert torch.allclose(rows[1].sum(-1).float(), torch.ones(5), atol=tolerance)
            assert torch.allclose(columns[1].sum(-2).float(), torch.ones(3), atol=tolerance)
            assert torch.allclose(rows[0, :4].sum(-1).float(), torch.ones(4), atol=tolerance)
        (out.a_aligned.float().sum() + out.b_aligned.float().sum()).backward()
        for grad in (x.grad, y.grad, *(p.grad for p in aligner.parameters() if p.grad is not None)):
            assert torch.isfinite(grad.float()).all()


def test_feature_wise_attention_has_one_distribution_per_feature():
    aligner = AttentionAligner(8, dropout=0.0, score="additive", hidden=6, feature_wise=True)
    assert aligner.heads == 8 and aligner.score.out.out_features == 8
    with pytest.raises(ConfigError, match="aligner.heads=3 must divide the aligned vectors' width 8"):
        AttentionAligner(8, heads=3)
    with pytest.raises(ConfigError, match="unknown aligner.distribution 'softermax'"):
        AttentionAligner(8, distribution="softermax")


def test_head_products_is_the_matrix_product_for_one_feature_or_one_column_per_head():
    torch.manual_seed(2)
    for x_shape, y_shape in [((2, 3, 5, 1), (2, 3, 1, 4)), ((2, 3, 5, 4), (2, 3, 4, 1)), ((2, 3, 5, 2), (2, 3, 2, 4))]:
        x, y = torch.randn(x_shape), torch.randn(y_shape)
        assert torch.allclose(head_products(x, y), x @ y, atol=1e-6)


def test_feature_wise_dot_attention_is_a_softmax_per_feature_computed_one_feature_at_a_time():
    torch.manual_seed(3)
    a, b = torch.randn(2, 4, 6), torch.randn(2, 3, 6)
    mask_a = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    mask_b = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    out = AttentionAligner(6, dropout=0.0, feature_wise=True)(a, b, mask_a, mask_b)
    for k in range(6):
        scores = a[..., k, None] * b[..., k][:, None, :]  # (B, La, Lb): feature k's own scores
        rows = torch.softmax(scores.masked_fill(~mask_b[:, None, :], float("-inf")), dim=2)
        columns = torch.softmax(scores.masked_fill(~mask_a[:, :, None], float("-inf")), dim=1)
        a_k = (rows @ b[..., k, None]).squeeze(-1) * mask_a
        b_k = (columns.transpose(1, 2) @ a[..., k, None]).squeeze(-1) * mask_b
        assert torch.allclose(out.a_aligned[..., k], a_k, atol=1e-6)
        assert torch.allclose(out.b_aligned[..., k], b_k, atol=1e-6)


def test_dot_softmax_one_head_computes_what_the_softmax_aligner_without_f_does():
    from matching.model.aligners import SoftmaxAligner

    torch.manual_seed(1)
    a, b = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    mask_a, mask_b = torch.ones(2, 5, dtype=torch.bool), torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    ours = AttentionAligner(8, dropout=0.0)(a, b, mask_a, mask_b)
    theirs = SoftmaxAligner(8, dropout=0.0, projection="none")(a, b, mask_a, mask_b)
    assert torch.allclose(ours.a_aligned, theirs.a_aligned, atol=1e-6)
    assert torch.allclose(ours.b_aligned, theirs.b_aligned, atol=1e-6)


@pytest.mark.parametrize(
    "options",
    [["aligner.score=additive", "aligner.distribution=sparsemax", "aligner.heads=4"],
     ["aligner.score=general", "aligner.distribution=entmax", "aligner.alpha=1.3"],
     ["aligner.score=scaled_dot", "aligner.distribution=temperature", "aligner.feature_wise=true"],
     ["aligner.score=similarity", "aligner.distribution=sigmoid"], ["aligner.score=deep"]],
)  # fmt: skip
def test_every_option_composes_and_trains_a_batch(tmp_path, options):
    metrics = train(compose_train(tmp_path, "aligner=attention", *options, "debug=fast"))
    assert math.isfinite(metrics["train/loss"]) and math.isfinite(metrics["val/acc"])
