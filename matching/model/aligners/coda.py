"""Compositional De-Attention (Tay et al. 2019): an affinity times a gate, no softmax anywhere."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from matching.errors import ConfigError
from matching.model.aligners import base
from matching.model.aligners.base import Aligner
from matching.model.aligners.dot import dot_scores, project_pair
from matching.model.layers import masked_mean, pair_mask, per_token


def _algebraic(x: Tensor) -> Tensor:
    return x / torch.sqrt(1.0 + x * x)


#: φ_E and φ_N choices of the CoDA paper, Table 9.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "arctan": torch.atan,
    "algebraic": _algebraic,
}

#: The values each activation can take (matching/model/matrices.py: the ranges of the affinity, the gate and M).
ACTIVATION_RANGES = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "arctan": (-math.pi / 2, math.pi / 2),
                     "algebraic": (-1.0, 1.0)}  # fmt: skip


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
        self.project_e, width = base.projection(dim, hidden, dropout, projection)
        self.shared = gate_projection == "shared"
        self.project_n = self.project_e if self.shared else base.projection(dim, hidden, dropout, projection)[0]
        self.scale = base.score_scale(width, scale)

    def align(self, a, b, mask_a, mask_b, score_bias):
        # F_E(x) − the pair's mean F_E if centred: a constant offset (a projection's bias) leaves E
        fa, fb = project_pair(self.project_e, a, b, mask_a, mask_b, self.center_tokens)
        e = dot_scores(fa, fb, self.alpha * self.scale, score_bias)  # (B, La, Lb)
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
        # M is float32 (see N): the products take it in the values' dtype (a no-op in float32; autocast casts so).
        return self.products(m, m, a, b, {"affinity": affinity, "gate": gate, "M": m})
