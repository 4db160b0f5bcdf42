"""What the README and docs/results/index.md publish of the signed-aligner study (conf/study/signed_aligners.yaml, whose
`published` names these renderers): per task, every family against CoDA centred, softmax centred and (a gated one)
itself ungated; and the README's answer to the study's question, each rendered from the study's page in
docs/studies/signed_aligners (matching.results.publish)."""

from __future__ import annotations

from pathlib import Path

from matching.results.publish import interval_cell, mean_cell, verdict_cell
from matching.results.study_table import study_rows
from matching.studies.published import centring

#: The study's tasks as its tables say them, in order: the centring study's, whose tasks these are, and SciTail over
#: the frozen encoder (the SciTail study's task).
TASKS = {t: centring.TASKS[t] for t in ("snli_check", "trecqa", "wikiqa", "snli_check_encoder", "trecqa_encoder")}
TASKS["scitail_encoder"] = "SciTail dev acc, frozen encoder"
#: The families, in the order the tables list them: the two baselines, then the aligners after CoDA, each followed by
#: its gated twin.
FAMILIES = (
    "softmax_centred", "softmax_centred_gated", "coda_centred", "coda_centred_gated", "differential",
    "differential_gated", "cog", "cog_gated", "softpick", "softpick_gated", "sigmoid", "sigmoid_gated",
)  # fmt: skip
#: The metrics its tasks are monitored by (a row of another metric is left out).
MONITORED = {"acc", "map"}
#: The study's questions, by the families that answer them: signed (weights of both signs), able to attend to nothing
#: (a row of zeros), and the gate on the two baselines.
SIGNED = ("differential", "cog")
ATTEND_TO_NOTHING = ("softpick", "sigmoid")
GATED_BASELINES = ("softmax_centred_gated", "coda_centred_gated")


def _rows(folder: Path) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["task"], r["family"]): r for r in study_rows(folder) if r["split"] == "dev" and r["metric"] in MONITORED}


def _tasks(rows: dict[tuple[str, str], dict[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """(the tasks with runs, as (task, title), in the tables' order; the titles of those without)."""
    run = [(task, title) for task, title in TASKS.items() if any((task, f) in rows for f in FAMILIES)]
    return run, [title for task, title in TASKS.items() if (task, title) not in run]


def _against(row: dict[str, str] | None, prefix: str) -> str:
    """A family's difference from `prefix` with its interval and verdict, as one cell ("–": no such comparison)."""
    if row is None or not row.get(f"{prefix}_diff"):
        return "–"
    return f"{interval_cell(row, prefix)}, {verdict_cell(row, prefix)}"


def table(folder: Path) -> str:
    """One table per task: each family's dev mean ± std (seeds), its difference from CoDA centred and from softmax
    centred, and a gated family's from itself ungated, each with its 95 % interval (seeds and units) and verdict
    (Holm over the page); a task without runs says so in one line."""
    rows = _rows(folder)
    labels = {family: row["label"] for (_, family), row in rows.items()}
    run, waiting = _tasks(rows)
    blocks = []
    for task, title in run:
        lines = [f"| {title} | dev, mean ± std | − CoDA, centred | − softmax, centred | gated − ungated |",
                 "|---|---|---|---|---|"]  # fmt: skip
        for family in FAMILIES:
            row = rows.get((task, family))
            if row is None:
                continue
            cells = [mean_cell(row, counted=True), _against(row, "coda_centred"), _against(row, "softmax_centred"),
                     _against(row, "twin")]  # fmt: skip
            lines.append(f"| {labels.get(family, family)} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    if waiting:
        blocks.append(f"Tasks not run yet: {'; '.join(waiting)}.")
    return "\n\n".join(blocks)


def _said(rows: dict, task: str, families: tuple[str, ...], prefix: str) -> str:
    parts = []
    for family in families:
        row = rows.get((task, family))
        if row is not None and row.get(f"{prefix}_diff"):
            parts.append(f"{row['label']} {interval_cell(row, prefix)} ({verdict_cell(row, prefix)})")
    return "; ".join(parts)


def answer(folder: Path) -> str:
    """The README's answer, per task with runs: the signed aligners against CoDA centred, the aligners that can
    attend to nothing against softmax centred and CoDA centred, and the gate's effect on each baseline (gated −
    ungated), each with its interval and verdict; the tasks not run yet named."""
    rows = _rows(folder)
    run, waiting = _tasks(rows)
    said = []
    for task, title in run:
        parts = []
        signed = _said(rows, task, SIGNED, "coda_centred")
        if signed:
            parts.append(f"signed, against CoDA centred: {signed}")
        nothing = _said(rows, task, ATTEND_TO_NOTHING, "softmax_centred")
        if nothing:
            parts.append(f"able to attend to nothing, against softmax centred: {nothing}")
        gate = _said(rows, task, GATED_BASELINES, "twin")
        if gate:
            parts.append(f"the gate, gated − ungated: {gate}")
        said.append(f"**{title}**: " + "; ".join(parts) + ".")
    if waiting:
        said.append(f"Tasks not run yet: {'; '.join(waiting)}.")
    return "\n".join(said)
