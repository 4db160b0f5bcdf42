"""Alignment heat-maps and value histograms of a trained model.

    matching-visualize ckpt=<path> a="..." b="..." [out=file.png] [show_intra=false]
    matching-visualize ckpt=<path> mode=histogram [split=dev] [out=file.png] [max_pairs=2000]

Heat-map mode draws, for one pair, every matrix the aligner used, labelled with the tokens (the first text `a` down
the side, the second `b` along the bottom) and titled with what it is: softmax weights both ways (`softmax_a`
aligns each token of a to b, its rows sum to 1; `softmax_b` each token of b to a, its columns sum to 1); CoDA's
φ_E(E) (`affinity`, tanh(E) by default), the gate φ_N(N) and M; conflict's weights (and the intra-sentence matrices
with `show_intra=true`). The figure's title gives both texts and the prediction (label and probabilities, or
P(match) and the ranking score). Histogram mode collects the values of those matrices over the real
(non-padding) cells of a dev set, as in the CoDA paper's Figure 2, and prints (and writes as JSON beside the
PNG) each matrix's range, mean and share of negative cells: a CoDA model that never subtracts shows 0 % negative
M cells. Options are in conf/visualize.yaml; any key of the run's saved config can be overridden too (e.g.
`paths.data_dir=...`). The texts a= and b= are taken as typed (commas, apostrophes and brackets included).
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Mapping
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
    plt = _plt()
    names = list(matrices)
    cell = 0.32
    width = max(4.2, cell * max(len(matrices[n][0]) for n in names) + 2.4)
    height = max(3.2, cell * max(len(matrices[n]) for n in names) + 2.4)
    fig, axes = plt.subplots(1, len(names), figsize=(width * len(names), height + 0.2 * title.count("\n")),
                             squeeze=False)  # fmt: skip
    for ax, name in zip(axes[0], names, strict=True):
        m = matrices[name]
        intra = name.startswith("intra_")
        row_side = "b" if name.startswith("intra_b") else "a"
        col_side = row_side if intra else "b"
        rows, cols = (tokens_b if row_side == "b" else tokens_a), (tokens_b if col_side == "b" else tokens_a)
        signed = bool(m.min() < 0 or m.max() > 1)  # not weights in [0, 1]: a colour map centred on 0
        limit = max(1e-6, float(np.abs(m).max())) if signed else 1.0
        image = ax.imshow(m, cmap="RdBu_r" if signed else "Blues", vmin=-limit if signed else 0.0, vmax=limit)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_ylabel(f"{row_side} ({'first' if row_side == 'a' else 'second'} text)", fontsize=9)
        ax.set_xlabel(f"{col_side} ({'first' if col_side == 'a' else 'second'} text)", fontsize=9)
        caption = (captions or {}).get(name, name)
        ax.set_title("\n".join(textwrap.wrap(caption, max(24, int(width * 8)))), fontsize=9)
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


def heatmap(matcher: Matcher, a: str, b: str, out: Path, show_intra: bool = False) -> Path:
    """The heat-maps of one pair, titled with the run (task, aligner), both texts and the prediction."""
    run = matcher.run
    aligned = matcher.align(a, b)
    matrices = aligned["matrices"]
    if not show_intra:
        matrices = {k: v for k, v in matrices.items() if not k.startswith("intra_")}
    captions = {name: describe(name, run.cfg) for name in matrices}
    width = max(60, 45 * len(matrices))
    lines = [
        f"{run.task.name} · {option_name(run.cfg, 'aligner')}",
        *textwrap.wrap(f"a: {a}", width),
        *textwrap.wrap(f"b: {b}", width),
        prediction_text(matcher, aligned, a, b),
    ]
    return draw_heatmaps(aligned["a_tokens"], aligned["b_tokens"], matrices, out, "\n".join(lines), captions)


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
    matcher = Matcher(load_trained(cfg.ckpt, cfg))
    run = matcher.run
    aligner = option_name(run.cfg, "aligner")
    if cfg.mode == "heatmap":
        out = heatmap(matcher, str(cfg.a), str(cfg.b), Path(cfg.out or run.run_dir / "alignment.png"), cfg.show_intra)
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
