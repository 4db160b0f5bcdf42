"""Building blocks shared by the model and the aligners: the feed-forward net and masked reductions.

Masks are boolean, True on real tokens. Padding is removed by multiplying with the mask, never by filling
with huge finite negative numbers (they overflow in half precision): the masked softmax uses −inf, which is exact,
and only where a slice has a valid entry. Every function here is safe in bf16/fp16.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn
from torch.backends.cpu import get_cpu_capability
from torch.compiler import is_compiling

from matching.errors import ConfigError


class Dropout(nn.Dropout):
    """nn.Dropout, with a faster mask on a CPU: one 64-bit random number for four elements.

    PyTorch's CPU dropout draws one Mersenne-Twister number per element in a serial loop (its vectorised MKL path
    is taken on Intel processors only): about 12 ns an element on an AMD EPYC, a third of the step of a small
    model. Here each element compares a 16-bit slice of full-range `random_()` int64s with round(p · 2¹⁶): it is
    dropped with probability p' = round(p · 2¹⁶) / 2¹⁶ (0.2 → 0.19999695) and kept ones are scaled by
    1 / (1 − p'), so the expectation is exact. The numbers come from PyTorch's generator, so seeding and
    checkpointed random states work as with nn.Dropout. On other devices (CUDA's fused kernel) and in a compiled
    model (the compiler's own generator) this is nn.Dropout.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.p >= 1.0 or is_compiling():
            return super().forward(x)
        lowest_kept, scale = _dropout_constants(self.p, torch.promote_types(x.dtype, torch.float32))
        words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # all 64 bits
        # The comparison writes 0/1 straight into x's dtype: a boolean mask and its conversion would cost 2.5x as
        # much (PyTorch's boolean kernels are not vectorised), with the same numbers.
        keep = torch.ge(words.view(torch.int16)[: x.numel()].view(x.shape), lowest_kept, out=torch.empty_like(x))
        return x * keep.mul_(scale)


@functools.cache
def _dropout_constants(p: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Dropout's lowest kept 16-bit lane, round(p · 2¹⁶) − 2¹⁵ (int16), and its scale 2¹⁶ / (2¹⁶ − round(p · 2¹⁶)) in
    `dtype` (float32 for a float32, bf16 or fp16 input, whose kernels multiply in float32; float64 for float64): as
    0-dim tensors, the numbers Python scalars would give, without converting a scalar in each call. Read only."""
    threshold = round(p * 65536)
    return torch.tensor(threshold - 32768, dtype=torch.int16), torch.tensor(65536 / (65536 - threshold), dtype=dtype)


class FeedForward(nn.Sequential):
    """Parikh et al.'s F, G and H: `layers` × (dropout → linear → ReLU)."""

    def __init__(self, in_dim: int, hidden: int, dropout: float = 0.2, layers: int = 2):
        if in_dim <= 0 or hidden <= 0 or layers <= 0:
            raise ConfigError(f"FeedForward needs positive sizes, got in_dim={in_dim} hidden={hidden} layers={layers}")
        blocks: list[nn.Module] = []
        for i in range(layers):
            blocks += [Dropout(dropout), nn.Linear(in_dim if i == 0 else hidden, hidden), nn.ReLU()]
        super().__init__(*blocks)
        self.in_dim, self.out_dim = in_dim, hidden


def pair_mask(mask_a: Tensor, mask_b: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """(B, La), (B, Lb) -> (B, La, Lb): True where both positions are real tokens; with a `dtype`, 1 there and 0
    elsewhere in that dtype, as the product of the two converted masks (half the time of converting the boolean
    (B, La, Lb) one: PyTorch's boolean kernels are not vectorised)."""
    if dtype is None:
        return mask_a.unsqueeze(2) & mask_b.unsqueeze(1)
    return mask_a.unsqueeze(2).to(dtype) * mask_b.unsqueeze(1).to(dtype)


def masked_softmax(scores: Tensor, mask: Tensor, dim: int, zero: Tensor | None = None) -> Tensor:
    """Softmax over `dim` restricted to positions where `mask` (broadcastable to `scores`) is True.

    Masked positions get exactly 0; a slice with no valid position is all zeros (not NaN). Invalid entries get −inf
    only in slices that have a valid entry, so `exp` never sees a fill value that could overflow (−inf is exact in
    every precision and gives exactly 0); a slice with no valid entry keeps its raw scores, and the final
    multiplication by the mask zeroes it and its gradient.

    The −inf is added, not written: `fill` has the mask's (small) shape, 0 where kept and −inf where masked, and
    `scores + fill` is one vectorised pass whose gradient is the incoming one as it is, where `masked_fill` costs a
    non-vectorised pass forward and another backward. Every finite score comes out the same (x + 0 = x), but a −0.0
    becomes +0.0, and a masked position passes back the zero (of either sign) that the softmax gives it instead of
    +0.0: no non-zero number of the weights or of any gradient differs.

    `zero` (broadcastable to `scores`, boolean or 0/1 numbers; default `mask`) is what the result is multiplied by.
    An aligner passes the small mask of the side it normalises over, e.g. (B, 1, Lb) for dim=2, and the (B, La, Lb)
    pair mask as `zero`: the fill is then computed on the small mask instead of three passes over a (B, La, Lb) one,
    with the same result (a padding row of a is zeroed by `zero` either way).
    """
    fill = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
    fill.masked_fill_(~mask & mask.any(dim, keepdim=True), float("-inf"))
    return softmax(scores + fill, dim) * (mask if zero is None else zero)


def softmax(x: Tensor, dim: int) -> Tensor:
    """torch.softmax(x, dim), the same numbers forward and backward, with a faster backward on a CPU for a last
    dimension shorter than the CPU's vector (16 floats with AVX-512, 8 with AVX2).

    PyTorch's CPU kernel computes such a row's gradient element by element (for each row, Σ_k g_k·y_k summed in order,
    then (g − Σ)·y): 150 µs for (64, 23, 14) scores, 25 % of a small softmax model's backward. ShortRowSoftmax does the
    same arithmetic in the same order for all rows at once, in about 60 µs; `tests/test_layers.py` checks it bit for
    bit against PyTorch's on every length and both kernels. (The forward cannot be done so: its exponential is SLEEF's,
    which no PyTorch operation on float32 exposes; `torch.exp` is MKL's and rounds differently.)
    """
    if is_compiling() or torch.jit.is_tracing() or not (x.requires_grad and torch.is_grad_enabled()):
        return torch.softmax(x, dim)  # first: a compiled model's graph and an export see PyTorch's softmax only
    if x.device.type == "cpu" and x.dtype == torch.float32 and dim in (-1, x.dim() - 1) and x.numel() > 0:
        if x.shape[-1] < _float_lanes():
            return ShortRowSoftmax.apply(x)
    return torch.softmax(x, dim)


@functools.cache
def _float_lanes() -> int:
    """The float32 lanes of the CPU kernels PyTorch runs here (ATEN_CPU_CAPABILITY), 0 where ShortRowSoftmax is not
    known to match them."""
    return {"AVX512": 16, "AVX2": 8}.get(get_cpu_capability(), 0)


class ShortRowSoftmax(torch.autograd.Function):
    """torch.softmax over the last dimension, whose backward repeats the arithmetic of PyTorch's CPU kernel for rows
    shorter than its vector width (see `softmax`): the products g·y, their sum per row in the kernel's order (the
    first product, plus the second, plus the third...), then (g − sum)·y, each step vectorised across rows."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        products = (grad * y).unbind(-1)
        total = products[0] if len(products) == 1 else products[0] + products[1]
        for column in products[2:]:
            total += column
        return (grad - total.unsqueeze(-1)) * y


def masked_mean(values: Tensor, mask: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Mean of `values` over `dims`, counting only positions where `mask` is True (keepdim=True); the sums are in
    float32 at least, so the counts stay exact under autocast (bf16 counts whole numbers exactly only to 256).
    `mask` may already be that 0/1 float tensor (then it is not converted again)."""
    mask = mask.expand_as(values).to(torch.promote_types(values.dtype, torch.float32))
    total = (values * mask).sum(dims, keepdim=True)
    return total / mask.sum(dims, keepdim=True).clamp_min(1.0)


def center_over_pair(a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor) -> tuple[Tensor, Tensor]:
    """Token centring, the design choice `center_tokens` of every aligner: (B, La, D) and (B, Lb, D) minus the pair's
    mean vector over the valid tokens of both sides (one (B, 1, D) mean per example; padding neither counts nor
    moves it). A constant offset in every token's vector, such as the bias c of a projection Px + c, leaves the
    result unchanged, so no score built from it carries the offset's terms (‖c‖², cᵀPx_i, cᵀPx_j). The mean is taken
    in float32 at least and each side keeps its dtype. Padding positions come out shifted, not zero: every aligner
    masks them itself."""
    wide = torch.promote_types(a.dtype, torch.float32)
    weight_a, weight_b = mask_a.unsqueeze(-1).to(wide), mask_b.unsqueeze(-1).to(wide)
    total = (a.to(wide) * weight_a).sum(1, keepdim=True) + (b.to(wide) * weight_b).sum(1, keepdim=True)
    mean = total / (weight_a.sum(1, keepdim=True) + weight_b.sum(1, keepdim=True)).clamp_min(1.0)  # (B, 1, D)
    return a - mean.to(a.dtype), b - mean.to(b.dtype)


def per_token(module: nn.Module, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """`module` (a position-wise net) applied to both (B, La, D) and (B, Lb, D) sides in one call: one kernel per
    layer instead of two. Returns views of one (B, La + Lb, D') output (see `split_sides`)."""
    if isinstance(module, nn.Identity):
        return a, b
    return split_sides(module(torch.cat([a, b], dim=1)), a.shape[1])


def split_sides(x: Tensor, la: int) -> tuple[Tensor, Tensor]:
    """(B, La + Lb, ...) -> views (B, La, ...) and (B, Lb, ...). One split, not two slices: backward, the two
    gradients are concatenated once, where each slice would write its gradient into a zero tensor of x's size and
    the two would then be added (the same numbers; only the sign of a zero can differ)."""
    a, b = x.split([la, x.shape[1] - la], dim=1)
    return a, b
