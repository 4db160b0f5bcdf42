"""The one registry of weighting functions: how a row (or column) of scores becomes weights. The dot aligners
(`aligner=softmax`, `cog`, ...: F(a_i)ᵀF(b_j) scores) and the design space (`aligner=attention
aligner.distribution=<name>`: any compatibility function, any number of heads) both draw on it, so every weighting
works in both. A weighting is one function, registered with what it declares::

    @weighting("halfmax", formula="softmax(E/2)", each="each {whose} sums to 1", values=(0.0, 1.0))
    def halfmax(scores, mask, dim, zero=None):
        return masked_softmax(scores / 2, mask, dim, zero=zero)

`scores` (…, La, Lb, …); `mask` boolean, broadcastable to them, True on the valid entries along `dim`, the dimension
normalised over; the result is multiplied by `zero` (default `mask`: an aligner passes its pair mask, so that padding
rows are 0 too). Keyword-only arguments are its options (`aligner.<option>=…`); `learned` names its learned scalars.
`formula` and `each` are its matrices' caption (`each` says what a row, {whose}, holds), `values` the range its weights
can take by the formula (matching/model/matrices.py draws a range below 0 on a diverging scale). A config names a
registered weighting by its name, or one of one's own by its import path (`my_weightings.halfmax`), which registers it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from matching.model.aligners.registry import (  # noqa: F401  (the registry's names, read from here by the aligners)
    CAPTIONS,
    WEIGHTINGS,
    Caption,
    Distribution,
    Learned,
    Weighting,
    find,
    weighting,
)
from matching.model.aligners.simplex import entmax, sparsemax
from matching.model.layers import masked_softmax


def _zeroed(weights: Tensor, mask: Tensor, zero: Tensor | None) -> Tensor:
    return weights * (mask.to(weights.dtype) if zero is None else zero)


def _lengths(mask: Tensor, dim: int) -> Tensor:
    """n, the valid entries along `dim` (at least 1), in float32, shaped to broadcast."""
    return mask.sum(dim=dim, keepdim=True).clamp_min(1).to(torch.float32)


@weighting("softmax", formula="", each="each {whose} sums to 1", values=(0.0, 1.0))
def softmax(scores, mask, dim, zero=None):
    """exp(s_j) / Σ exp(s_k) over the valid entries (Parikh's; the survey's default)."""
    return masked_softmax(scores, mask, dim, zero=zero)


@weighting("temperature", formula="softmax(E/τ)", each="each {whose} sums to 1", values=(0.0, 1.0),
           learned={"log_temperature": Learned("temperature", 1.0, "τ", log=True)})  # fmt: skip
def temperature(scores, mask, dim, zero=None, *, log_temperature):
    """softmax(s/τ) with a learned temperature τ > 0 (log-parametrised, starting at `temperature`; Lin et al. 2018)."""
    return masked_softmax(scores * torch.exp(-log_temperature).to(scores.dtype), mask, dim, zero=zero)


def _sigmoid_formula(node: Mapping) -> str:
    return "σ(E − log n)" if node.get("length_bias", True) else "σ(E)"


def _without_bias(length_bias: bool) -> bool:
    return not length_bias


@weighting("sigmoid", formula=_sigmoid_formula, each="each cell on its own, not normalised", values=(0.0, 1.0),
           normalised=False, cellwise=_without_bias)  # fmt: skip
def sigmoid(scores, mask, dim, zero=None, *, length_bias: bool = False):
    """σ(s_j + b) for each entry on its own (Kim et al. 2017): several tokens can take weight ~1, or none. With
    `length_bias`, b = −log n, n the valid entries (Ramapuram et al. 2025, arXiv 2409.04431), so that a row's weights
    start near Σ_j σ(E_ij)/n, the size of a softmax's, whatever the length; without, b = 0."""
    if length_bias:
        scores = scores + (-torch.log(_lengths(mask, dim))).to(scores.dtype)
    return _zeroed(torch.sigmoid(scores), mask, zero)


@weighting("cog", formula="sign(E)·softmax(|E|)", each="signed; the |weights| of each {whose} sum to 1",
           values=(-1.0, 1.0), normalised=False)  # fmt: skip
def cog(scores, mask, dim, zero=None):
    """Signed, normalised attention (Lv et al. 2024, arXiv 2411.07176): sign(s_j)·exp|s_j| / Σ_k exp|s_k|. |W| is a
    softmax of |s|, so a row's magnitudes sum to 1; the sign chooses between adding b_j and subtracting it. A score of
    exactly 0 gets weight 0. Stable: the shared masked softmax of |s| times sign(s)."""
    return masked_softmax(scores.abs(), mask, dim, zero=zero) * torch.sign(scores)


def _positive_eps(eps: float) -> str | None:
    return None if eps > 0 else f"aligner.eps must be positive (softpick divides by a sum that can be 0), got {eps}"


@weighting("softpick", formula="ReLU(e^E − 1) / Σ|e^E − 1|", check=_positive_eps, values=(0.0, 1.0), normalised=False,
           each="exact zeros; each {whose} sums to at most 1, all 0 where every E ≤ 0")  # fmt: skip
def softpick_weights(scores, mask, dim, zero=None, *, eps: float = 1e-6):
    """Softpick (`softpick`): a cell with s ≤ 0 gets exactly 0, a row whose every s is ≤ 0 nothing at all."""
    return _zeroed(softpick(scores, mask, dim, eps=eps), mask, zero)


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


@weighting("ssmax", formula="softmax(s·log n·E)", each="each {whose} sums to 1", values=(0.0, 1.0),
           learned={"s": Learned("s_init", 0.43, "s")})  # fmt: skip
def ssmax(scores, mask, dim, zero=None, *, s):
    """Scalable-softmax (SSMax, Nakanishi 2025, arXiv 2501.19399): softmax(s·log n·s_j), s learned, n the valid
    entries. A softmax's largest weight fades as n grows; the factor s·log n keeps it from fading. s starts at
    `s_init` (0.43: s·log n = 1 at n = 10, softmax's own scale for a ten-token sentence)."""
    return masked_softmax(scores * (s * torch.log(_lengths(mask, dim))).to(scores.dtype), mask, dim, zero=zero)


def _in_float32(function, scores: Tensor, mask: Tensor, dim: int, zero: Tensor | None) -> Tensor:
    """A sorting or bisecting distribution in float32 at least (bfloat16's 8 bits would misplace the threshold), in
    the scores' dtype again after; rows without a valid entry are 0."""
    work = scores.to(torch.promote_types(scores.dtype, torch.float32))
    any_valid = mask.any(dim=dim, keepdim=True)
    filled = torch.where(mask, work, torch.full_like(work, float("-inf")))
    filled = torch.where(any_valid, filled, torch.zeros_like(filled))
    weights = (function(filled, dim) * (mask & any_valid)).to(scores.dtype)
    return weights if zero is None else weights * zero


@weighting("sparsemax", formula="sparsemax(E)", each="exact zeros; each {whose} sums to 1", values=(0.0, 1.0))
def sparsemax_weights(scores, mask, dim, zero=None):
    """Sparsemax (Martins & Astudillo 2016): exact zeros outside a support."""
    return _in_float32(sparsemax, scores, mask, dim, zero)


def _above_one(alpha: float) -> str | None:
    return None if alpha > 1 else f"aligner.alpha must be above 1 for entmax (1 would be softmax), got {alpha}"


@weighting("entmax", formula="α-entmax(E)", each="exact zeros; each {whose} sums to 1", values=(0.0, 1.0),
           check=_above_one)  # fmt: skip
def entmax_weights(scores, mask, dim, zero=None, *, alpha: float = 1.5):
    """α-entmax (Peters et al. 2019); α = 1.5 by default, between softmax (α → 1) and sparsemax (α = 2)."""
    return _in_float32(lambda z, d: entmax(z, d, alpha), scores, mask, dim, zero)
