"""Differential attention as an aligner: two softmaxes of two projections' scores, the second subtracted."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from matching.errors import ConfigError
from matching.model.aligners import base
from matching.model.aligners.base import Aligner
from matching.model.aligners.dot import dot_scores, project_pair
from matching.model.aligners.weightings import CAPTIONS, WEIGHTINGS, Caption

CAPTIONS["differential"] = Caption("softmax(E¹) − λ·softmax(E²)", "signed; each {whose} sums to 1 − λ", (-1.0, 1.0))
# W lies in [−λ, 1] for 0 ≤ λ ≤ 1 (λ is learned: a run's own is not known from its config), drawn as signed.


class DifferentialAligner(Aligner):
    """Differential attention (Ye et al. 2025, arXiv 2410.05258, eq. 1–2) as an aligner:

    E^k_ij = F_k(a_i)ᵀF_k(b_j), k = 1, 2     two projections of F (the paper's [Q₁; Q₂], [K₁; K₂])
    W_a = softmax_j(E¹) − λ·softmax_j(E²),  W_b the same over i;   a_aligned = W_a b,  b_aligned = W_bᵀ a
    λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init   (the paper's re-parametrisation; λ vectors ~ N(0, 0.1²))

    λ_init = 0.8 − 0.6·exp(−0.3·(l − 1)) for layer l; Decomposable Attention aligns once, a first layer: 0.2. A row's
    weights sum to 1 − λ and take both signs: the second map can subtract what the first adds (the paper's "noise
    cancelling"). Left out: heads (one alignment, as every aligner here), the per-head GroupNorm and the (1 − λ_init)
    factor that follows it (normalising β_i would throw away its norm, which says how much a token received; G
    learns its own scale); docs/concepts/aligners.md says why. `projection` must give two different maps: "linear" (the
    paper's, default) or "parikh"; "none" would make E¹ = E² and W = (1 − λ)·softmax(E), and is refused.
    `center_tokens` centres F₁ and F₂ over the pair, as softmax's F.
    """

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "linear",
        scale: bool = False,
        lambda_init: float = 0.2,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, output_gate)
        if projection == "none":
            raise ConfigError(
                "aligner=differential subtracts the softmax of one projection's scores from another's: "
                "aligner.projection=none would make the two the same map and the weights (1 − λ)·softmax(E), a scaled "
                "softmax; choose aligner.projection=linear (the paper's two projections, the default) or parikh"
            )
        self.project_1, width = base.projection(dim, hidden, dropout, projection)  # F₁
        self.project_2, _ = base.projection(dim, hidden, dropout, projection)  # F₂
        self.scale = base.score_scale(width, scale)
        self.center_tokens = center_tokens
        self.lambda_init = lambda_init
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.zeros(width).normal_(mean=0.0, std=0.1)) for _ in range(4)
        )

    def weight_lambda(self) -> Tensor:
        """λ, a 0-dim tensor (its re-parametrisation, eq. 2)."""
        first = torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
        second = torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
        return first - second + self.lambda_init

    def learned_constants(self) -> dict[str, float]:
        """λ (nothing bounds it: below 0, the second softmax is added to the first, not subtracted)."""
        return {"λ": self.weight_lambda().item()}

    def align(self, a, b, mask_a, mask_b, score_bias):
        first, second = (  # E¹, E²
            dot_scores(*project_pair(project, a, b, mask_a, mask_b, self.center_tokens), self.scale, score_bias)
            for project in (self.project_1, self.project_2)
        )
        softmax = WEIGHTINGS["softmax"]
        first_a, first_b = softmax.both_ways(self, first, mask_a, mask_b, {})
        second_a, second_b = softmax.both_ways(self, second, mask_a, mask_b, {})
        lam = self.weight_lambda().to(first_a.dtype)
        weights_a, weights_b = first_a - lam * second_a, first_b - lam * second_b  # (B, La, Lb), 0 on padding
        return self.products(weights_a, weights_b, a, b, {"differential_a": weights_a, "differential_b": weights_b})
