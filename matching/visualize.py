"""Alignment heat-maps and value histograms of a trained model.

    matching-visualize ckpt=<path> a="..." b="..." [out=file.png] [show_intra=false] [compare=[<run>,<run>]]
    matching-visualize ckpt=<path> mode=histogram [split=dev] [out=file.png] [max_pairs=2000]

Heat-map mode draws, for one pair, every matrix the aligner used, labelled with the tokens (the first text `a` down
the side, the second `b` along the bottom) and titled with what it is: softmax weights both ways (`softmax_a`
aligns each token of a to b, its rows sum to 1; `softmax_b` each token of b to a, its columns sum to 1); CoDA's
φ_E(E) (`affinity`, tanh(E) by default), the gate φ_N(N) and M; conflict's weights (and the intra-sentence matrices
with `show_intra=true`). The figure's title gives both texts and the prediction (label and probabilities, or
P(match) and the ranking score). `compare=` adds more runs (run directories or checkpoints), one row of heat-maps
each under the first, each row's first panel naming its run and its prediction: the same pair through several
aligners side by side (each run in its own saved config and dtype). Histogram mode collects the values of those
matrices over the real (non-padding) cells of a dev set, as in the CoDA paper's Figure 2, and prints (and writes
as JSON beside the PNG) each matrix's range, mean and share of negative cells: a CoDA model that never subtracts
shows 0 % negative M cells. Options are in conf/visualize.yaml; any key of the run's saved config can be
overridden too (e.g. `paths.data_dir=...`). The texts a= and b= are taken as typed (commas, apostrophes and
brackets included).
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from matching.cli import command
from matching.extras import require
from matching.files import write_json
from matching.matcher import Matcher
from matching.matrices import describe
from matching.results.discovery import option_name
from matching.runs import RunError, TrainedRun, load_trained

log = logging.getLogger(__name__)


def _plt():
    require("matplotlib", "plots", "drawing heat-maps and histograms").use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, title: str) -> Path:
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
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
    rows: list[tuple[list[str], list[str], dict[str, np.ndarray], Mapping[str, str]]], out: Path, title: str = ""
) -> Path:
    """One row of heat-maps per model (its tokens of a and b, its matrices and their captions), as in
    `draw_heatmaps`; a row with fewer matrices than the widest leaves its last panels blank."""
    plt = _plt()
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
    fig, axes = plt.subplots(len(rows), columns, figsize=size, squeeze=False)
    for row_axes, titles, (tokens_a, tokens_b, matrices, _) in zip(axes, wrapped, rows, strict=True):
        for ax in row_axes[len(matrices) :]:
            ax.axis("off")
        for ax, name in zip(row_axes, matrices, strict=False):
            m = matrices[name]
            intra = name.startswith("intra_")
            row_side = "b" if name.startswith("intra_b") else "a"
            col_side = row_side if intra else "b"
            ys, xs = (tokens_b if row_side == "b" else tokens_a), (tokens_b if col_side == "b" else tokens_a)
            signed = bool(m.min() < 0 or m.max() > 1)  # not weights in [0, 1]: a colour map centred on 0
            limit = max(1e-6, float(np.abs(m).max())) if signed else 1.0
            image = ax.imshow(m, cmap="RdBu_r" if signed else "Blues", vmin=-limit if signed else 0.0, vmax=limit)
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


def run_label(cfg: Mapping) -> str:
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
        captions = {name: describe(name, each.run.cfg) for name in matrices}
        predictions.append(prediction_text(each, aligned, a, b))
        if others:
            first = next(iter(captions))
            name = labels[i] if labels else run_label(each.run.cfg)
            captions[first] = f"{name}: {predictions[-1]}\n{captions[first]}"
        rows.append((aligned["a_tokens"], aligned["b_tokens"], matrices, captions))
    width = max(60, 45 * max(len(row[2]) for row in rows))
    run = matcher.run
    head = f"{run.task.name} · " + (f"{len(rows)} runs" if others else option_name(run.cfg, "aligner"))
    lines = [head, *textwrap.wrap(f"a: {a}", width), *textwrap.wrap(f"b: {b}", width)]
    if not others:
        lines.append(predictions[0])
    return draw_heatmap_rows(rows, out, "\n".join(lines))


def matrix_values(run: TrainedRun, split: str = "dev", max_pairs: int = 2000) -> dict[str, np.ndarray]:
    """Values of every cross-alignment matrix over the real cells of (up to `max_pairs` of) a split."""
    if split not in run.task.named_splits:
        raise RunError(f"unknown split {split!r}; choose one of {run.task.named_splits}")
    run.data.prepare_splits([split])
    values: dict[str, list[np.ndarray]] = {}
    seen = 0
    for batch in run.data.loader(split):
        out = run.predict(batch)
        valid = out.mask_a.unsqueeze(2) & out.mask_b.unsqueeze(1)  # (B, La, Lb) real cells
        for name, m in out.matrices.items():
            if not name.startswith("intra_"):
                values.setdefault(name, []).append(m[valid].float().numpy())
        seen += len(batch["label"])
        if seen >= max_pairs:
            break
    return {k: np.concatenate(v) for k, v in values.items()}


def value_summary(values: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Per matrix: cells, min, max, mean, 1st/50th/99th percentiles and the share of negative cells."""
    summary = {}
    for name, v in values.items():
        low, median, high = np.percentile(v, [1, 50, 99]) if len(v) else (np.nan,) * 3
        summary[name] = {
            "cells": int(len(v)), "min": float(v.min()), "max": float(v.max()), "mean": float(v.mean()),
            "p01": float(low), "median": float(median), "p99": float(high), "negative": float((v < 0).mean()),
        }  # fmt: skip
    return summary


def draw_histograms(
    values: dict[str, np.ndarray], out: Path, title: str = "", captions: Mapping[str, str] | None = None
) -> Path:
    """One histogram per matrix of the values of its real (non-padding) cells, log-scaled counts."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(values), figsize=(4.2 * len(values), 3.6), squeeze=False)
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


def visualize(cfg: DictConfig) -> Path:
    """The `visualize` command on a composed config (conf/visualize.yaml over the run's saved config)."""
    if cfg.mode not in ("heatmap", "histogram"):
        raise RunError(f"mode must be heatmap or histogram, got {cfg.mode!r}")
    if cfg.mode == "heatmap" and (cfg.a is None or cfg.b is None):
        raise RunError('heat-map mode needs both texts: a="..." b="..."')
    compare = list(cfg.get("compare") or [])
    if compare and cfg.mode != "heatmap":
        raise RunError("compare= draws several runs' heat-maps of one pair: it needs mode=heatmap")
    matcher = Matcher(load_trained(cfg.ckpt, cfg))
    run = matcher.run
    others = tuple(Matcher.load(path) for path in compare)  # each run as it was saved
    aligner = option_name(run.cfg, "aligner")
    if cfg.mode == "heatmap":
        out = Path(cfg.out or run.run_dir / ("alignments.png" if others else "alignment.png"))
        heatmap(matcher, str(cfg.a), str(cfg.b), out, cfg.show_intra, others)
    else:
        values = matrix_values(run, str(cfg.split), int(cfg.max_pairs))
        out = Path(cfg.out or run.run_dir / f"matrix_values_{cfg.split}.png")
        captions = {name: describe(name, run.cfg) for name in values}
        draw_histograms(values, out, title=f"{run.task.name} {cfg.split} · {aligner}", captions=captions)
        summary = value_summary(values)
        write_json(out.with_suffix(".json"), summary)
        print(f"{'matrix':<12} {'cells':>9} {'min':>7} {'p01':>7} {'median':>7} {'p99':>7} {'max':>7} {'negative':>9}")
        for name, s in summary.items():
            print(f"{name:<12} {s['cells']:>9,} {s['min']:>7.3f} {s['p01']:>7.3f} {s['median']:>7.3f} {s['p99']:>7.3f} "
                  f"{s['max']:>7.3f} {100 * s['negative']:>8.1f}%")  # fmt: skip
        print(f"wrote {out.with_suffix('.json')}")
    print(f"wrote {out}")
    return out


main = command("visualize", visualize, uses_run=True, verbatim=("a", "b"))

if __name__ == "__main__":
    sys.exit(main())
