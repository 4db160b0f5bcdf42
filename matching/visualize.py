"""Alignment heat-maps and value histograms of a trained model.

    matching-visualize ckpt=<path> a="..." b="..." [out=file.png] [show_intra=false]
    matching-visualize ckpt=<path> mode=histogram [split=dev] [out=file.png] [max_pairs=2000]

Heat-map mode draws, for one pair, every matrix the aligner used, labelled with the tokens: softmax weights
both ways; CoDA's φ_E(E) (`affinity`, tanh(E) by default), the gate φ_N(N) and M; conflict's weights (and the
intra-sentence matrices with `show_intra=true`). Histogram mode collects the values of those matrices over the real
(non-padding) cells of a dev set, as in the CoDA paper's Figure 2, and prints (and writes as JSON beside the
PNG) each matrix's range, mean and share of negative cells: a CoDA model that never subtracts shows 0 % negative
M cells. Options are in conf/visualize.yaml; any key of the run's saved config can be overridden too (e.g.
`paths.data_dir=...`). The texts a= and b= are taken as typed (commas, apostrophes and brackets included).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from matching.cli import command
from matching.extras import require
from matching.files import write_json
from matching.matcher import Matcher
from matching.report import option_name
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
    tokens_a: list[str], tokens_b: list[str], matrices: dict[str, np.ndarray], out: Path, title: str = ""
) -> Path:
    plt = _plt()
    names = list(matrices)
    cell = 0.32
    width = max(3.0, cell * max(len(matrices[n][0]) for n in names) + 2.0)
    height = max(2.5, cell * max(len(matrices[n]) for n in names) + 1.8)
    fig, axes = plt.subplots(1, len(names), figsize=(width * len(names), height), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        m = matrices[name]
        intra = name.startswith("intra_")
        rows = tokens_b if name.startswith("intra_b") else tokens_a
        cols = rows if intra else tokens_b
        signed = bool(m.min() < 0 or m.max() > 1)  # not weights in [0, 1]: a colour map centred on 0
        limit = max(1e-6, float(np.abs(m).max())) if signed else 1.0
        image = ax.imshow(m, cmap="RdBu_r" if signed else "Blues", vmin=-limit if signed else 0.0, vmax=limit)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_title(name, fontsize=10)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return _save(fig, out, title)


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


def draw_histograms(values: dict[str, np.ndarray], out: Path, title: str = "") -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, len(values), figsize=(3.6 * len(values), 3.0), squeeze=False)
    for ax, (name, v) in zip(axes[0], values.items(), strict=True):
        ax.hist(v, bins=60, color="tab:blue")
        ax.axvline(0.0, color="black", linewidth=0.6)
        ax.set_title(f"{name} ({len(v):,} cells, {100 * (v < 0).mean():.1f} % < 0)", fontsize=10)
        ax.set_yscale("log")
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
        aligned = matcher.align(str(cfg.a), str(cfg.b))
        tokens_a, tokens_b, matrices = aligned["a_tokens"], aligned["b_tokens"], aligned["matrices"]
        if not cfg.show_intra:
            matrices = {k: v for k, v in matrices.items() if not k.startswith("intra_")}
        out = Path(cfg.out or run.run_dir / "alignment.png")
        draw_heatmaps(tokens_a, tokens_b, matrices, out, title=f"{run.task.name} · {aligner}")
    else:
        values = matrix_values(run, str(cfg.split), int(cfg.max_pairs))
        out = Path(cfg.out or run.run_dir / f"matrix_values_{cfg.split}.png")
        draw_histograms(values, out, title=f"{run.task.name} {cfg.split} · {aligner}")
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
