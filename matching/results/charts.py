"""The report's chart: the rows of the table as bars with their spread over seeds, beside the paper's numbers."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from matching.extras import require
from matching.results.rows import Comparison, Row
from matching.results.significance import RESOLVED
from matching.results.tables import points


def write_chart(rows: list[Row], path: Path) -> list[str]:
    """One panel per task × metric × split: each row's mean with its std over seeds (no bar for a single seed's
    spread), the paper's test number dashed, and with a baseline each row's Δ, p and verdict above its bar. Each
    aligner keeps one colour in every panel (the baseline hatched); the axis starts at 0, so that a bar's height
    does not exaggerate a difference; a test split is marked final, a dev split as the one models were selected on.
    Returns the panels' titles."""
    require("matplotlib", "plots", "the report's chart").use("Agg")
    import textwrap

    import matplotlib.pyplot as plt

    panels: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.n:
            panels[(r.task, r.metric, r.split)].append(r)
    if not panels:
        return []
    columns = min(3, len(panels))
    height = 1 + -(-len(panels) // columns) * 4.2
    widest = max(len(v) for v in panels.values())
    fig, axes = plt.subplots(-(-len(panels) // columns), columns, figsize=(columns * max(4.0, 1.3 * widest), height),
                             squeeze=False)  # fmt: skip
    colours = _aligner_colours(rows, plt)
    for ax, ((task, metric, split), shown) in zip(axes.flat, sorted(panels.items()), strict=False):
        x = range(len(shown))
        means = [r.mean for r in shown]
        errors = [r.std if r.n > 1 else 0.0 for r in shown]
        bars = ax.bar(x, means, yerr=errors, capsize=4, color=[colours[r.aligner] for r in shown])
        for bar, r in zip(bars, shown, strict=True):
            if r.comparison is not None and r.comparison.is_baseline:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
        for i, r in enumerate(shown):
            top = means[i] + errors[i]
            if r.paper_test is not None:
                ax.plot([i - 0.4, i + 0.4], [float(r.paper_test)] * 2, color="black", linestyle="--", linewidth=1)
                top = max(top, float(r.paper_test))
            c = r.comparison or Comparison()
            note = f"n = {r.n}" + ("\nbaseline" if c.is_baseline else "")
            if c.tested:
                note = f"Δ {points(c.diff)} vs\n{c.baseline}\n{_p_text(c)}, {c.verdict}\n" + (
                    "" if math.isnan(c.detectable) else f"detectable {c.detectable:.1f}\n") + note  # fmt: skip
            ax.text(i, top + 0.5, note, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(x), ["\n".join(textwrap.wrap(r.label, 16)) for r in shown], fontsize=7)
        role = "held-out, final" if split.startswith("test") else "selection"
        ax.set_title(f"{task}: {split} {metric} ({role})", fontsize=10)
        ax.set_ylabel(f"{split} {metric} (%)")
        ax.set_xlabel("aligner and variant (bars: mean ± std over seeds; dashed: paper, test)", fontsize=7)
        high = max([m + e for m, e in zip(means, errors, strict=True)] + [float(r.paper_test or 0) for r in shown])
        ax.set_ylim(0.0, min(100.0, high + 14) if high + 14 < 100 else high + 14)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [f"{task}: {split} {metric}" for task, metric, split in sorted(panels)]


def _p_text(c: Comparison) -> str:
    """ "p = 0.012" (Holm-adjusted where the page adjusted it), or "too few seeds"."""
    if math.isnan(c.p_value):
        return "too few seeds"
    adjusted = c.p_adjusted is not None and not math.isnan(c.p_adjusted) and (c.compared_with or 1) > 1
    return f"p = {c.p_adjusted:.2g} (Holm)" if adjusted else f"p = {c.p_value:.2g}"


def _finite(x: float, instead: float) -> float:
    return instead if math.isnan(x) else x


def _aligner_colours(rows: list[Row], plt) -> dict[str, tuple]:
    """One colour per aligner, the same in every panel and in both charts."""
    palette = plt.get_cmap("tab10").colors
    return {a: palette[i % len(palette)] for i, a in enumerate(sorted({r.aligner for r in rows}))}


def ranked(rows: list[Row]) -> dict[tuple[str, str, str], list[Row]]:
    """The rows tested against a baseline, by (task, metric, split), each panel's largest difference first."""
    panels: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.tested:
            panels[(r.task, r.metric, r.split)].append(r)
    return {key: sorted(shown, key=lambda r: -r.comparison.diff) for key, shown in sorted(panels.items())}


def write_ranking(rows: list[Row], path: Path) -> list[str]:
    """The rows ranked by their difference from the baseline: one panel per task × metric × split, each tested row's
    Δ with its 95 % interval, best first, a filled marker where the paired test resolves it and a hollow one where
    it does not, and behind each row a grey band of ± the difference its units would detect (80 % power): an
    interval inside its band is a comparison too small to tell, whatever its sign. Colours as in `write_chart`.
    Returns the panels' titles; writes nothing when no row was tested."""
    require("matplotlib", "plots", "the report's ranking chart").use("Agg")
    import matplotlib.pyplot as plt

    panels = ranked(rows)
    if not panels:
        return []
    colours = _aligner_colours(rows, plt)
    tallest = max(len(v) for v in panels.values())
    fig, axes = plt.subplots(len(panels), 1, figsize=(9.0, len(panels) * (1.2 + 0.38 * tallest)), squeeze=False)
    for ax, ((task, metric, split), shown) in zip(axes.flat, panels.items(), strict=True):
        shown = shown[::-1]  # best at the top: matplotlib counts y upwards
        bands = [0.0 if math.isnan(r.comparison.detectable) else r.comparison.detectable for r in shown]
        for y, (r, band) in enumerate(zip(shown, bands, strict=True)):
            c = r.comparison
            if band:
                ax.barh(y, 2 * band, left=-band, height=0.7, color="0.9", zorder=0)
            colour = colours[r.aligner]
            face = colour if c.verdict == RESOLVED else "white"
            low, high = (c.diff, c.diff) if math.isnan(c.ci_low) else (c.ci_low, c.ci_high)
            ax.errorbar(c.diff, y, xerr=[[c.diff - low], [high - c.diff]], fmt="o", capsize=3,
                        color=colour, markerfacecolor=face, zorder=2)  # fmt: skip
            ax.text(high, y, f"  {points(c.diff)}, {_p_text(c)}", va="center", fontsize=7)
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(shown)), [f"{r.label.replace('aligner.', '')} ({r.mean:.2f})" for r in shown],
                      fontsize=7)  # fmt: skip
        ax.set_ylim(-0.6, len(shown) - 0.4)
        ends = [(_finite(r.comparison.ci_low, r.comparison.diff), _finite(r.comparison.ci_high, r.comparison.diff))
                for r in shown]  # fmt: skip
        lows = [min(low, -band) for (low, _), band in zip(ends, bands, strict=True)]
        highs = [max(high, band) for (_, high), band in zip(ends, bands, strict=True)]
        span = max(highs) - min(lows)
        ax.set_xlim(min(lows) - 0.05 * span, max(highs) + 0.3 * span)  # room for the labels on the right
        role = "held-out, final" if split.startswith("test") else "selection"
        base = next((r for r in rows if (r.task, r.metric, r.split) == (task, metric, split) and r.comparison
                     and r.comparison.is_baseline), None)  # fmt: skip
        against = shown[0].comparison.baseline + (f" ({base.mean:.2f})" if base else "")
        ax.set_title(f"{task}: {split} {metric} ({role}), Δ vs {against}", fontsize=10)
        ax.set_xlabel(f"Δ {metric} (points), 95 % interval over seeds and units; filled: resolved (Holm-adjusted "
                      "p < 0.05)\ngrey: ± detectable Δ (80 % power); each row: name (mean)", fontsize=7)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [f"{task}: {split} {metric}" for task, metric, split in panels]
