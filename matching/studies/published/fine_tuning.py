"""What the README and docs/how-to/ranking.md publish of the fine-tuning studies (conf/study/fine_tuning.yaml and
fine_tuning_selected.yaml, whose `published` names these renderers): the table of each fine-tuned family against the
frozen encoder and the CrossEncoder trained outside the study (benchmarks/cross_encoder.py), and the README's headline
of the declared primary comparison, each rendered from the study's page in docs/studies/<study>
(matching.results.publish)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from matching.results.publish import OUTSIDE_BASELINE, interval_cell, verdict_cell
from matching.results.study_table import study_rows
from matching.studies.published import declared_primary
from matching.studies.results import training_minutes
from matching.studies.spec import Primary

#: How the studies' training minutes were measured: one thread a run while other jobs shared the 2-core machine, some
#: runs before and some after the denormals fix (flush_denormal) changed what a late epoch costs. They say what a run
#: cost, not how fast either side trains on a quiet machine.
LOADED = "timed on a shared machine, some runs before the denormals fix: a cost, not a speed figure"
#: The study's tasks and families as its table shows them, in order.
TASKS = {"wikiqa": "WikiQA dev (122 questions)", "trecqa": "TrecQA clean-dev (65 questions)"}
FAMILIES = ("coda_frozen", "coda_n1", "coda_n2", "coda_n3", "softmax_n2")


def family_minutes(folder: Path, task: str, family: str, compared: dict | None) -> str:
    """Training minutes a run: the comparison's (benchmarks/cross_encoder.py), else the mean over the family's
    runs; either counts the seeds whose minutes are whole (`training_minutes`) and says so where one is left out."""
    if compared is not None:
        mean, seeds = compared["train_minutes"], compared["seeds"]
        timed = compared.get("timed_seeds", seeds)
    else:
        runs = sorted((folder / "runs" / task / family).glob("*/seed*/metrics.json"))
        whole = [m for m in (training_minutes(r.parent, json.loads(r.read_text())) for r in runs) if m is not None]
        mean, timed, seeds = (statistics.mean(whole) if whole else None), len(whole), len(runs)
    if mean is None:
        return "–"
    return f"{mean:.1f}" + (f" ({timed} of {seeds} seeds)" if timed < seeds else "")


def table(folder: Path) -> str:
    """The fine-tuning study's table: per task, each family's dev MAP and MRR (mean ± std over seeds), training
    minutes a run and Δ MAP against the frozen encoder with its interval and verdict. The CrossEncoder this study set
    beside them was trained 2 epochs, short of its dev-best epoch: its rows are on the study's page, and the comparison
    with a CrossEncoder at its best is the selected study's (`selected_headline`)."""
    rows = {(r["task"], r["family"], r["metric"]): r for r in study_rows(folder) if r["split"] == "dev"}
    lines = ["| | seeds | dev MAP | MRR | training minutes a run (shared machine) | Δ MAP vs frozen [95 % CI] "
             "(verdict) |",
             "|---|---|---|---|---|---|"]  # fmt: skip

    def spread(row: dict[str, str] | None) -> str:
        if row is None:
            return "–"
        return (
            f"{float(row['mean']):.2f} ± {float(row['std']):.2f}" if int(row["n"]) > 1 else f"{float(row['mean']):.2f}"
        )

    for task, title in TASKS.items():
        found = [f for f in FAMILIES if (task, f, "map") in rows]
        if not found:
            lines.append(f"| **{title}**: not run yet | – | – | – | – | – |")
            continue
        lines.append(f"| **{title}** | | | | | |")
        for family in found:
            r = rows[(task, family, "map")]
            frozen = (
                "–"
                if family == "coda_frozen"
                else f"{interval_cell(r, 'coda_frozen')} ({verdict_cell(r, 'coda_frozen')})"
            )
            lines.append(f"| {r['label']} | {r['n']} | {spread(r)} | {spread(rows.get((task, family, 'mrr')))} | "
                         f"{family_minutes(folder, task, family, None)} | {frozen} |")  # fmt: skip
        for family in (f for f in FAMILIES if f not in found):
            lines.append(f"| `{family}`: not run yet | – | – | – | – | – |")
    return "\n".join(lines)


def headline(folder: Path, primary: dict[str, Primary] | None = None, study: str = "fine_tuning") -> str:
    """A sentence for the README per task compared (WikiQA's first): the study's primary comparison, a fine-tuned
    family's dev MAP against the CrossEncoder fine-tuned as long, with the interval and verdict that count both sides'
    seeds, and the family's Δ over the frozen encoder; `primary` as `declared_primary` gives it (the study's spec by
    default). A study that declares none gets the fine-tuned family with the best dev MAP, and the sentence says that
    it was selected on the dev questions it reports. `study`: fine_tuning (2 epochs each side) or
    fine_tuning_selected (both sides' epochs chosen on dev)."""
    primary = declared_primary(folder) if primary is None else primary
    rows = {(r["task"], r["family"], r["metric"]): r for r in study_rows(folder) if r["split"] == "dev"}
    labels = {r["family"]: r["label"] for r in study_rows(folder)}
    sentences = []
    for task, split in (("wikiqa", "WikiQA dev"), ("trecqa", "TrecQA clean-dev")):
        side = folder / OUTSIDE_BASELINE / task / "comparison.json"
        comparison = json.loads(side.read_text()) if side.is_file() else {"compared": []}
        tuned = [row for row in comparison["compared"] if row["name"] != "coda_frozen"]
        if not tuned:
            continue
        declared = primary.get(task)
        chosen = [row for row in tuned if declared and row["name"] == declared.family]
        best = chosen[0] if chosen else max(tuned, key=lambda row: row["map"]["mean"])
        ce = comparison["cross_encoder"]
        numbers = (f"MAP **{best['map']['mean']:.2f} ± {best['map']['std']:.2f}** against {ce['map']['mean']:.2f} ± "
                   f"{ce['map']['std']:.2f}")  # fmt: skip
        if best.get("too_few_seeds"):  # no interval yet: a verdict about the method needs 3 seeds a side
            verdict = f"{best['difference']:+.2f}, no verdict yet: it needs 3 seeds a side"
        else:
            verdict = (f"{best['difference']:+.2f} [{best['low']:+.2f}, {best['high']:+.2f}], {best['verdict']}, "
                       f"p = {best['p_holm']:.2g}")  # fmt: skip
        timed = best.get("timed_seeds", best["seeds"])  # seeds whose minutes are whole (results.training_minutes)
        ours = f"{best['train_minutes']:.0f}" if best["train_minutes"] is not None else "–"
        ours += f" (over {timed} of its {best['seeds']} seeds)" if timed < best["seeds"] else ""
        detail = (f"{best['seeds']} and {ce['seeds']} seeds; {verdict}; {ours} against {ce['train_minutes']:.0f} "
                  f"training minutes a run on one thread, {LOADED}")  # fmt: skip
        frozen = rows.get((task, best["name"], "map"))
        if frozen and frozen.get("coda_frozen_diff"):
            detail += (f"; over the frozen encoder {interval_cell(frozen, 'coda_frozen')}, "
                       f"{verdict_cell(frozen, 'coda_frozen')}")  # fmt: skip
        label = labels.get(best["name"], best["name"])
        if not sentences:
            if chosen:
                said = f"the study's primary comparison, {declared.when}"
            else:
                said = "selected: the fine-tuned family with the best dev MAP, reported on the same dev questions"
            how_long = (
                "fine-tuned from the same weights, each side's epochs chosen on dev (up to 8)"
                if study == "fine_tuning_selected"
                else "fine-tuned as long from the same weights"
            )
            sentences.append(f"{label} ({said}): {split} {numbers} for a MiniLM-L6 CrossEncoder {how_long} "
                             f"({detail}).")  # fmt: skip
        else:
            sentences.append(f"{split}: {label}, {numbers} ({detail}).")
    not_yet = f"Fine-tuned against a CrossEncoder: not run yet (`study={study}`)."
    return " ".join(sentences) or not_yet


def selected_headline(folder: Path) -> str:
    """The README's sentence of the fine-tuning comparison with both sides' epochs chosen on dev."""
    return headline(folder, study="fine_tuning_selected")
