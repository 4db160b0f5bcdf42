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
from matching.model.decomposable import DecomposableAttention

VOCAB, EMB, HIDDEN = 40, 12, 8
ALIGNERS = {
    "softmax": SoftmaxAligner,
    "coda": CoDAAligner,
    "conflict": ConflictAligner,
    "softmax_conflict": SoftmaxConflictAligner,
    "differential": partial(DifferentialAligner, center_tokens=True),
    "cog": partial(CogAligner, center_tokens=True),
    "softpick": partial(SoftpickAligner, center_tokens=True),
    "sigmoid": partial(SigmoidAligner, center_tokens=True),
    "ssmax": partial(ScalableSoftmaxAligner, center_tokens=True),
    "coda_gated": partial(CoDAAligner, center_tokens=True, output_gate=True),
    "softpick_gated": partial(SoftpickAligner, center_tokens=True, output_gate=True),
}
VARIANTS = {
    "plain": {},
    "null": {"null_token": True},
    "intra_softmax": {"intra_aligner": partial(SoftmaxAligner, hidden=HIDDEN)},
    "intra_coda_null": {"intra_aligner": partial(CoDAAligner, hidden=HIDDEN), "null_token": True},
}


def _model(aligner="softmax", **kwargs):
    torch.manual_seed(0)
    return DecomposableAttention(
        torch.randn(VOCAB, EMB), 3, partial(ALIGNERS[aligner], hidden=HIDDEN), hidden=HIDDEN, **kwargs
    )


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("aligner", ALIGNERS)
def test_one_example_alone_and_in_a_padded_batch_give_the_same_logits(aligner, variant):
    model = _model(aligner, **VARIANTS[variant]).eval()
    g = torch.Generator().manual_seed(1)
    a = torch.randint(2, VOCAB, (1, 5), generator=g)
    b = torch.randint(2, VOCAB, (1, 3), generator=g)
    alone = model(a, b).logits
    batch_a = torch.randint(2, VOCAB, (3, 9), generator=g)
    batch_b = torch.randint(2, VOCAB, (3, 7), generator=g)
    batch_a[1], batch_b[1] = 0, 0
    batch_a[1, :5], batch_b[1, :3] = a, b
    batch_a[2, 4:] = 0  # another padded example beside it
    batched = model(batch_a, batch_b).logits
    torch.testing.assert_close(batched[1:2], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("aligner", ALIGNERS)
def test_gradients_reach_every_trainable_parameter_and_embeddings_stay_frozen(aligner):
    model = _model(aligner, intra_aligner=partial(SoftmaxAligner, hidden=HIDDEN), null_token=True)
    a, b = torch.randint(2, VOCAB, (4, 6)), torch.randint(2, VOCAB, (4, 5))
    torch.nn.functional.cross_entropy(model(a, b).logits, torch.tensor([0, 1, 2, 1])).backward()
    assert not model.embedding.weight.requires_grad
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_embeddings_are_unit_norm_and_padding_row_is_zero():
    model = _model()
    norms = model.embedding.weight.float().norm(dim=1)
    assert norms[0] == 0
    torch.testing.assert_close(norms[1:], torch.ones(VOCAB - 1), atol=1e-3, rtol=1e-3)  # stored in float16


def test_returns_alignment_matrices_including_intra():
    model = _model("coda", intra_aligner=partial(SoftmaxAligner, hidden=HIDDEN)).eval()
    out = model(torch.randint(2, VOCAB, (2, 6)), torch.randint(2, VOCAB, (2, 4)))
    assert out.logits.shape == (2, 3)
    assert out.matrices["M"].shape == (2, 6, 4)
    assert out.matrices["intra_a/softmax_a"].shape == (2, 6, 6)
    assert out.matrices["intra_b/softmax_a"].shape == (2, 4, 4)


def test_trainable_random_embeddings_learn():
    model = DecomposableAttention(
        torch.randn(VOCAB, EMB),
        2,
        partial(SoftmaxAligner, hidden=HIDDEN),
        hidden=HIDDEN,
        freeze_embeddings=False,
        normalize_embeddings=False,
    )
    a, b = torch.randint(2, VOCAB, (4, 6)), torch.randint(2, VOCAB, (4, 5))
    torch.nn.functional.cross_entropy(model(a, b).logits, torch.tensor([0, 1, 0, 1])).backward()
    assert model.embedding.weight.grad is not None


def test_parameter_count_matches_parikh_scale():
    """Parikh et al. report ≈380K trainable parameters at hidden 200 with 300-d vectors (vanilla, 3 classes)."""
    model = DecomposableAttention(torch.randn(VOCAB, 300), 3, partial(SoftmaxAligner), hidden=200)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 370_000 < trainable < 390_000


def test_bad_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="num_classes"):
        DecomposableAttention(torch.randn(VOCAB, EMB), 1, partial(SoftmaxAligner))
    with pytest.raises(ValueError, match=r"\(V, E\) matrix"):
        DecomposableAttention(torch.randn(VOCAB), 3, partial(SoftmaxAligner))
