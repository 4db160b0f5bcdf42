"""The dot aligners: e_ij = F(a_i)ᵀF(b_j), turned into weights both ways by one weighting of the registry
(matching/model/aligners/weightings.py). `DotAligner(weighting=<name>)` takes any of them; each class below is one
weighting under the name its config and saved runs use."""

from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn

from matching.model.aligners import base
from matching.model.aligners.base import Aligner
from matching.model.aligners.weightings import WEIGHTINGS, Weighting, find
from matching.model.layers import center_over_pair, per_token


def project_pair(project: nn.Module, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor, center: bool):
    """F(a), F(b) with F = `project`, centred over the pair's valid tokens if `center` (the package docstring)."""
    fa, fb = per_token(project, a, b)
    return center_over_pair(fa, fb, mask_a, mask_b) if center else (fa, fb)


def dot_scores(fa: Tensor, fb: Tensor, scale: float, score_bias: Tensor | None) -> Tensor:
    """(B, La, Lb) e_ij = F(a_i)ᵀF(b_j) times `scale` (skipped at 1), plus `score_bias`."""
    e = torch.bmm(fa, fb.transpose(1, 2))  # (B, La, Lb)
    if scale != 1.0:
        e = e * scale
    return e if score_bias is None else e + score_bias


class DotAligner(Aligner):
    """e_ij = F(a_i)ᵀF(b_j), weighted both ways by `weighting` (a name of the registry, or a registered function's
    import path): each a_i's row over b and each b_j's column over a, 0 on padding; a_aligned = W_a b,
    b_aligned = W_bᵀ a, then the output gate. `projection` is F (base.PROJECTIONS); `scale` divides e by √d;
    `center_tokens` scores F(x) minus the pair's mean F (the package docstring). Other keywords are the weighting's
    options. The matrices are named `<weighting>_a` (the rows) and `<weighting>_b` (the columns).
    """

    #: A subclass's weighting, and its defaults where they differ from the weighting's (F: `projection`).
    weighting: str | None = None
    defaults: dict = {}

    def __init__(self, dim: int, hidden: int = 200, dropout: float = 0.2, projection: str | None = None,
                 scale: bool = False, center_tokens: bool = False, output_gate: bool = False,
                 weighting: str | None = None, **options):  # fmt: skip
        super().__init__(dim, output_gate)
        spec = self.spec = find(weighting or type(self).weighting or "softmax")
        self.kind = spec.name
        self.project, width = base.projection(
            dim, hidden, dropout, projection or self.defaults.get("projection", "none")
        )
        self.scale = base.score_scale(width, scale)
        self.center_tokens = center_tokens
        self.options = spec.settle(options, self.defaults)
        for name, parameter in spec.parameters_for(self.options).items():
            self.register_parameter(name, parameter)

    def __init_subclass__(cls, **kwargs):
        """A subclass's signature names its weighting's options (config checks read it: a key it has not is named)."""
        super().__init_subclass__(**kwargs)
        if cls.weighting is not None:
            cls.__signature__ = _signature(cls, WEIGHTINGS[cls.weighting])

    def learned_constants(self) -> dict[str, float]:
        return self.spec.constants(self)

    def scores(self, a: Tensor, b: Tensor, mask_a: Tensor, mask_b: Tensor, score_bias: Tensor | None) -> Tensor:
        """e (B, La, Lb) = F(a_i)ᵀF(b_j), centred, scaled and biased as configured; padding cells hold any value."""
        fa, fb = project_pair(self.project, a, b, mask_a, mask_b, self.center_tokens)
        return dot_scores(fa, fb, self.scale, score_bias)

    def weigh(self, e: Tensor, mask_a: Tensor, mask_b: Tensor) -> tuple[Tensor, Tensor]:
        """(weights_a, weights_b), both (B, La, Lb), exactly 0 on every padding row and column."""
        return self.spec.both_ways(self, e, mask_a, mask_b, self.options)

    def align(self, a, b, mask_a, mask_b, score_bias):
        weights_a, weights_b = self.weigh(self.scores(a, b, mask_a, mask_b, score_bias), mask_a, mask_b)
        return self.products(weights_a, weights_b, a, b, {f"{self.kind}_a": weights_a, f"{self.kind}_b": weights_b})


def _signature(cls: type, spec: Weighting) -> inspect.Signature:
    """DotAligner's arguments with the subclass's defaults, its weighting's options in place of `weighting` and **."""
    params = dict(inspect.signature(DotAligner.__init__).parameters)
    del params["self"], params["weighting"], params["options"]
    params["projection"] = params["projection"].replace(
        default=cls.defaults.get("projection", "none"), annotation="str"
    )
    options = [p.replace(default=cls.defaults.get(k, p.default)) for k, p in spec.options.items()]
    for scalar in spec.learned.values():  # its start, a number
        start = cls.defaults.get(scalar.option, scalar.start)
        options.append(
            inspect.Parameter(scalar.option, inspect.Parameter.KEYWORD_ONLY, default=start, annotation="float")
        )
    return inspect.Signature([*params.values(), *options])


class SoftmaxAligner(DotAligner):
    """Vanilla Decomposable Attention: e_ij = F(a_i)ᵀF(b_j), softmax over j for β and over i for α.

    `projection` is F; "parikh" is the original model. `center_tokens` scores F(x) minus the pair's mean F: the softmax
    over j cancels any term constant along j, but a projection's bias c puts cᵀF(b_j) into e_ij, a prior for b_j
    whatever a_i is, which centring replaces by −F̄ᵀF(b_j), F̄ the pair's own mean.
    """

    weighting, defaults = "softmax", {"projection": "parikh"}


class CogAligner(DotAligner):
    """Signed, normalised attention ("cog", Lv et al. 2024; weightings.cog), rows over b for a_i and columns over a for
    b_j: signed like CoDA, but normalised. Left out: heads, and the paper's choice of keeping softmax in a transformer's
    first and last layers (there is one alignment here). `projection` (F, default none: the model's projection, as
    CoDA's) and `center_tokens` (default true in the config, as CoDA's: a constant offset would make every E_ij > 0 and
    the aligner a softmax of |E| that never subtracts) as in softmax."""

    weighting = "cog"


class SoftpickAligner(DotAligner):
    """Softpick attention (Zuhri et al. 2025; weightings.softpick) as an aligner: a cell with E_ij ≤ 0 gets exactly 0,
    and a token whose every score is ≤ 0 receives nothing (β_i = 0): attending to nothing, without CoDA's subtraction.
    A row's weights sum to at most 1. Left out: heads and the paper's attention-sink measurements (no sink token).
    `eps` is the paper's ε. `projection` and `center_tokens` as in cog (a constant offset makes every E_ij > 0)."""

    weighting = "softpick"


class SigmoidAligner(DotAligner):
    """Sigmoid attention with its length bias (Ramapuram et al. 2025; weightings.sigmoid): W_ij = σ(E_ij − log n), n
    the attended sentence's valid tokens (the NULL token counted when the model uses it; padding never). Each cell on
    its own, not normalised: a row may weigh every b_j near 0 (attend to nothing) or several near 1.
    `length_bias=false` drops the bias (the design space's `distribution=sigmoid`). Left out: heads, and the LayerScale
    and QK-norm the paper uses to keep a deep transformer stable (no residual stream here). `projection` and
    `center_tokens` as in cog."""

    weighting, defaults = "sigmoid", {"length_bias": True}


class ScalableSoftmaxAligner(DotAligner):
    """Scalable-softmax (SSMax, Nakanishi 2025; weightings.ssmax): W = softmax(s·log n·E), rows over b for a_i
    (n = b's length) and columns over a for b_j (n = a's length), so a long sentence can still be attended to sharply.
    s is one scalar (the paper's is per head and layer), starting at `s_init`. Left out: the paper's variant with a
    learned bias inside the scale. `projection` and `center_tokens` as in softmax."""

    weighting = "ssmax"
