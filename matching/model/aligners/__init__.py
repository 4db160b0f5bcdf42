"""Pluggable alignment for Decomposable Attention.

Every aligner implements one interface::

    aligner(a, b, mask_a, mask_b, score_bias=None) -> Alignment(a_aligned, b_aligned, matrices)

with a (B, La, D), b (B, Lb, D) and boolean masks (True on real tokens). `a_aligned` (B, La, copies·D) is
what of b each a_i is aligned to (Parikh's β_i); `b_aligned` (B, Lb, copies·D) is Parikh's α_j. The aligner
owns both the scoring and the normalisation (CoDA has no softmax at all), and zeroes padding itself: padding
gets zero weight and contributes nothing. `matrices` holds the (B, La, Lb) matrices it used, for inspection
and plots. `score_bias` (La, Lb) is added to the raw scores; the intra-sentence attention passes Parikh's
distance biases through it.

The family (one file each): `base` (the template `Aligner`: the check, the output gate, the value products; F),
`weightings` (the one registry of weighting functions, shared with the design space of `matching.model.attention`),
`dot` (the dot aligners, one weighting each: softmax, cog, softpick, sigmoid, ssmax, or any by `DotAligner`),
`differential`, `coda`, `conflict`; `simplex` (sparsemax and entmax). Every class is importable from here, as saved
runs' configs name them (`matching.model.aligners.CoDAAligner`).

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

from matching.model.aligners.base import PROJECTIONS, Aligner, Alignment, OutputGate
from matching.model.aligners.coda import ACTIVATIONS, CoDAAligner
from matching.model.aligners.conflict import ConflictAligner, SoftmaxConflictAligner
from matching.model.aligners.differential import DifferentialAligner
from matching.model.aligners.dot import (
    CogAligner,
    DotAligner,
    ScalableSoftmaxAligner,
    SigmoidAligner,
    SoftmaxAligner,
    SoftpickAligner,
)
from matching.model.aligners.weightings import (
    CAPTIONS,
    WEIGHTINGS,
    Caption,
    Distribution,
    Learned,
    softpick,
    weighting,
)

__all__ = [
    "ACTIVATIONS", "CAPTIONS", "PROJECTIONS", "WEIGHTINGS", "Aligner", "Alignment", "Caption", "CoDAAligner",
    "CogAligner", "ConflictAligner", "DifferentialAligner", "Distribution", "DotAligner", "Learned", "OutputGate",
    "ScalableSoftmaxAligner", "SigmoidAligner", "SoftmaxAligner", "SoftmaxConflictAligner", "SoftpickAligner",
    "softpick", "weighting",
]  # fmt: skip
