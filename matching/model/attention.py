"""Attention from parts: the alignment design space of Galassi et al.'s survey ("Attention in Natural Language
Processing", IEEE TNNLS 2021), as an aligner of Decomposable Attention.

An attention aligner is a **compatibility function** (the survey's Table 3: how a_i and b_j score), a
**distribution function** (§3.3: how a row of scores becomes weights) and a **multiplicity** (§3.4: one distribution,
several heads, or one per feature), chosen by config:

    aligner=attention aligner.score=additive aligner.distribution=sparsemax aligner.heads=4

With K heads the D features of a and b are split into K groups; head k scores with its own part (its slice of the
features for the dot family, its own output for the additive family) and aligns its own slice of the features of
the other sentence, so a_aligned is still D wide. `heads=D` is feature-wise (multi-dimensional) attention: one
distribution per feature (Shen et al. 2018, DiSAN). As everywhere (matching/model/aligners.py), each side is normalised
over the other's real tokens, padding gets weight 0, and rows and columns of padding are 0.

`aligner=attention` with score=dot, distribution=softmax and heads=1 computes what `aligner=softmax
aligner.projection=none` does; the SoftmaxAligner stays its own class, so that its seeds keep their numbers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from matching.errors import ConfigError
from matching.model.aligners import Aligner, Alignment
from matching.model.layers import Dropout, center_over_pair, masked_softmax, pair_mask

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


class Distribution(nn.Module):
    """`forward(scores, mask, dim)`: scores (…, L, …) and a mask of the valid entries (broadcastable to the scores)
    -> weights along `dim`, 0 on the masked entries and in a slice with no valid entry."""

    #: Whether the weights of a row sum to 1 (a probability distribution); sigmoid's do not.
    normalised = True


class Softmax(Distribution):
    """exp(s_j) / Σ exp(s_k) over the valid entries (the survey's default)."""

    def forward(self, scores, mask, dim):
        return masked_softmax(scores, mask, dim)


class Temperature(Softmax):
    """softmax(s/τ) with a learned temperature τ > 0 (log-parametrised, starting at `initial`; Lin et al. 2018)."""

    def __init__(self, initial: float = 1.0):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.tensor(math.log(initial)))

    def forward(self, scores, mask, dim):
        return super().forward(scores * torch.exp(-self.log_temperature).to(scores.dtype), mask, dim)


class Sigmoid(Distribution):
    """σ(s_j) for each entry on its own (Kim et al. 2017): not normalised, several tokens can take weight ~1."""

    normalised = False

    def forward(self, scores, mask, dim):
        return torch.sigmoid(scores) * mask.to(scores.dtype)


class Sparsemax(Distribution):
    """Sparsemax (Martins & Astudillo 2016): exact zeros outside a support."""

    def forward(self, scores, mask, dim):
        return _in_float32(sparsemax, scores, mask, dim)


class Entmax(Distribution):
    """α-entmax (Peters et al. 2019); α = 1.5 by default, between softmax (α → 1) and sparsemax (α = 2)."""

    def __init__(self, alpha: float = 1.5):
        super().__init__()
        if not alpha > 1:
            raise ConfigError(f"aligner.alpha must be above 1 for entmax (1 would be softmax), got {alpha}")
        self.alpha = alpha

    def forward(self, scores, mask, dim):
        return _in_float32(lambda z, d: entmax(z, d, self.alpha), scores, mask, dim)


def _in_float32(function, scores: Tensor, mask: Tensor, dim: int) -> Tensor:
    """A sorting or bisecting distribution in float32 at least (bfloat16's 8 bits would misplace the threshold), in
    the scores' dtype again after; rows without a valid entry are 0."""
    work = scores.to(torch.promote_types(scores.dtype, torch.float32))
    any_valid = mask.any(dim=dim, keepdim=True)
    filled = torch.where(mask, work, torch.full_like(work, float("-inf")))
    filled = torch.where(any_valid, filled, torch.zeros_like(filled))
    return (function(filled, dim) * (mask & any_valid)).to(scores.dtype)


#: The distribution functions by config name (survey §3.3).
DISTRIBUTIONS: dict[str, type[Distribution]] = {
    "softmax": Softmax, "temperature": Temperature, "sigmoid": Sigmoid, "sparsemax": Sparsemax, "entmax": Entmax,
}  # fmt: skip


# ---------------------------------------------------------------------------------------------- aligner


class AttentionAligner(Aligner):
    """An aligner from parts (see the module docstring): `score` (SCORES), `distribution` (DISTRIBUTIONS), `heads`
    (a divisor of the input width; `feature_wise=true` sets it to the width). `alpha` is entmax's α, `hidden` the
    width of the additive and deep scores. `center_tokens`: every score function compares a and b minus the pair's
    mean token (matching/model/aligners.py); the aligned vectors stay sums of a and b as given. `output_gate`: the
    gate of every aligner (matching/model/aligners.py, OutputGate). Matrices for plots: the weights of each side,
    averaged over heads."""

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
    ):
        super().__init__(dim, output_gate)
        self.center_tokens = center_tokens
        if score not in SCORES:
            raise ConfigError(f"unknown aligner.score {score!r}; choose one of {sorted(SCORES)}")
        if distribution not in DISTRIBUTIONS:
            raise ConfigError(f"unknown aligner.distribution {distribution!r}; choose one of {sorted(DISTRIBUTIONS)}")
        heads = dim if feature_wise else heads
        if heads < 1 or dim % heads:
            raise ConfigError(f"aligner.heads={heads} must divide the aligned vectors' width {dim} (model.hidden)")
        self.heads = heads
        if score in ("additive", "concat", "deep"):
            self.score = SCORES[score](dim, heads, hidden=hidden, dropout=dropout)
        else:
            self.score = SCORES[score](dim, heads)
        self.distribution = Entmax(alpha) if distribution == "entmax" else DISTRIBUTIONS[distribution]()
        self.dropout = Dropout(dropout) if score not in ("additive", "concat", "deep") else nn.Identity()

    def learned_constants(self) -> dict[str, float]:
        """The learned temperature τ (distribution=temperature); none for the other distributions."""
        if isinstance(self.distribution, Temperature):
            return {"τ": self.distribution.log_temperature.exp().item()}
        return {}

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        self._check(a, b, mask_a, mask_b)
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
        return self._gated(Alignment(a_aligned, b_aligned, matrices), a, b)
