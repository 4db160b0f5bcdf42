"""The shared building blocks: the CPU dropout, the masked softmax's padding and gradients, per_token."""

import pytest
import torch
from torch import nn

from matching.layers import Dropout, masked_softmax, per_token


def test_dropout_drops_at_the_rate_and_keeps_the_expectation():
    torch.manual_seed(0)
    x = torch.ones(2_000_000, requires_grad=True)
    y = Dropout(0.2).train()(x)
    dropped = (y == 0).float().mean().item()
    assert dropped == pytest.approx(0.2, abs=0.002)
    assert y.unique().tolist() == [0.0, pytest.approx(65536 / (65536 - 13107))]
    assert y.mean().item() == pytest.approx(1.0, abs=0.003)
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d(x · mask)/dx = mask, and x is all ones


def test_dropout_is_seeded_like_torch_and_off_in_eval():
    x = torch.randn(4, 7, 5)
    torch.manual_seed(3)
    first = Dropout(0.3)(x)
    torch.manual_seed(3)
    assert torch.equal(first, Dropout(0.3)(x))
    assert not torch.equal(first, Dropout(0.3)(x))  # the stream moves on
    assert torch.equal(Dropout(0.3).eval()(x), x)
    assert torch.equal(Dropout(0.0)(x), x)
    # the dropped positions differ across the elements of one draw (all four 16-bit lanes are used)
    mask = Dropout(0.5)(torch.ones(4000)) == 0
    assert 0.45 < mask.view(-1, 4).float().mean(0).min() and mask.view(-1, 4).float().mean(0).max() < 0.55


def test_masked_softmax_zeroes_padding_and_keeps_gradients_finite_on_empty_slices():
    scores = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 2, :] = False  # a padding row: no valid entry at all
    mask[1, :, 3] = False  # a padding column
    weights = masked_softmax(scores, mask, dim=2)
    assert torch.equal(weights[0, 2], torch.zeros(4)) and torch.equal(weights[1, :, 3], torch.zeros(3))
    assert torch.allclose(weights[0, :2].sum(-1), torch.ones(2)) and torch.allclose(weights[1].sum(-1), torch.ones(3))
    reference = torch.softmax(scores[1, :, :3], dim=-1)
    assert torch.allclose(weights[1, :, :3], reference)
    (weights * torch.randn_like(weights)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[0, 2], torch.zeros(4)) and torch.equal(scores.grad[1, :, 3], torch.zeros(3))


def test_masked_softmax_from_one_sides_mask_equals_the_pair_mask_exactly():
    # What the aligners do: the fill from the (B, 1, Lb) / (B, La, 1) mask, the zeroing by the pair mask; the
    # weights and the gradients are bit-identical to the (B, La, Lb) pair mask's, padding rows, columns and an
    # all-padding side included.
    torch.manual_seed(0)
    mask_a = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    mask_b = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    pair = mask_a.unsqueeze(2) & mask_b.unsqueeze(1)
    upstream = torch.randn(3, 4, 3)
    for dim, side in ((2, mask_b.unsqueeze(1)), (1, mask_a.unsqueeze(2))):
        full, small = (torch.randn(3, 4, 3).requires_grad_() for _ in range(2))
        with torch.no_grad():
            small.copy_(full)
        expected, got = masked_softmax(full, pair, dim), masked_softmax(small, side, dim, zero=pair)
        (expected * upstream).sum().backward()
        (got * upstream).sum().backward()
        assert torch.equal(got, expected) and torch.equal(small.grad, full.grad)
        assert not got[~pair].any()


def test_masked_softmax_in_bfloat16_has_no_nan():
    scores = torch.randn(2, 5, 6).bfloat16()
    mask = torch.rand(2, 5, 6) > 0.5
    mask[0, 1] = False
    weights = masked_softmax(scores, mask, dim=1)
    assert torch.isfinite(weights).all() and not weights[~mask].any()


def test_per_token_equals_applying_the_module_to_each_side():
    net = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
    a, b = torch.randn(3, 5, 6), torch.randn(3, 2, 6)
    fa, fb = per_token(net, a, b)
    assert torch.allclose(fa, net(a)) and torch.allclose(fb, net(b))
    same_a, same_b = per_token(nn.Identity(), a, b)
    assert same_a is a and same_b is b
