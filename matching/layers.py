"""Building blocks shared by the model and the aligners: the feed-forward net and masked reductions.

Masks are boolean, True on real tokens. Padding is removed by multiplying with the mask, never by filling
with huge negative numbers, so every function here is safe in half precision (bf16/fp16).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class FeedForward(nn.Sequential):
    """Parikh et al.'s F, G and H: `layers` × (dropout → linear → ReLU)."""

    def __init__(self, in_dim: int, hidden: int, dropout: float = 0.2, layers: int = 2):
        if in_dim <= 0 or hidden <= 0 or layers <= 0:
            raise ValueError(f"FeedForward needs positive sizes, got in_dim={in_dim} hidden={hidden} layers={layers}")
        blocks: list[nn.Module] = []
        for i in range(layers):
            blocks += [nn.Dropout(dropout), nn.Linear(in_dim if i == 0 else hidden, hidden), nn.ReLU()]
        super().__init__(*blocks)
        self.in_dim, self.out_dim = in_dim, hidden


def pair_mask(mask_a: Tensor, mask_b: Tensor) -> Tensor:
    """(B, La), (B, Lb) -> (B, La, Lb): True where both positions are real tokens."""
    return mask_a.unsqueeze(2) & mask_b.unsqueeze(1)


def masked_softmax(scores: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Softmax over `dim` restricted to positions where `mask` (broadcastable to `scores`) is True.

    Masked positions get exactly 0; a slice with no valid position is all zeros (not NaN). The max used for
    numerical stability is taken over valid entries only, so no fill value ever reaches `exp`.
    """
    mask = mask.expand_as(scores)
    valid_any = mask.any(dim, keepdim=True)
    shift = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).amax(dim, keepdim=True)
    shift = torch.where(valid_any, shift, torch.zeros_like(shift)).detach()
    exp = torch.exp((scores - shift).masked_fill(~mask, 0.0)) * mask
    return exp / exp.sum(dim, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)


def masked_mean(values: Tensor, mask: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Mean of `values` over `dims`, counting only positions where `mask` is True (keepdim=True)."""
    mask = mask.expand_as(values).to(values.dtype)
    total = (values * mask).sum(dims, keepdim=True)
    return total / mask.sum(dims, keepdim=True).clamp_min(1.0)


def masked_sum(values: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Sum of (B, L, D) `values` over L, excluding padding; mask is (B, L)."""
    return (values * mask.unsqueeze(-1).to(values.dtype)).sum(dim)
