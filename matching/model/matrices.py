"""What an aligner's matrices are, from the run's config: a panel's title (the formula and the name) and the range of
values a matrix's cells can take by its formula. Used by `visualize`'s heat-maps and the server's /align answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def matrix_title(name: str, cfg: Mapping | None = None) -> str:
    """What a matrix is, for a panel's title: its formula and its name (`tanh(E) (affinity)`, `softmax_a: ...`),
    from the run's aligner (or intra) config; `_a`/`_b` say which side the weights align. Weights of a kind the
    aligners declare (matching.model.aligners.CAPTIONS: every weighting, differential, conflict) say their formula and
    what each row holds; an unknown matrix (an aligner of one's own) keeps its name."""
    side, _, base = name.rpartition("/")
    node = _node(side, cfg)
    phi_e, phi_n, gate = node.get("phi_e", "tanh"), node.get("phi_n", "sigmoid"), node.get("gate", "center")
    e = "E − mean E" if node.get("center_e") else "E"
    n = {"center": f"{phi_n}(N − mean N)", "scale": f"2·{phi_n}(N)"}.get(gate, f"{phi_n}(N)")
    kind, _, direction = base.rpartition("_")
    known = {
        "affinity": f"{phi_e}({e}) (affinity)",
        "gate": f"{n} (gate)",
        "M": "M = affinity × gate",
    }
    caption = _caption(kind, node) if direction in ("a", "b") else None
    if base in known:
        text = known[base]
    elif caption is not None:
        formula, each = caption.formula, caption.each.format(whose="row" if direction == "a" else "column")
        formula = formula(node) if callable(formula) else formula
        if kind == "attention":  # matching/model/attention.py: the weights of its parts, averaged over its heads
            heads = "feature-wise, mean" if node.get("feature_wise") else f"{node.get('heads', 1)} heads, mean"
            formula = f"{node.get('distribution', 'softmax')} of {node.get('score', 'dot')} scores" + (
                f"; {heads}" if node.get("feature_wise") or node.get("heads", 1) != 1 else ""
            )
        what = "; ".join(part for part in (formula, each) if part)
        if side:  # intra-sentence: one side against itself
            text = f"{base}: weights of each {side[-1]} token over {side[-1]} itself ({what})"
        else:
            text = f"{base}: weights aligning each {direction} token to {'b' if direction == 'a' else 'a'} ({what})"
    else:
        text = base
    return f"intra {side[-1]}: {text}" if side else text


def _node(side: str, cfg: Mapping | None) -> Mapping:
    """The config node of the aligner that made a matrix: `intra` for an intra-sentence one, else `aligner`."""
    return (cfg or {}).get("intra" if side else "aligner") or {}


def _caption(kind: str, node: Mapping):
    """What the aligners declare of a kind of weights (matching.model.aligners.CAPTIONS); for the design space's
    `attention_a`/`_b`, its distribution's. None for a kind no aligner declares."""
    from matching.model.aligners import CAPTIONS
    from matching.model.aligners.weightings import find

    if kind == "attention":
        try:
            return CAPTIONS[find(node.get("distribution", "softmax")).name]
        except Exception:  # a distribution that cannot be found here: the weights' values are not known
            return None
    return CAPTIONS.get(kind)


def value_range(name: str, cfg: Mapping | None = None) -> list[float] | None:
    """The range [low, high] that a matrix's cells can take by its formula, from the run's aligner (or intra)
    config: what the aligners declare of its kind of weights ([0, 1] for softmax, conflict, softpick, sigmoid; [−1, 1]
    for the signed ones, cog and differential; the design space's, its distribution's), φ_E's range for CoDA's affinity
    (tanh: [−1, 1]), the gate's, and their product for M. A matrix that can take both signs is drawn on a diverging
    scale even where one pair's cells happen to share a sign. None for a matrix of unknown formula (an aligner of one's
    own)."""
    from matching.model.aligners.coda import ACTIVATION_RANGES

    side, _, base = name.rpartition("/")
    node = _node(side, cfg)
    kind, _, direction = base.rpartition("_")
    caption = _caption(kind, node) if direction in ("a", "b") else None
    if caption is not None:
        return list(caption.values)
    affinity = ACTIVATION_RANGES.get(node.get("phi_e", "tanh"))
    gate = ACTIVATION_RANGES.get(node.get("phi_n", "sigmoid"))
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
