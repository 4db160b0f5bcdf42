"""Pluggable alignment for Decomposable Attention.

Every aligner implements one interface::

    aligner(a, b, mask_a, mask_b, score_bias=None) -> Alignment(a_aligned, b_aligned, matrices)

with a (B, La, D), b (B, Lb, D) and boolean masks (True on real tokens). `a_aligned` (B, La, copies·D) is
what of b each a_i is aligned to (Parikh's β_i); `b_aligned` (B, Lb, copies·D) is Parikh's α_j. The aligner
owns both the scoring and the normalisation (CoDA has no softmax at all), and zeroes padding itself: padding
gets zero weight and contributes nothing. `matrices` holds the (B, La, Lb) matrices it used, for inspection
and plots. `score_bias` (La, Lb) is added to the raw scores; the intra-sentence attention passes Parikh's
distance biases through it.

Token centring (`center_tokens`, every aligner's option, one implementation: `layers.center_over_pair`) scores the
tokens' vectors minus the pair's mean vector over both sides' valid tokens, so that a constant offset in every vector
(the model projection's bias) puts nothing into the scores. Where it applies: to F(a), F(b) for softmax and CoDA (the
vectors their scores compare), to the aligner's inputs a, b for conflict (its W_u and W_v project each side into a
space of its own) and for the attention parts (their compatibility functions take a and b). The aligned vectors are
always weighted sums of the inputs as given. Each argument's default is False so that a run saved before the option
existed (its config has no such key) loads as it was trained; docs/concepts/aligners.md says what it does to each score.

The output gate (`output_gate`, every aligner's option, one implementation: `OutputGate`; Qiu et al. 2025) multiplies
what each token receives by a sigmoid of that token's own vector: β_i ⊙ σ(W_g a_i), α_j ⊙ σ(W_g b_j). It leaves the
matrices as they are. Its default is False for the same reason (a run saved before it has no W_g).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from matching.errors import ConfigError
from matching.model.layers import (
    Dropout,
    FeedForward,
    center_over_pair,
    masked_mean,
    masked_softmax,
    pair_mask,
    per_token,
)


class Alignment(NamedTuple):
    a_aligned: Tensor  # (B, La, copies·D)
    b_aligned: Tensor  # (B, Lb, copies·D)
    matrices: dict[str, Tensor]  # name -> (B, La, Lb)


class Aligner(nn.Module):
    """Base class; subclasses define `forward(a, b, mask_a, mask_b, score_bias=None) -> Alignment`.

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


def _projection(dim: int, hidden: int, dropout: float, kind: str) -> tuple[nn.Module, int]:
    """The module named by `kind` (see PROJECTIONS) and its output width."""
    if kind == "parikh":
        return FeedForward(dim, hidden, dropout), hidden
    if kind == "linear":
        return nn.Sequential(Dropout(dropout), nn.Linear(dim, hidden, bias=False)), hidden
    if kind == "none":
        return nn.Identity(), dim
    raise ConfigError(f"unknown projection {kind!r}; choose one of {list(PROJECTIONS)}")


def _softmax_both_ways(e: Tensor, mask_a: Tensor, mask_b: Tensor) -> tuple[Tensor, Tensor]:
    """The masked softmax of (B, La, Lb) scores over b for each a_i and over a for each b_j: (weights_a, weights_b).
    Each fill comes from the mask of the side normalised over; the pair mask zeroes padding rows and columns (see
    `masked_softmax`), converted to the scores' dtype once for both (multiplying by a boolean mask converts it again in
    every product, forward and backward)."""
    valid = pair_mask(mask_a, mask_b, e.dtype)
    weights_a = masked_softmax(e, mask_b.unsqueeze(1), dim=2, zero=valid)  # rows: each a_i over b
    weights_b = masked_softmax(e, mask_a.unsqueeze(2), dim=1, zero=valid)  # columns: each b_j over a
    return weights_a, weights_b


def _attend_both_ways(
    scores: Tensor, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`_softmax_both_ways` and what each side is aligned to: (weights_a, weights_b, a_aligned (B, La, D), b_aligned
    (B, Lb, D))."""
    weights_a, weights_b = _softmax_both_ways(scores, mask_a, mask_b)
    # scores wider than the values (conflict's float32 distances under bf16): the products in the values' dtype
    aligned_a, aligned_b = torch.bmm(weights_a.to(b.dtype), b), torch.bmm(weights_b.transpose(1, 2).to(a.dtype), a)
    return weights_a, weights_b, aligned_a, aligned_b


def _dot_scores(
    project: nn.Module,
    a: Tensor,
    b: Tensor,
    mask_a: Tensor,
    mask_b: Tensor,
    center: bool,
    scale: float,
    score_bias: Tensor | None,
) -> Tensor:
    """(B, La, Lb) e_ij = F(a_i)ᵀF(b_j) with F = `project`, the F's centred over the pair if `center`, times `scale`
    (skipped at 1), plus `score_bias`."""
    fa, fb = per_token(project, a, b)
    if center:
        fa, fb = center_over_pair(fa, fb, mask_a, mask_b)
    e = torch.bmm(fa, fb.transpose(1, 2))  # (B, La, Lb)
    if scale != 1.0:
        e = e * scale
    return e if score_bias is None else e + score_bias


class DotAligner(Aligner):
    """The aligners that score e_ij = F(a_i)ᵀF(b_j) and turn the scores into weights both ways (`weigh`): each a_i's
    row over b and each b_j's column over a, 0 on padding. a_aligned = W_a b, b_aligned = W_bᵀ a, then the output gate.

    `projection` is F (see PROJECTIONS); `scale` divides e by √d; `center_tokens` scores F(x) minus the pair's mean F
    (the module docstring). The matrices are named `<kind>_a` (the rows) and `<kind>_b` (the columns).
    """

    kind = "dot"

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "none",
        scale: bool = False,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, output_gate)
        self.project, width = _projection(dim, hidden, dropout, projection)
        self.scale = 1.0 / math.sqrt(width) if scale else 1.0
        self.center_tokens = center_tokens

    def scores(self, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor, score_bias: Tensor | None) -> Tensor:
        """e (B, La, Lb) = F(a_i)ᵀF(b_j), centred, scaled and biased as configured; padding cells hold any value."""
        return _dot_scores(self.project, a, b, mask_a, mask_b, self.center_tokens, self.scale, score_bias)

    def weigh(self, e: Tensor, mask_a: Tensor, mask_b: Tensor) -> tuple[Tensor, Tensor]:
        """(weights_a, weights_b), both (B, La, Lb): each row of weights_a weighs b for a_i, each column of
        weights_b weighs a for b_j; exactly 0 on every padding row and column."""
        raise NotImplementedError

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        self._check(a, b, mask_a, mask_b)
        e = self.scores(a, b, mask_a, mask_b, score_bias)
        weights_a, weights_b = self.weigh(e, mask_a, mask_b)
        # weights wider than the values (a float32 distribution under bf16): the products in the values' dtype
        a_aligned = torch.bmm(weights_a.to(b.dtype), b)  # (B, La, D)
        b_aligned = torch.bmm(weights_b.transpose(1, 2).to(a.dtype), a)  # (B, Lb, D)
        matrices = {f"{self.kind}_a": weights_a, f"{self.kind}_b": weights_b}
        return self._gated(Alignment(a_aligned, b_aligned, matrices), a, b)


class SoftmaxAligner(DotAligner):
    """Vanilla Decomposable Attention: e_ij = F(a_i)ᵀF(b_j), softmax over j for β and over i for α.

    `projection` is F (see PROJECTIONS); "parikh" is the original model. `center_tokens` scores F(x) minus the
    pair's mean F (the module docstring): the softmax over j cancels any term constant along j, but a projection's
    bias c puts cᵀF(b_j) into e_ij, a prior for b_j whatever a_i is, which centring replaces by −F̄ᵀF(b_j), F̄ the
    pair's own mean.
    """

    kind = "softmax"

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "parikh",
        scale: bool = False,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, hidden, dropout, projection, scale, center_tokens, output_gate)

    def weigh(self, e, mask_a, mask_b):
        return _softmax_both_ways(e, mask_a, mask_b)


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

    kind = "differential"

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
        self.project_1, width = _projection(dim, hidden, dropout, projection)  # F₁
        self.project_2, _ = _projection(dim, hidden, dropout, projection)  # F₂
        self.scale = 1.0 / math.sqrt(width) if scale else 1.0
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

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        self._check(a, b, mask_a, mask_b)
        first, second = (
            _dot_scores(project, a, b, mask_a, mask_b, self.center_tokens, self.scale, score_bias)  # E¹, E²
            for project in (self.project_1, self.project_2)
        )
        first_a, first_b = _softmax_both_ways(first, mask_a, mask_b)
        second_a, second_b = _softmax_both_ways(second, mask_a, mask_b)
        lam = self.weight_lambda().to(first_a.dtype)
        weights_a, weights_b = first_a - lam * second_a, first_b - lam * second_b  # (B, La, Lb), 0 on padding
        a_aligned = torch.bmm(weights_a.to(b.dtype), b)  # (B, La, D)
        b_aligned = torch.bmm(weights_b.transpose(1, 2).to(a.dtype), a)  # (B, Lb, D)
        matrices = {"differential_a": weights_a, "differential_b": weights_b}
        return self._gated(Alignment(a_aligned, b_aligned, matrices), a, b)


class CogAligner(DotAligner):
    """Signed, normalised attention ("cog", Lv et al. 2024, arXiv 2411.07176): W_ij = sign(E_ij)·exp|E_ij| /
    Σ_k exp|E_ik| over the valid k, rows over b for a_i and columns over a for b_j.

    |W| is a softmax of |E|, so the magnitudes of a row sum to 1 as softmax's weights do, and the sign of each score
    chooses between adding b_j and subtracting it: signed like CoDA, but normalised. Computed as the shared masked
    softmax of |E| times sign(E) (stable: the softmax subtracts the row's maximum). A score of exactly 0 gets weight
    0. Left out: heads, and the paper's choice of keeping softmax in a transformer's first and last layers (there is
    one alignment here). `projection` (F, default none: the model's projection, as CoDA's) and `center_tokens`
    (default true in the config, as CoDA's: a constant offset would make every E_ij > 0 and the aligner a softmax
    of |E| that never subtracts) as in softmax.
    """

    kind = "cog"

    def weigh(self, e, mask_a, mask_b):
        valid = pair_mask(mask_a, mask_b, e.dtype)
        sign, magnitude = torch.sign(e), e.abs()
        weights_a = masked_softmax(magnitude, mask_b.unsqueeze(1), dim=2, zero=valid) * sign
        weights_b = masked_softmax(magnitude, mask_a.unsqueeze(2), dim=1, zero=valid) * sign
        return weights_a, weights_b


def softpick(scores: Tensor, mask: Tensor, dim: int, eps: float = 1e-6) -> Tensor:
    """Softpick (Zuhri et al. 2025, arXiv 2504.20966) over `dim`, restricted to `mask` (boolean, broadcastable):
    ReLU(e^{x_i} − 1) / (Σ_k |e^{x_k} − 1| + ε), the sum over valid k. Exact zeros wherever x_i ≤ 0; a slice whose
    every x is ≤ 0 is all zeros (it attends to nothing), a slice with no valid entry too.

    Computed in the paper's stable form, numerator and denominator times e^{−m}: ReLU(e^{x_i − m} − e^{−m}) /
    (Σ_k |e^{x_k − m} − e^{−m}| + ε·e^{−m}), with m = max(0, the slice's largest valid x), so that no exponential
    exceeds 1 (m ≥ 0 also keeps e^{−m} ≤ 1 where every x is very negative, which the paper's m = max x would
    overflow); ε is the paper's, exactly. m is a constant of the gradient (the exact value does not depend on it).
    Masked entries are set to 0 first, where e^x − 1 = 0: they add exactly nothing and no garbage reaches `exp`.
    In float32 at least (bf16 would lose e^{x−m} − e^{−m} near x = 0), returned in the scores' dtype."""
    work = scores.to(torch.promote_types(scores.dtype, torch.float32))
    x = torch.where(mask, work, torch.zeros_like(work))
    m = x.detach().amax(dim=dim, keepdim=True).clamp_min(0.0)  # masked entries are 0, so m ≥ every valid x and ≥ 0
    shift = torch.exp(-m)
    terms = torch.exp(x - m) - shift  # e^{−m}(e^x − 1): exactly 0 where x = 0 (masked entries)
    total = terms.abs().sum(dim=dim, keepdim=True) + eps * shift
    return (torch.relu(terms) / total).to(scores.dtype)


class SoftpickAligner(DotAligner):
    """Softpick attention (Zuhri et al. 2025, arXiv 2504.20966) as an aligner: W_ij = ReLU(e^{E_ij} − 1) /
    (Σ_k |e^{E_ik} − 1| + ε), rows over b for a_i and columns over a for b_j (see `softpick`).

    A cell with E_ij ≤ 0 gets exactly 0, and a token whose every score is ≤ 0 receives nothing (β_i = 0): the
    possibility of attending to nothing, without CoDA's subtraction. A row's weights sum to at most 1 (the
    denominator counts the negative scores too). Left out: heads and the paper's attention-sink measurements (one
    alignment of two sentences; no sink token). `eps` is the paper's ε. `projection` and `center_tokens` as in
    cog (a constant offset makes every E_ij > 0 and no weight exactly 0).
    """

    kind = "softpick"

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "none",
        scale: bool = False,
        eps: float = 1e-6,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, hidden, dropout, projection, scale, center_tokens, output_gate)
        if not eps > 0:
            raise ConfigError(f"aligner.eps must be positive (softpick divides by a sum that can be 0), got {eps}")
        self.eps = eps

    def weigh(self, e, mask_a, mask_b):
        valid = pair_mask(mask_a, mask_b, e.dtype)
        weights_a = softpick(e, mask_b.unsqueeze(1), dim=2, eps=self.eps) * valid  # rows: each a_i over b
        weights_b = softpick(e, mask_a.unsqueeze(2), dim=1, eps=self.eps) * valid  # columns: each b_j over a
        return weights_a, weights_b


class SigmoidAligner(DotAligner):
    """Sigmoid attention with its length bias (Ramapuram et al. 2025, arXiv 2409.04431): W_ij = σ(E_ij + b),
    b = −log n, n the attended sentence's length: its valid tokens (the NULL token counted when the model uses it;
    padding never), so that a row's weights start near Σ_j σ(E_ij)/n, the size of a softmax's, whatever the length.
    Each cell on its own, not normalised: a row may weigh every b_j near 0 (attend to nothing) or several near 1.
    Padding cells are exactly 0 (multiplied by the pair mask). `length_bias=false` drops b (the design space's
    `distribution=sigmoid`). Left out: heads, and the LayerScale and QK-norm the paper uses to keep a deep transformer
    stable (no residual stream here). `projection` and `center_tokens` as in cog.
    """

    kind = "sigmoid"

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "none",
        scale: bool = False,
        length_bias: bool = True,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, hidden, dropout, projection, scale, center_tokens, output_gate)
        self.length_bias = length_bias

    @staticmethod
    def bias(mask: Tensor) -> Tensor:
        """b = −log n per example, (B,) in float32: n the mask's valid tokens (at least 1)."""
        return -torch.log(mask.sum(dim=1).clamp_min(1).to(torch.float32))

    def weigh(self, e, mask_a, mask_b):
        valid = pair_mask(mask_a, mask_b, e.dtype)
        if not self.length_bias:
            weights = torch.sigmoid(e) * valid
            return weights, weights
        rows = e + self.bias(mask_b).to(e.dtype).view(-1, 1, 1)  # each a_i over b: n = b's length
        columns = e + self.bias(mask_a).to(e.dtype).view(-1, 1, 1)  # each b_j over a: n = a's length
        return torch.sigmoid(rows) * valid, torch.sigmoid(columns) * valid


class ScalableSoftmaxAligner(DotAligner):
    """Scalable-softmax (SSMax, Nakanishi 2025, arXiv 2501.19399): W = softmax(s·log n·E), s learned, n the attended
    sentence's length (its valid tokens, as sigmoid's n), rows over b for a_i (n = b's length) and columns over a for
    b_j (n = a's length).

    A softmax's largest weight fades as n grows; multiplying the scores by s·log n keeps it from fading, so a long
    sentence can still be attended to sharply. s is one scalar (the paper's is per head and layer: one alignment, one
    head here), starting at `s_init` (0.43: s·log n = 1 at n = 10, softmax's own scale for a ten-token sentence). Left
    out: the paper's variant with a learned bias inside the scale. `projection` and
    `center_tokens` as in softmax."""

    kind = "ssmax"

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "none",
        scale: bool = False,
        s_init: float = 0.43,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, hidden, dropout, projection, scale, center_tokens, output_gate)
        self.s = nn.Parameter(torch.tensor(float(s_init)))

    def learned_constants(self) -> dict[str, float]:
        return {"s": self.s.item()}

    def weigh(self, e, mask_a, mask_b):
        valid = pair_mask(mask_a, mask_b, e.dtype)
        log_a, log_b = (torch.log(mask.sum(dim=1).clamp_min(1).to(torch.float32)) for mask in (mask_a, mask_b))
        rows = e * (self.s * log_b).to(e.dtype).view(-1, 1, 1)  # each a_i over b: n = b's length
        columns = e * (self.s * log_a).to(e.dtype).view(-1, 1, 1)  # each b_j over a: n = a's length
        weights_a = masked_softmax(rows, mask_b.unsqueeze(1), dim=2, zero=valid)
        weights_b = masked_softmax(columns, mask_a.unsqueeze(2), dim=1, zero=valid)
        return weights_a, weights_b


def _algebraic(x: Tensor) -> Tensor:
    return x / torch.sqrt(1.0 + x * x)


#: φ_E and φ_N choices of the CoDA paper, Table 9.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "arctan": torch.atan,
    "algebraic": _algebraic,
}


def _activation(name: str, role: str) -> Callable[[Tensor], Tensor]:
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown {role} activation {name!r}; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class CoDAAligner(Aligner):
    """Compositional De-Attention (Tay et al. 2019, eq. 1–7). No softmax anywhere.

    E_ij = α·F_E(a_i)ᵀF_E(b_j)                  (eq. 1; optionally centred, eq. 6)
    N_ij = −β·‖F_N(a_i) − F_N(b_j)‖₁            (eq. 2)
    M = φ_E(E) ⊙ gate(N)                          (eq. 3) with gate(N) = φ_N(N − mean N)  [gate="center", eq. 4]
                                                                         2·φ_N(N)       [gate="scale", eq. 5]
                                                                         φ_N(N)         [gate="none"]
    a_aligned = M b,  b_aligned = Mᵀ a            (eq. 7)

    Means are over valid (non-padding) cells of each example's matrix, and M is exactly 0 on any padding row
    or column. `gate_projection="shared"` uses F_N = F_E; "separate" gives N its own net. `scale` divides E and N
    by √d, since both are sums over the d projected features.

    `projection` is F_E (and F_N), see PROJECTIONS. E must take both signs: "E controls whether we want to add
    or subtract a vector" (§2.3). The default "none" scores the model's linear projection of the unit-norm word
    vectors, so E is a learned bilinear similarity of the words, near 0 for unrelated ones (the paper's Fig. 2;
    on WikiQA dev 30 % of the M cells are negative). "parikh" (the DecompAtt F, whose ReLU output makes
    E ≥ 0 and M ≥ 0: CoDA that can only add or delete) is kept for ablation. A projection with a bias of its
    own is no cure: its constant ‖b‖² outweighs the token-dependent part of E, and M stays ≥ 0 in practice. The
    model's own projection has such a bias too (a = P x + c): at initialisation ‖c‖² dominates E and no cell of M is
    negative, and whether a seed learns to cancel it decides whether it aligns (docs/concepts/aligners.md, "How much
    each aligner varies over seeds"). `center_tokens` scores F_E(x) minus the pair's mean F_E over its valid tokens of
    both sides, which removes any constant offset, c included (N, a distance, does not change); `center_e` (eq. 6)
    removes E's mean, the ‖c‖² part only. The config's default is `center_tokens: true`; the argument's default stays
    False so that a run saved before it existed (its config has no such key) loads as it was trained.
    """

    GATES = ("center", "scale", "none")

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "none",
        alpha: float = 1.0,
        beta: float = 1.0,
        phi_e: str = "tanh",
        phi_n: str = "sigmoid",
        gate: str = "center",
        center_e: bool = False,
        gate_projection: str = "shared",
        scale: bool = False,
        center_tokens: bool = False,
        output_gate: bool = False,
    ):
        super().__init__(dim, output_gate)
        if gate not in self.GATES:
            raise ConfigError(f"unknown CoDA gate normalisation {gate!r}; choose one of {list(self.GATES)}")
        if gate_projection not in ("shared", "separate"):
            raise ConfigError(f"gate_projection must be 'shared' or 'separate', got {gate_projection!r}")
        if alpha < 0 or beta < 0:
            raise ConfigError(f"CoDA temperatures must be non-negative, got alpha={alpha} beta={beta}")
        self.phi_e = _activation(phi_e, "phi_e")
        self.phi_n = _activation(phi_n, "phi_n")
        self.alpha, self.beta, self.gate, self.center_e = alpha, beta, gate, center_e
        self.center_tokens = center_tokens
        self.project_e, width = _projection(dim, hidden, dropout, projection)
        self.shared = gate_projection == "shared"
        self.project_n = self.project_e if self.shared else _projection(dim, hidden, dropout, projection)[0]
        self.scale = 1.0 / math.sqrt(width) if scale else 1.0

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        self._check(a, b, mask_a, mask_b)
        fa, fb = per_token(self.project_e, a, b)
        if self.center_tokens:  # F_E(x) − the pair's mean F_E: a constant offset (a projection's bias) leaves E
            fa, fb = center_over_pair(fa, fb, mask_a, mask_b)
        e = torch.bmm(fa, fb.transpose(1, 2))  # (B, La, Lb)
        if self.alpha * self.scale != 1.0:
            e = e * (self.alpha * self.scale)
        if score_bias is not None:
            e = e + score_bias
        cells = pair_mask(mask_a, mask_b, torch.promote_types(e.dtype, torch.float32))  # 0/1 (B, La, Lb)
        if self.center_e:
            e = e - masked_mean(e, cells, dims=(1, 2))
        na, nb = (fa, fb) if self.shared else per_token(self.project_n, a, b)
        # cdist(p=1) computes the L1 distances without a (B, La, Lb, d) intermediate, in float32 at least (it has no
        # bf16 kernel on a CPU; autocast runs it in float32 too): N, the gate and M are float32 in bf16 as well.
        wide = torch.promote_types(na.dtype, torch.float32)
        n = torch.cdist(na.to(wide).contiguous(), nb.to(wide).contiguous(), p=1) * (-self.beta * self.scale)
        if self.gate == "center":
            gate = self.phi_n(n - masked_mean(n, cells, dims=(1, 2)))
        elif self.gate == "scale":
            gate = 2.0 * self.phi_n(n)
        else:
            gate = self.phi_n(n)
        affinity = self.phi_e(e)
        m = affinity * gate * cells.to(affinity.dtype)  # (B, La, Lb), exactly 0 on padding
        # M is float32 (see N): the products take it in the inputs' dtype (a no-op in float32; autocast casts so).
        weights = m.to(b.dtype)
        a_aligned = torch.bmm(weights, b)  # (B, La, D)
        b_aligned = torch.bmm(weights.transpose(1, 2), a)  # (B, Lb, D)
        return self._gated(Alignment(a_aligned, b_aligned, {"affinity": affinity, "gate": gate, "M": m}), a, b)


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

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        self._check(a, b, mask_a, mask_b)
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
        weights_a, weights_b, a_aligned, b_aligned = _attend_both_ways(c, a, b, mask_a, mask_b)
        return self._gated(Alignment(a_aligned, b_aligned, {"conflict_a": weights_a, "conflict_b": weights_b}), a, b)


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

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        att = self.attention(a, b, mask_a, mask_b, score_bias)
        conf = self.conflict(a, b, mask_a, mask_b, score_bias)
        aligned = Alignment(
            torch.cat([att.a_aligned, conf.a_aligned], dim=-1),
            torch.cat([att.b_aligned, conf.b_aligned], dim=-1),
            {**att.matrices, **conf.matrices},
        )
        return self._gated(aligned, a, b)
