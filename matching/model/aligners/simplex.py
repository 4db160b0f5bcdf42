"""Projections onto the simplex, the sparse distributions of the weightings: sparsemax (Martins & Astudillo 2016) and
α-entmax (Peters, Niculae & Martins 2019), exact by sorting (α = 2, 1.5) or by bisection (any α > 1), with exact
gradients. Each takes scores and the dimension to normalise over; −∞ entries get weight 0."""

from __future__ import annotations

import torch
from torch import Tensor


def _sorted_support(z: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """z sorted in decreasing order along `dim`, and the ranks 1..n shaped to broadcast along it."""
    z_sorted = torch.sort(z, dim=dim, descending=True).values
    ranks = torch.arange(1, z.shape[dim] + 1, device=z.device, dtype=z.dtype)
    shape = [1] * z.dim()
    shape[dim] = -1
    return z_sorted, ranks.view(shape)


def sparsemax(z: Tensor, dim: int) -> Tensor:
    """The Euclidean projection of z onto the probability simplex (Martins & Astudillo 2016): p = [z − τ]₊ with
    τ such that Σp = 1; −∞ entries get 0. Exact, by sorting; gradients by autograd through the selected support."""
    z_sorted, k = _sorted_support(z, dim)
    cumulative = z_sorted.cumsum(dim)
    support = (1 + k * z_sorted > cumulative) & torch.isfinite(z_sorted)
    size = support.sum(dim=dim, keepdim=True).clamp_min(1)
    tau = (cumulative.gather(dim, size - 1) - 1) / size.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def entmax15(z: Tensor, dim: int) -> Tensor:
    """1.5-entmax (Peters, Niculae & Martins 2019): p = [z/2 − τ]₊², Σp = 1; exact, by sorting (their Algorithm 2);
    −∞ entries get 0. The gradient is entmax's closed form (`entmax_backward`), not autograd through the sort: that
    path takes √ of the threshold's discriminant, whose derivative is infinite where the discriminant is 0, and
    0 · ∞ made a WikiQA run's loss NaN at its 950th step."""
    return _Entmax15.apply(z, dim)


def _entmax15_forward(z: Tensor, dim: int) -> Tensor:
    x = z / 2
    x_sorted, k = _sorted_support(x, dim)
    finite = torch.isfinite(x_sorted)
    x_sorted = torch.where(finite, x_sorted, torch.zeros_like(x_sorted))
    mean = x_sorted.cumsum(dim) / k
    mean_sq = (x_sorted**2).cumsum(dim) / k
    delta = (1 - k * (mean_sq - mean**2)) / k
    tau = mean - torch.sqrt(delta.clamp_min(0))
    support = (tau <= x_sorted) & finite
    size = support.sum(dim=dim, keepdim=True).clamp_min(1)
    tau_star = tau.gather(dim, size - 1)
    return torch.clamp(x - tau_star, min=0) ** 2


def entmax_backward(p: Tensor, grad: Tensor, alpha: float, dim: int) -> Tensor:
    """The exact gradient of α-entmax at its output p: on the support, dz = s ⊙ (g − (sᵀg)/Σs) with s = p^{2−α}
    (Peters et al. 2019, Proposition 1); 0 off the support."""
    s = torch.where(p > 0, p.pow(2 - alpha), torch.zeros_like(p))
    dz = grad * s
    return dz - s * dz.sum(dim=dim, keepdim=True) / s.sum(dim=dim, keepdim=True).clamp_min(1e-30)


class _Entmax15(torch.autograd.Function):
    """1.5-entmax by sorting forward, its closed-form gradient backward."""

    @staticmethod
    def forward(ctx, z: Tensor, dim: int) -> Tensor:
        p = _entmax15_forward(z, dim)
        ctx.save_for_backward(p)
        ctx.dim = dim
        return p

    @staticmethod
    def backward(ctx, grad: Tensor):
        (p,) = ctx.saved_tensors
        return entmax_backward(p, grad, 1.5, ctx.dim), None


class _EntmaxBisect(torch.autograd.Function):
    """α-entmax for any α > 1 by bisection on τ (Blondel et al. 2019): p = [(α−1)z − τ]₊^{1/(α−1)}, Σp = 1, with
    its exact backward (`entmax_backward`)."""

    @staticmethod
    def forward(ctx, z: Tensor, alpha: float, dim: int, iterations: int) -> Tensor:
        x = z * (alpha - 1)
        top = x.max(dim=dim, keepdim=True).values
        low, high = top - 1.0, top  # p(τ = top − 1) sums to ≥ 1, p(τ = top) to 0
        power = 1.0 / (alpha - 1)
        for _ in range(iterations):
            tau = (low + high) / 2
            total = torch.clamp(x - tau, min=0).pow(power).sum(dim=dim, keepdim=True)
            above = total >= 1
            low, high = torch.where(above, tau, low), torch.where(above, high, tau)
        p = torch.clamp(x - (low + high) / 2, min=0).pow(power)
        p = p / p.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)
        ctx.save_for_backward(p)
        ctx.alpha, ctx.dim = alpha, dim
        return p

    @staticmethod
    def backward(ctx, grad: Tensor):
        (p,) = ctx.saved_tensors
        return entmax_backward(p, grad, ctx.alpha, ctx.dim), None, None, None


def entmax(z: Tensor, dim: int, alpha: float = 1.5, iterations: int = 50) -> Tensor:
    """α-entmax: α → 1 is softmax, α = 2 sparsemax; α = 1.5 and 2 take the exact sorting algorithms, others bisect
    (50 halvings of an interval of width 1: τ to ~1e-15, below float32's resolution). −∞ entries get 0."""
    if alpha == 2:
        return sparsemax(z, dim)
    if alpha == 1.5:
        return entmax15(z, dim)
    finite = torch.isfinite(z)
    return _EntmaxBisect.apply(torch.where(finite, z, torch.full_like(z, -1e4)), alpha, dim, iterations) * finite
