"""The shared building blocks: the CPU dropout, the masked softmax's padding and gradients, per_token."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT, SUBPROCESS_ENV
from torch import nn
from torch.backends.cpu import get_cpu_capability

from matching.model.layers import Dropout, masked_softmax, pair_mask, per_token, softmax


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


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


@pytest.mark.parametrize("length", range(1, 21))
def test_softmax_is_torch_softmax_bit_for_bit_forward_and_backward(length):
    # layers.softmax gives a short last dimension its own backward on a CPU (ShortRowSoftmax): the same bits as
    # PyTorch's kernel, including the sign of every zero, on every length below, at and above the vector width.
    torch.manual_seed(length)
    for scale, masked in ((1.0, False), (30.0, False), (3.0, True)):
        scores = torch.randn(16, 9, length) * scale
        if masked and length > 1:
            scores[:, :, length // 2 :] = float("-inf")
        upstream = torch.randn(16, 9, length)
        ours, theirs = (scores.clone().requires_grad_() for _ in range(2))
        y_ours, y_theirs = softmax(ours, -1), torch.softmax(theirs, -1)
        (y_ours * upstream).sum().backward()
        (y_theirs * upstream).sum().backward()
        assert torch.equal(_bits(y_ours), _bits(y_theirs))
        assert torch.equal(_bits(ours.grad), _bits(theirs.grad))


def test_softmax_takes_the_short_row_backward_only_where_it_matches_pytorch():
    lanes = {"AVX512": 16, "AVX2": 8}.get(get_cpu_capability(), 0)
    x = torch.randn(4, 3, 5, requires_grad=True)
    assert (softmax(x, -1).grad_fn.name() == "ShortRowSoftmaxBackward") == (5 < lanes)
    assert softmax(x, 1).grad_fn.name() == "SoftmaxBackward0"  # not the last dimension
    assert softmax(torch.randn(4, 3, 40, requires_grad=True), -1).grad_fn.name() == "SoftmaxBackward0"
    assert softmax(x.double(), -1).grad_fn.name() == "SoftmaxBackward0"
    with torch.no_grad():
        assert softmax(x, -1).grad_fn is None


def test_softmax_matches_pytorch_on_the_avx2_kernels_too():
    # A machine without AVX-512 runs PyTorch's AVX2 kernels (8 lanes); ATEN_CPU_CAPABILITY=avx2 selects them here.
    if get_cpu_capability() not in ("AVX512", "AVX2"):
        pytest.skip("ShortRowSoftmax is used on x86 CPUs with AVX2 or AVX-512 only")
    code = (
        "import torch; from matching.model.layers import softmax, _float_lanes; assert _float_lanes() == 8\n"
        "for n in range(1, 12):\n"
        "    x = torch.randn(8, 6, n) * 5; g = torch.randn(8, 6, n)\n"
        "    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()\n"
        "    (softmax(a, -1) * g).sum().backward(); (torch.softmax(b, -1) * g).sum().backward()\n"
        "    assert torch.equal(a.grad.view(torch.int32), b.grad.view(torch.int32)), n\n"
    )
    env = {**SUBPROCESS_ENV, "ATEN_CPU_CAPABILITY": "avx2"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_masked_softmax_adds_its_fill_with_the_numbers_of_a_masked_fill():
    # The −inf is added instead of written (see masked_softmax): weights and gradients equal those of masked_fill.
    torch.manual_seed(0)
    mask_a = torch.rand(6, 7) > 0.3
    mask_b = torch.rand(6, 5) > 0.3
    mask_b[0] = False  # an example whose b is all padding: its slices keep their raw scores
    pair = pair_mask(mask_a, mask_b, torch.float32)
    upstream = torch.randn(6, 7, 5)
    for dim, side in ((2, mask_b.unsqueeze(1)), (1, mask_a.unsqueeze(2))):
        ours, theirs = (torch.randn(6, 7, 5).requires_grad_() for _ in range(2))
        with torch.no_grad():
            theirs.copy_(ours)
        fill = ~side & side.any(dim, keepdim=True)
        expected = torch.softmax(theirs.masked_fill(fill, float("-inf")), dim) * pair
        got = masked_softmax(ours, side, dim, zero=pair)
        (expected * upstream).sum().backward()
        (got * upstream).sum().backward()
        assert torch.equal(got, expected) and torch.equal(ours.grad, theirs.grad)


def test_pair_mask_as_numbers_is_the_boolean_pair_mask_converted():
    mask_a, mask_b = torch.rand(4, 6) > 0.4, torch.rand(4, 3) > 0.4
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        assert torch.equal(pair_mask(mask_a, mask_b, dtype), pair_mask(mask_a, mask_b).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_dropout_gives_the_numbers_of_a_boolean_mask_scaled_in_the_inputs_dtype(dtype, p):
    # The numbers a seed gives depend on exactly this: element i is kept when the i-th 16-bit lane of the int64 draw
    # is at least round(p · 2^16) − 2^15, and scaled by 2^16 / (2^16 − round(p · 2^16)). The mask is written as
    # numbers and scaled by a cached 0-dim tensor: the same bits as the plain formulation (a boolean mask converted
    # to x's dtype and multiplied by the Python float scale), in every dtype.
    x = torch.randn(6, 5, 7).to(dtype)
    threshold = round(p * 65536)
    torch.manual_seed(5)
    words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    keep = words.view(torch.int16)[: x.numel()].view(x.shape) >= threshold - 32768
    expected = x * keep.to(dtype).mul_(65536 / (65536 - threshold))
    torch.manual_seed(5)
    got = Dropout(p)(x)
    assert got.dtype == dtype and torch.equal(got.view(torch.uint8), expected.view(torch.uint8))
