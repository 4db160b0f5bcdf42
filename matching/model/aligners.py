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
existed (its config has no such key) loads as it was trained; docs/aligners.md says what it does to each score.
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

    def __init__(self, dim: int):
        super().__init__()
        if dim <= 0:
            raise ConfigError(f"{type(self).__name__} needs a positive input dimension, got {dim}")
        self.dim = dim

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


def _attend_both_ways(
    scores: Tensor, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The masked softmax of (B, La, Lb) `scores` over b for each a_i and over a for each b_j, and what each side
    is aligned to: (weights_a, weights_b, a_aligned (B, La, D), b_aligned (B, Lb, D)). Each fill comes from the
    mask of the side normalised over; the pair mask zeroes padding rows and columns (see `masked_softmax`), converted
    to the scores' dtype once for both (multiplying by a boolean mask converts it again in every product, forward
    and backward)."""
    valid = pair_mask(mask_a, mask_b, scores.dtype)
    weights_a = masked_softmax(scores, mask_b.unsqueeze(1), dim=2, zero=valid)  # rows: each a_i over b
    weights_b = masked_softmax(scores, mask_a.unsqueeze(2), dim=1, zero=valid)  # columns: each b_j over a
    # scores wider than the values (conflict's float32 distances under bf16): the products in the values' dtype
    aligned_a, aligned_b = torch.bmm(weights_a.to(b.dtype), b), torch.bmm(weights_b.transpose(1, 2).to(a.dtype), a)
    return weights_a, weights_b, aligned_a, aligned_b


class SoftmaxAligner(Aligner):
    """Vanilla Decomposable Attention: e_ij = F(a_i)ᵀF(b_j), softmax over j for β and over i for α.

    `projection` is F (see PROJECTIONS); "parikh" is the original model. `center_tokens` scores F(x) minus the
    pair's mean F (the module docstring): the softmax over j cancels any term constant along j, but a projection's
    bias c puts cᵀF(b_j) into e_ij, a prior for b_j whatever a_i is, which centring replaces by −F̄ᵀF(b_j), F̄ the
    pair's own mean.
    """

    def __init__(
        self,
        dim: int,
        hidden: int = 200,
        dropout: float = 0.2,
        projection: str = "parikh",
        scale: bool = False,
        center_tokens: bool = False,
    ):
        super().__init__(dim)
        self.project, width = _projection(dim, hidden, dropout, projection)
        self.scale = 1.0 / math.sqrt(width) if scale else 1.0
        self.center_tokens = center_tokens

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        self._check(a, b, mask_a, mask_b)
        fa, fb = per_token(self.project, a, b)
        if self.center_tokens:
            fa, fb = center_over_pair(fa, fb, mask_a, mask_b)
        e = torch.bmm(fa, fb.transpose(1, 2))  # (B, La, Lb)
        if self.scale != 1.0:
            e = e * self.scale
        if score_bias is not None:
            e = e + score_bias
        weights_a, weights_b, a_aligned, b_aligned = _attend_both_ways(e, a, b, mask_a, mask_b)
        return Alignment(a_aligned, b_aligned, {"softmax_a": weights_a, "softmax_b": weights_b})


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
    negative, and whether a seed learns to cancel it decides whether it aligns (docs/aligners.md, "How much each
    aligner varies over seeds"). `center_tokens` scores F_E(x) minus the pair's mean F_E over its valid tokens of both
    sides, which removes any constant offset, c included (N, a distance, does not change); `center_e` (eq. 6)
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
    ):
        super().__init__(dim)
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
        return Alignment(a_aligned, b_aligned, {"affinity": affinity, "gate": gate, "M": m})


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
        self, dim: int, hidden: int = 200, dropout: float = 0.2, score: str = "l1", center_tokens: bool = False
    ):
        super().__init__(dim)
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
        return Alignment(a_aligned, b_aligned, {"conflict_a": weights_a, "conflict_b": weights_b})


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
    ):
        super().__init__(dim)
        self.center_tokens = center_tokens
        self.attention = SoftmaxAligner(dim, hidden, dropout, projection=projection, center_tokens=center_tokens)
        self.conflict = ConflictAligner(dim, hidden, dropout, score=score, center_tokens=center_tokens)

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        att = self.attention(a, b, mask_a, mask_b, score_bias)
        conf = self.conflict(a, b, mask_a, mask_b, score_bias)
        return Alignment(
            torch.cat([att.a_aligned, conf.a_aligned], dim=-1),
            torch.cat([att.b_aligned, conf.b_aligned], dim=-1),
            {**att.matrices, **conf.matrices},
        )
