"""Figures of a trained model's alignments: the heat-maps of one pair (several models side by side), and the
histograms of a matrix's values over a split. Drawn by `matching-visualize`, the demo and a study's page."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from matching.extras import require
from matching.matcher import Matcher
from matching.model.matrices import color_scale, matrix_title, value_range
from matching.saved.run_folder import option_name


def _plt():
    require("matplotlib", "plots", "drawing heat-maps and histograms").use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(rows: int, columns: int, size: tuple[float, float]):
    """A figure of rows × columns panels on matplotlib's constrained layout, which makes room for the title, the
    colour bars and the rotated token labels (`tight_layout` does not lay out colour bars, and left a heat-map's
    bottom tokens outside the image). Chosen here, when the figure is made: setting it at saving, after the colour
    bars are added, fails (tried)."""
    return _plt().subplots(rows, columns, figsize=size, squeeze=False, layout="constrained")


def _save(fig, out: Path, title: str) -> Path:
    """Saves a figure of `_figure` with its title above the panels."""
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(out, dpi=120)
    _plt().close(fig)
    return out


def draw_heatmaps(
    tokens_a: list[str],
    tokens_b: list[str],
    matrices: dict[str, np.ndarray],
    out: Path,
    title: str = "",
    captions: Mapping[str, str] | None = None,
) -> Path:
    """One heat-map per matrix, `a`'s tokens down the side and `b`'s along the bottom (an intra-sentence matrix:
    one side on both axes), each titled with `captions[name]` (default: the name)."""
    return draw_heatmap_rows([(tokens_a, tokens_b, matrices, captions or {})], out, title)


def draw_heatmap_rows(
    rows: list[tuple[list[str], list[str], dict[str, np.ndarray], Mapping[str, str]]],
    out: Path,
    title: str = "",
    ranges: Mapping[str, Sequence[float] | None] | None = None,
) -> Path:
    """One row of heat-maps per model (its tokens of a and b, its matrices and their captions), as in
    `draw_heatmaps`; a row with fewer matrices than the widest leaves its last panels blank. `ranges`: the values
    each matrix can take by its formula (matching.model.matrices.value_range), which choose its colour scale."""
    ranges = ranges or {}
    cell = 0.32
    columns = max(len(matrices) for _, _, matrices, _ in rows)
    every = [m for _, _, matrices, _ in rows for m in matrices.values()]
    width = max(4.2, cell * max(len(m[0]) for m in every) + 2.4)
    height = max(3.2, cell * max(len(m) for m in every) + 2.4)
    wrap = max(24, int(width * 8))
    wrapped = [
        {name: "\n".join(line for part in captions.get(name, name).splitlines() for line in textwrap.wrap(part, wrap))
         for name in matrices}
        for _, _, matrices, captions in rows
    ]  # fmt: skip
    lines = max(text.count("\n") + 1 for titles in wrapped for text in titles.values())
    size = (width * columns, (height + 0.15 * lines) * len(rows) + 0.2 * title.count("\n"))
    fig, axes = _figure(len(rows), columns, size)
    for row_axes, titles, (tokens_a, tokens_b, matrices, _) in zip(axes, wrapped, rows, strict=True):
        for ax in row_axes[len(matrices) :]:
            ax.axis("off")
        for ax, name in zip(row_axes, matrices, strict=False):
            m = matrices[name]
            intra = name.startswith("intra_")
            row_side = "b" if name.startswith("intra_b") else "a"
            col_side = row_side if intra else "b"
            ys, xs = (tokens_b if row_side == "b" else tokens_a), (tokens_b if col_side == "b" else tokens_a)
            signed, low, high = color_scale(m, ranges.get(name))  # the server page's rule (matching.model.matrices)
            image = ax.imshow(m, cmap="RdBu_r" if signed else "Blues", vmin=low, vmax=high)
            ax.set_xticks(range(len(xs)), xs, rotation=90, fontsize=8)
            ax.set_yticks(range(len(ys)), ys, fontsize=8)
            ax.set_ylabel(f"{row_side} ({'first' if row_side == 'a' else 'second'} text)", fontsize=9)
            ax.set_xlabel(f"{col_side} ({'first' if col_side == 'a' else 'second'} text)", fontsize=9)
            ax.set_title(titles[name], fontsize=9)
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return _save(fig, out, title)


def prediction_text(matcher: Matcher, aligned: dict, a: str, b: str) -> str:
    """What the model predicted for the pair, for a figure: the label and its probability (and the others'), or
    for a ranking model P(match) and the score it ranks by."""
    if matcher.kind == "rank":
        answer = matcher.predict((a, b))
        return f"predicted: P(match) = {answer['p_match']:.3f}, score {answer['score']:+.2f} (logit margin)"
    probs = aligned["probs"]
    others = ", ".join(f"{label} {p:.2f}" for label, p in sorted(probs.items(), key=lambda kv: -kv[1]))
    return f"predicted: {aligned['label']} ({others})"


def aligner_and_seed(cfg: Mapping) -> str:
    """A run's name in a figure: its aligner, its score function F where it has one (attention from parts: its
    distribution, score and heads), its seed."""
    node = cfg.get("aligner") or {}
    if node.get("projection"):
        detail = f" F={node['projection']}"
    elif node.get("distribution"):
        heads = "feature-wise" if node.get("feature_wise") else f"{node.get('heads', 1)} heads"
        detail = f" ({node['distribution']} of {node.get('score', 'dot')} scores, {heads})"
    else:
        detail = ""
    return f"{option_name(cfg, 'aligner')}{detail}, seed {cfg.get('seed')}"


def heatmap(
    matcher: Matcher,
    a: str,
    b: str,
    out: Path,
    show_intra: bool = False,
    others: tuple = (),
    labels: Sequence[str] | None = None,
) -> Path:
    """The heat-maps of one pair, titled with the run (task, aligner), both texts and the prediction. With `others`
    (more Matchers), one row per model, the first row `matcher`'s, each row's first panel naming its run (or its
    entry of `labels`, one per model) and its prediction: several aligners' alignments of the same pair side by
    side."""
    rows, predictions = [], []
    for i, each in enumerate((matcher, *others)):
        aligned = each.align(a, b)
        matrices = aligned["matrices"]
        if not show_intra:
            matrices = {k: v for k, v in matrices.items() if not k.startswith("intra_")}
        captions = {name: matrix_title(name, each.config) for name in matrices}
        predictions.append(prediction_text(each, aligned, a, b))
        if others:
            first = next(iter(captions))
            name = labels[i] if labels else aligner_and_seed(each.config)
            captions[first] = f"{name}: {predictions[-1]}\n{captions[first]}"
        rows.append((aligned["a_tokens"], aligned["b_tokens"], matrices, captions))
    width = max(60, 45 * max(len(row[2]) for row in rows))
    first = matcher
    head = f"{first.task} · " + (f"{len(rows)} runs" if others else option_name(first.config, "aligner"))
    lines = [head, *textwrap.wrap(f"a: {a}", width), *textwrap.wrap(f"b: {b}", width)]
    if not others:
        lines.append(predictions[0])
    ranges = {name: value_range(name, each.config) for each, row in zip((matcher, *others), rows, strict=True)
              for name in row[2]}  # fmt: skip
    return draw_heatmap_rows(rows, out, "\n".join(lines), ranges)


def draw_histograms(
    values: dict[str, np.ndarray], out: Path, title: str = "", captions: Mapping[str, str] | None = None
) -> Path:
    """One histogram per matrix of the values of its real (non-padding) cells, log-scaled counts."""
    fig, axes = _figure(1, len(values), (4.2 * len(values), 3.6))
    for ax, (name, v) in zip(axes[0], values.items(), strict=True):
        ax.hist(v, bins=60, color="tab:blue")
        ax.axvline(0.0, color="black", linewidth=0.6)
        caption = (captions or {}).get(name, name)
        ax.set_title("\n".join([*textwrap.wrap(caption, 40), f"{len(v):,} cells, {100 * (v < 0).mean():.1f} % < 0"]),
                     fontsize=9)  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("value of a cell", fontsize=9)
        ax.set_ylabel("cells (log scale)", fontsize=9)
    return _save(fig, out, title)
