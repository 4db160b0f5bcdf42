"""What an aligner's matrices are, from the run's config: a panel's title (the formula and the name) and the range of
values a matrix's cells can take by its formula. Used by `visualize`'s heat-maps and the server's /align answers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def matrix_title(name: str, cfg: Mapping | None = None) -> str:
    """What a matrix is, for a panel's title: its formula and its name (`tanh(E) (affinity)`, `softmax_a: ...`),
    from the run's aligner (or intra) config; `_a`/`_b` say which side the weights align. An unknown matrix (an
    aligner of one's own) keeps its name."""
    side, _, base = name.rpartition("/")
    group = "intra" if side else "aligner"
    node = (cfg or {}).get(group) or {}
    phi_e, phi_n, gate = node.get("phi_e", "tanh"), node.get("phi_n", "sigmoid"), node.get("gate", "center")
    e = "E − mean E" if node.get("center_e") else "E"
    n = {"center": f"{phi_n}(N − mean N)", "scale": f"2·{phi_n}(N)"}.get(gate, f"{phi_n}(N)")
    kind, _, direction = base.rpartition("_")
    known = {
        "affinity": f"{phi_e}({e}) (affinity)",
        "gate": f"{n} (gate)",
        "M": "M = affinity × gate",
    }
    if base in known:
        text = known[base]
    elif kind in _SIGNED_AND_SPARSE and direction in ("a", "b"):
        formula, each = _SIGNED_AND_SPARSE[kind]
        bias = " − log n" if kind == "sigmoid" and node.get("length_bias", True) else ""
        what = f"{formula.format(bias=bias)}; {each.format(whose='row' if direction == 'a' else 'column')}"
        if side:  # intra-sentence: one side against itself
            text = f"{base}: weights of each {side[-1]} token over {side[-1]} itself ({what})"
        else:
            text = f"{base}: weights aligning each {direction} token to {'b' if direction == 'a' else 'a'} ({what})"
    elif kind in ("softmax", "conflict", "attention") and direction in ("a", "b"):
        sums = "each row sums to 1" if direction == "a" else "each column sums to 1"
        if kind == "attention":  # matching/model/attention.py: the weights of its parts, averaged over its heads
            heads = "feature-wise, mean" if node.get("feature_wise") else f"{node.get('heads', 1)} heads, mean"
            sums = (
                f"{node.get('distribution', 'softmax')} of {node.get('score', 'dot')} scores"
                + (f"; {heads}" if node.get("feature_wise") or node.get("heads", 1) != 1 else "")
                + ("" if node.get("distribution") == "sigmoid" else f"; {sums}")
            )
        if side:  # intra-sentence: one side against itself
            text = f"{base}: weights of each {side[-1]} token over {side[-1]} itself ({sums})"
        else:
            text = f"{base}: weights aligning each {direction} token to {'b' if direction == 'a' else 'a'} ({sums})"
    else:
        text = base
    return f"intra {side[-1]}: {text}" if side else text


#: The aligners of matching/model/aligners.py after CoDA: per kind (the matrices' names without _a/_b), the
#: weights' formula and what each row (or column) of them holds.
_SIGNED_AND_SPARSE = {
    "differential": ("softmax(E¹) − λ·softmax(E²)", "signed; each {whose} sums to 1 − λ"),
    "cog": ("sign(E)·softmax(|E|)", "signed; the |weights| of each {whose} sum to 1"),
    "softpick": ("ReLU(e^E − 1) / Σ|e^E − 1|", "exact zeros; each {whose} sums to at most 1, all 0 where every E ≤ 0"),
    "sigmoid": ("σ(E{bias})", "each cell on its own, not normalised"),
    "ssmax": ("softmax(s·log n·E)", "each {whose} sums to 1"),
}

#: The values each kind's weights can take by its formula: cog's |W| ≤ 1; differential's W lies in [−λ, 1] for
#: 0 ≤ λ ≤ 1 (its λ is learned: a run's own is not known from its config), drawn as signed.
_WEIGHT_RANGES = {"softmax": (0.0, 1.0), "conflict": (0.0, 1.0), "softpick": (0.0, 1.0), "sigmoid": (0.0, 1.0),
                  "ssmax": (0.0, 1.0), "cog": (-1.0, 1.0), "differential": (-1.0, 1.0)}  # fmt: skip

#: The values each activation of CoDA can take (φ_E, φ_N; see matching/model/aligners.py).
_ACTIVATION_RANGES = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "arctan": (-math.pi / 2, math.pi / 2),
                      "algebraic": (-1.0, 1.0)}  # fmt: skip


def value_range(name: str, cfg: Mapping | None = None) -> list[float] | None:
    """The range [low, high] that a matrix's cells can take by its formula, from the run's aligner (or intra)
    config: [0, 1] for softmax, conflict, softpick and sigmoid weights, [−1, 1] for the signed ones (cog,
    differential), φ_E's range for the affinity (tanh: [−1, 1]), the gate's, and
    their product for M. A matrix that can take both signs is drawn on a diverging scale even where one pair's
    cells happen to share a sign. None for a matrix of unknown formula (an aligner of one's own)."""
    side, _, base = name.rpartition("/")
    node = (cfg or {}).get("intra" if side else "aligner") or {}
    kind, _, direction = base.rpartition("_")
    if kind in _WEIGHT_RANGES and direction in ("a", "b"):
        return list(_WEIGHT_RANGES[kind])
    affinity = _ACTIVATION_RANGES.get(node.get("phi_e", "tanh"))
    gate = _ACTIVATION_RANGES.get(node.get("phi_n", "sigmoid"))
    if gate is not None and node.get("gate", "center") == "scale":
        gate = (2 * gate[0], 2 * gate[1])
    if base == "affinity" and affinity:
        return list(affinity)
    if base == "gate" and gate:
        return list(gate)
    if base == "M" and affinity and gate:
        products = [x * y for x in affinity for y in gate]
        return [min(products), max(products)]
    return None


def color_scale(m: Any, value_range: Sequence[float] | None) -> tuple[bool, float, float]:
    """The one scale rule of every drawing of a matrix (the figures of visualize, the demo and study pages; the
    server's page, matching/serving/page/page.js `scaleOf`): (diverging?, low, high). A matrix whose formula can take
    both signs (its `value_range` starts below 0: CoDA's tanh(E) and M) is drawn on a diverging scale centred on 0
    up to its largest |value|, whatever one pair's cells are; one of unknown formula, when its cells leave [0, 1];
    else a sequential scale over its range ([0, 1] by default)."""
    lo, hi = float(m.min()), float(m.max())
    signed = value_range[0] < 0 if value_range else (lo < 0 or hi > 1)
    if signed:
        limit = max(1e-6, abs(lo), abs(hi))
        return True, -limit, limit
    return (False, float(value_range[0]), float(value_range[1])) if value_range else (False, 0.0, 1.0)
