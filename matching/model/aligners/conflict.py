"""Conflict attention (Mitra 2019): weights that favour the most dissimilar tokens, alone or beside softmax's."""

from __future__ import annotations

import torch
from torch import nn

from matching.errors import ConfigError
from matching.model.aligners.base import Aligner
from matching.model.aligners.dot import SoftmaxAligner
from matching.model.aligners.weightings import CAPTIONS, WEIGHTINGS
from matching.model.layers import Dropout, center_over_pair

CAPTIONS["conflict"] = CAPTIONS["softmax"]  # a softmax of conflict scores


class ConflictAligner(Aligner):
    """Conflict attention (Mitra 2019, eq. 7–9): weights that favour the most *dissimilar* tokens.

    u'_i = tanh(W_u a_i), v'_j = tanh(W_v b_j), then a score c_ij per token pair and a masked softmax over j
    (a_aligned) and over i (b_aligned). `score` chooses c_ij:

    - "l1" (default): c_ij = Σ_k w_k·|u'_ik − v'_jk|, a learned weighting of the element-wise difference, so
      "softmax applied on them can produce high probability to more dissimilar word pairs" (the paper's intent).
      w = w⁺ − w⁻ (both ≥ 0), so c = ‖w⁺u'_i − w⁺v'_j‖₁ − ‖w⁻u'_i − w⁻v'_j‖₁: two `cdist`s, no (B, La, Lb, H)
      tensor. w starts at 1/H (all positive: larger distance, larger weight).
    - "literal": eq. 7 as printed, c_ij = w_sᵀ(u'_i − v'_j). It is linear in the difference, so it equals
      s(a_i) − s(b_j) with s(x) = w_sᵀ tanh(W x): the softmax over j cancels s(a_i), every a_i receives the
      same weights (the same pooled vector of b) and every b_j likewise. Kept for ablation only.

    `center_tokens` centres the inputs a, b over the pair before W_u and W_v (module docstring): u' and v' are
    projections of their own, so a shift common to both would cancel in u'_i − v'_j anyway; an offset c in the
    inputs does not, it moves the two sides' pre-activations by W_u c and W_v c, apart.
    """

    SCORES = ("l1", "literal")

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        score: str = "l1",
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, output_gate)
        self.center_tokens = center_tokens
        if score not in self.SCORES:
            raise ConfigError(f"unknown conflict score {score!r}; choose one of {list(self.SCORES)}")
        self.score_kind = score
        self.dropout = Dropout(dropout)
        self.project_a = nn.Linear(dim, hidden)  # W_u
        self.project_b = nn.Linear(dim, hidden)  # W_v
        self.score = nn.Linear(hidden, 1, bias=False)  # w_s
        if score == "l1":
            nn.init.constant_(self.score.weight, 1.0 / hidden)

    def align(self, a, b, mask_a, mask_b, score_bias):
        xa, xb = center_over_pair(a, b, mask_a, mask_b) if self.center_tokens else (a, b)
        u = torch.tanh(self.project_a(self.dropout(xa)))  # (B, La, H)
        v = torch.tanh(self.project_b(self.dropout(xb)))  # (B, Lb, H)
        if self.score_kind == "l1":
            w = self.score.weight.squeeze(0)  # (H,)
            pos, neg = w.clamp_min(0), (-w).clamp_min(0)
            # in float32 at least, as CoDA's N: cdist has no bf16 kernel on a CPU (dtype=bf16, or auto on a CPU
            # with bf16 arithmetic)
            wide = torch.promote_types(u.dtype, torch.float32)
            u, v, pos, neg = u.to(wide), v.to(wide), pos.to(wide), neg.to(wide)
            c = torch.cdist(u * pos, v * pos, p=1) - torch.cdist(u * neg, v * neg, p=1)  # (B, La, Lb)
        else:
            c = self.score(u).squeeze(-1).unsqueeze(2) - self.score(v).squeeze(-1).unsqueeze(1)  # (B, La, Lb)
        if score_bias is not None:
            c = c + score_bias
        weights_a, weights_b = WEIGHTINGS["softmax"].both_ways(self, c, mask_a, mask_b, {})
        return self.products(weights_a, weights_b, a, b, {"conflict_a": weights_a, "conflict_b": weights_b})


class SoftmaxConflictAligner(Aligner):
    """Attention and conflict side by side (conflict paper eq. 11): compare sees [a_i; β_att; β_conf].
    `center_tokens` centres both, each where it applies."""

    copies = 2

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "parikh",
        score: str = "l1",
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, output_gate)  # one gate over [β_att; β_conf]
        self.center_tokens = center_tokens
        self.attention = SoftmaxAligner(dim, hidden, dropout, projection=projection, center_tokens=center_tokens)
        self.conflict = ConflictAligner(dim, hidden, dropout, score=score, center_tokens=center_tokens)

    def align(self, a, b, mask_a, mask_b, score_bias):
        att = self.attention(a, b, mask_a, mask_b, score_bias)
        conf = self.conflict(a, b, mask_a, mask_b, score_bias)
        return att._replace(
            a_aligned=torch.cat([att.a_aligned, conf.a_aligned], dim=-1),
            b_aligned=torch.cat([att.b_aligned, conf.b_aligned], dim=-1),
            matrices={**att.matrices, **conf.matrices},
        )
