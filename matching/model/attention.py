"""Attention from parts: the alignment design space of Galassi et al.'s survey ("Attention in Natural Language
Processing", IEEE TNNLS 2021), as an aligner of Decomposable Attention.

An attention aligner is a **compatibility function** (the survey's Table 3: how a_i and b_j score), a
**distribution function** (§3.3: how a row of scores becomes weights) and a **multiplicity** (§3.4: one distribution,
several heads, or one per feature), chosen by config:

    aligner=attention aligner.score=additive aligner.distribution=sparsemax aligner.heads=4

With K heads the D features of a and b are split into K groups; head k scores with its own part (its slice of the
features for the dot family, its own output for the additive family) and aligns its own slice of the features of
the other sentence, so a_aligned is still D wide. `heads=D` is feature-wise (multi-dimensional) attention: one
distribution per feature (Shen et al. 2018, DiSAN). As everywhere (matching/model/aligners/), each side is normalised
over the other's real tokens, padding gets weight 0, and rows and columns of padding are 0. The distributions are the
one registry of weightings the dot aligners use too (matching/model/aligners/weightings.py): cog, softpick and ssmax
work with every compatibility function and head count, and so does a weighting of one's own, by its import path.

`aligner=attention` with score=dot, distribution=softmax and heads=1 computes what `aligner=softmax
aligner.projection=none` does; the SoftmaxAligner stays its own class, so that its seeds keep their numbers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from matching.errors import ConfigError
from matching.model.aligners import Aligner, Alignment
from matching.model.aligners.simplex import entmax, entmax15, entmax_backward, sparsemax
from matching.model.aligners.weightings import WEIGHTINGS, Distribution, find
from matching.model.layers import Dropout, center_over_pair, pair_mask

__all__ = ["DISTRIBUTIONS", "SCORES", "AttentionAligner", "Distribution", "entmax", "entmax15",
           "entmax_backward", "head_products", "sparsemax"]  # fmt: skip

# ------------------------------------------------------------------------------------------ compatibility


def head_products(x: Tensor, y: Tensor) -> Tensor:
    """x @ y per head, (B, K, M, d) @ (B, K, d, N) -> (B, K, M, N). With one feature per head (feature-wise
    attention, d = 1) or one output column (N = 1), as a broadcast product and sum: a batched matrix product of
    B·K matrices one column wide runs as one small product after another (benchmarks/bench_aligners.py: the
    feature-wise step at WikiQA's shape 1.3x faster so; most of its time is the elementwise work on the
    (B, D, La, Lb) weights, which no product avoids)."""
    if x.shape[-1] == 1:
        return x * y  # the outer product of a column and a row
    if y.shape[-1] == 1:
        return (x * y.transpose(-1, -2)).sum(-1, keepdim=True)
    return x @ y


class Compatibility(nn.Module):
    """Scores of every token pair, per head: (B, La, D), (B, Lb, D) -> (B, K, La, Lb)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.dim, self.heads = dim, heads

    def split(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, K, L, D/K): head k's slice of the features."""
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)


class Dot(Compatibility):
    """f(a_i, b_j) = a_iᵀb_j (Luong et al. 2015, "dot")."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return head_products(self.split(a), self.split(b).transpose(-1, -2))


class ScaledDot(Dot):
    """f(a_i, b_j) = a_iᵀb_j / √d, d the width of a head (Vaswani et al. 2017)."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return super().forward(a, b) / math.sqrt(self.dim // self.heads)


class Similarity(Compatibility):
    """f(a_i, b_j) = cos(a_i, b_j) (Graves et al. 2014, "similarity"), per head; a zero vector scores 0."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        a, b = (nn.functional.normalize(self.split(x), dim=-1, eps=1e-6) for x in (a, b))
        return a @ b.transpose(-1, -2)


class General(Compatibility):
    """f(a_i, b_j) = a_iᵀ W b_j, bilinear (Luong et al. 2015, "general"); W block-diagonal over the heads.
    `bias`: a_iᵀ(W b_j + w) ("biased general", Sordoni et al. 2016). `activation`: tanh(a_iᵀ W b_j + c)
    ("activated general", Ma et al. 2017)."""

    def __init__(self, dim: int, heads: int, bias: bool = False, activation: bool = False):
        super().__init__(dim, heads)
        width = dim // heads
        self.weight = nn.Parameter(torch.empty(heads, width, width))
        nn.init.normal_(self.weight, std=1.0 / math.sqrt(width))
        self.bias = nn.Parameter(torch.zeros(heads, 1, width)) if bias else None  # w
        self.offset = nn.Parameter(torch.zeros(heads, 1, 1)) if activation else None  # c
        self.activation = activation

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        wb = self.split(b) @ self.weight.transpose(-1, -2)  # (B, K, Lb, d): W b_j
        if self.bias is not None:
            wb = wb + self.bias
        scores = head_products(self.split(a), wb.transpose(-1, -2))  # (B, K, La, Lb)
        return torch.tanh(scores + self.offset) if self.activation else scores


class BiasedGeneral(General):
    def __init__(self, dim: int, heads: int):
        super().__init__(dim, heads, bias=True)


class ActivatedGeneral(General):
    def __init__(self, dim: int, heads: int):
        super().__init__(dim, heads, activation=True)


class Additive(Compatibility):
    """f(a_i, b_j) = w_kᵀ tanh(W₁a_i + W₂b_j + c) per head k (Bahdanau et al. 2015, "additive"). The survey's
    "concat", w_kᵀ tanh(W[a_i; b_j] + c), is the same function (W[a; b] = W₁a + W₂b). `layers` > 1 is "deep"
    (Pavlopoulos et al. 2017): more tanh layers before w. It builds a (B, La, Lb, H) tensor: memory grows with
    La·Lb·H, which `hidden` bounds."""

    def __init__(self, dim: int, heads: int, hidden: int = 200, layers: int = 1, dropout: float = 0.0):
        super().__init__(dim, heads)
        self.first_a = nn.Linear(dim, hidden)  # W₁ and c
        self.first_b = nn.Linear(dim, hidden, bias=False)  # W₂
        self.deeper = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers - 1))
        self.dropout = Dropout(dropout)
        self.out = nn.Linear(hidden, heads, bias=False)  # one w per head

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        pa, pb = self.first_a(a), self.first_b(b)  # (B, La, H), (B, Lb, H)
        hidden = torch.tanh(pa.unsqueeze(2) + pb.unsqueeze(1))  # (B, La, Lb, H)
        for layer in self.deeper:
            hidden = torch.tanh(layer(self.dropout(hidden)))
        return self.out(hidden).permute(0, 3, 1, 2)  # (B, K, La, Lb)


class Deep(Additive):
    def __init__(self, dim: int, heads: int, hidden: int = 200, dropout: float = 0.0):
        super().__init__(dim, heads, hidden, layers=2, dropout=dropout)


#: The compatibility functions by config name (survey, Table 3).
SCORES: dict[str, type[Compatibility]] = {
    "dot": Dot, "scaled_dot": ScaledDot, "similarity": Similarity, "general": General,
    "biased_general": BiasedGeneral, "activated_general": ActivatedGeneral, "additive": Additive, "concat": Additive,
    "deep": Deep,
}  # fmt: skip


# ------------------------------------------------------------------------------------------- distribution

#: The distribution functions by config name (survey §3.3): the one registry of weightings, which the dot aligners
#: share (matching/model/aligners/weightings.py): softmax, temperature, sigmoid, sparsemax, entmax, cog, softpick, ssmax
#: and any registered function (by its import path).
DISTRIBUTIONS = WEIGHTINGS


# ---------------------------------------------------------------------------------------------- aligner


class AttentionAligner(Aligner):
    """An aligner from parts (see the module docstring): `score` (SCORES), `distribution` (DISTRIBUTIONS), `heads`
    (a divisor of the input width; `feature_wise=true` sets it to the width). `alpha` is entmax's α, `hidden` the
    width of the additive and deep scores. `center_tokens`: every score function compares a and b minus the pair's
    mean token (matching/model/aligners/); the aligned vectors stay sums of a and b as given. `output_gate`: the
    gate of every aligner (matching/model/aligners/base.py, OutputGate). Other keywords are the distribution's options
    (softpick's `eps`, ssmax's `s_init`, temperature's start). Matrices for plots: the weights of each side, averaged
    over heads."""

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        score: str = "dot",
        distribution: str = "softmax",
        heads: int = 1,
        feature_wise: bool = False,
        alpha: float = 1.5,
        center_tokens: bool = False,
        output_gate: bool = False,
        **options,
    ):
        super().__init__(dim, output_gate)
        self.center_tokens = center_tokens
        if score not in SCORES:
            raise ConfigError(f"unknown aligner.score {score!r}; choose one of {sorted(SCORES)}")
        try:
            weighting = find(distribution)
        except ConfigError as error:
            raise ConfigError(f"unknown aligner.distribution {distribution!r}; choose one of {sorted(DISTRIBUTIONS)} "
                              f"({error})") from None  # fmt: skip
        heads = dim if feature_wise else heads
        if heads < 1 or dim % heads:
            raise ConfigError(f"aligner.heads={heads} must divide the aligned vectors' width {dim} (model.hidden)")
        self.heads = heads
        if score in ("additive", "concat", "deep"):
            self.score = SCORES[score](dim, heads, hidden=hidden, dropout=dropout)
        else:
            self.score = SCORES[score](dim, heads)
        self.distribution = Distribution(
            distribution, **options, **({"alpha": alpha} if "alpha" in weighting.options else {})
        )
        self.dropout = Dropout(dropout) if score not in ("additive", "concat", "deep") else nn.Identity()

    def learned_constants(self) -> dict[str, float]:
        """The distribution's learned scalars (the temperature τ, ssmax's s); none for the others."""
        return self.distribution.weighting.constants(self.distribution)

    def align(self, a, b, mask_a, mask_b, score_bias):
        xa, xb = center_over_pair(a, b, mask_a, mask_b) if self.center_tokens else (a, b)
        scores = self.score(self.dropout(xa), self.dropout(xb))  # (B, K, La, Lb)
        if score_bias is not None:
            scores = scores + score_bias
        rows = self.distribution(scores, mask_b[:, None, None, :], dim=3)  # each a_i over b
        columns = self.distribution(scores, mask_a[:, None, :, None], dim=2)  # each b_j over a
        # The weights are 0 on the other side's padding; a padding token's own row (or column) is zeroed in what it
        # yields, the (B, L, D) aligned vectors and the (B, La, Lb) matrices, not in the (B, K, La, Lb) weights:
        # the same numbers and gradients, and two passes fewer over the largest tensor (K = D when feature-wise).
        split, dtype = self.score.split, rows.dtype
        a_aligned = head_products(rows, split(b)).transpose(1, 2).flatten(2)  # (B, La, D): head k aligns its features
        b_aligned = head_products(columns.transpose(-1, -2), split(a)).transpose(1, 2).flatten(2)  # (B, Lb, D)
        a_aligned, b_aligned = a_aligned * mask_a.unsqueeze(-1).to(dtype), b_aligned * mask_b.unsqueeze(-1).to(dtype)
        valid = pair_mask(mask_a, mask_b, dtype)  # (B, La, Lb)
        matrices = {"attention_a": rows.mean(1) * valid, "attention_b": columns.mean(1) * valid}
        return Alignment(a_aligned, b_aligned, matrices)
