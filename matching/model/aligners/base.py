"""What every aligner shares: the `Alignment` it returns, the template `Aligner` (the input check, the output gate,
the value products), the `OutputGate` and the score function F of the aligners that project their tokens."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from matching.errors import ConfigError
from matching.model.layers import Dropout, FeedForward


class Alignment(NamedTuple):
    a_aligned: Tensor  # (B, La, copies·D)
    b_aligned: Tensor  # (B, Lb, copies·D)
    matrices: dict[str, Tensor]  # name -> (B, La, Lb)


class Aligner(nn.Module):
    """The template of every aligner: `forward(a, b, mask_a, mask_b, score_bias=None) -> Alignment` checks the inputs,
    calls `align` (what a subclass writes) and applies the output gate, if the aligner has one. `products` is the
    value products every weighted aligner ends with. An aligner of one's own may override `forward` itself instead
    (then it checks and gates as it likes).

    `copies` is how many D-wide aligned vectors each position receives.
    """

    copies: int = 1

    def __init__(self, dim: int, output_gate: bool = False):
        super().__init__()
        if dim <= 0:
            raise ConfigError(f"{type(self).__name__} needs a positive input dimension, got {dim}")
        self.dim = dim
        self.output_gate = OutputGate(dim, self.copies * dim) if output_gate else None

    def learned_constants(self) -> dict[str, float]:
        """The learned scalars that shape this aligner's weights, by name, as numbers (a study's weights table prints
        them beside the shares of its weights): none for most aligners; differential attention's λ, scalable-softmax's
        s, the learned temperature τ of `aligner=attention distribution=temperature`."""
        return {}

    def forward(self, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor, score_bias: Tensor | None = None):
        self._check(a, b, mask_a, mask_b)
        return self._gated(self.align(a, b, mask_a, mask_b, score_bias), a, b)

    def align(self, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor, score_bias: Tensor | None) -> Alignment:
        """The ungated alignment of checked inputs (see the package docstring)."""
        raise NotImplementedError

    @staticmethod
    def products(weights_a: Tensor, weights_b: Tensor, a: Tensor, b: Tensor, matrices: dict[str, Tensor]) -> Alignment:
        """a_aligned = W_a b (B, La, D) and b_aligned = W_bᵀ a (B, Lb, D), for (B, La, Lb) weights each way. Weights
        wider than the values (a float32 distribution or distance under bf16) enter the products in the values' dtype.
        """
        a_aligned = torch.bmm(weights_a.to(b.dtype), b)  # (B, La, D)
        b_aligned = torch.bmm(weights_b.transpose(1, 2).to(a.dtype), a)  # (B, Lb, D)
        return Alignment(a_aligned, b_aligned, matrices)

    def _gated(self, alignment: Alignment, a: Tensor, b: Tensor) -> Alignment:
        """The alignment with each token's aligned vector multiplied by its output gate (if the aligner has one)."""
        if self.output_gate is None:
            return alignment
        return alignment._replace(
            a_aligned=self.output_gate(alignment.a_aligned, a), b_aligned=self.output_gate(alignment.b_aligned, b)
        )

    def _check(self, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor) -> None:
        if torch.jit.is_tracing():  # export traces fixed, valid shapes; the checks would be traced as constants
            return
        if a.shape[-1] != self.dim or b.shape[-1] != self.dim:
            raise ValueError(
                f"{type(self).__name__} was built for {self.dim}-d inputs but got a {tuple(a.shape)}, "
                f"b {tuple(b.shape)}"
            )
        if mask_a.shape != a.shape[:2] or mask_b.shape != b.shape[:2]:
            raise ValueError(
                f"masks {tuple(mask_a.shape)}, {tuple(mask_b.shape)} do not match inputs "
                f"{tuple(a.shape[:2])}, {tuple(b.shape[:2])}"
            )


class OutputGate(nn.Module):
    """The output gate of gated attention (Qiu et al. 2025, arXiv 2505.06708, the SDPA output gate G1): what a token
    receives, multiplied element-wise by a sigmoid of the token's own vector, β_i ← β_i ⊙ σ(W_g a_i) and
    α_j ← α_j ⊙ σ(W_g b_j), one W_g for both sides as Decomposable Attention shares F and G between them. W_g has no
    bias, as the paper's σ(XW_θ): the model's own projection already gives a_i a learned offset. Each factor lies in
    (0, 1), so the gate can only scale down, towards "receive nothing"; being query-dependent and non-linear is what
    the paper credits for its gain. It leaves the weights alone: the matrices are the ungated aligner's."""

    def __init__(self, dim: int, width: int):
        super().__init__()
        self.linear = nn.Linear(dim, width, bias=False)  # W_g

    def forward(self, aligned: Tensor, x: Tensor) -> Tensor:
        return aligned * torch.sigmoid(self.linear(x))  # (B, L, width): the token's aligned vector, gated


#: The score function F of an aligner (F_E and F_N for CoDA), by config name.
PROJECTIONS = {
    "parikh": "Parikh's F: two layers, ReLU after each (outputs ≥ 0, so every dot product F(a_i)ᵀF(b_j) ≥ 0)",
    "linear": "one linear layer without bias (a bias b would add the constant ‖b‖² to every score)",
    "none": "the identity: scores on the model's projected word vectors, shared with the rest of the model",
}


def projection(dim: int, hidden: int, dropout: float, kind: str) -> tuple[nn.Module, int]:
    """The module named by `kind` (see PROJECTIONS) and its output width."""
    if kind == "parikh":
        return FeedForward(dim, hidden, dropout), hidden
    if kind == "linear":
        return nn.Sequential(Dropout(dropout), nn.Linear(dim, hidden, bias=False)), hidden
    if kind == "none":
        return nn.Identity(), dim
    raise ConfigError(f"unknown projection {kind!r}; choose one of {list(PROJECTIONS)}")


def score_scale(width: int, scale: bool) -> float:
    """What `scale` multiplies the scores by: 1/√d for the projection's width d, or 1."""
    return 1.0 / math.sqrt(width) if scale else 1.0
