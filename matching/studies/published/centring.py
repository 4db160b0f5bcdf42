"""What the README and docs/results/index.md publish of the centring study (conf/study/centring.yaml, whose `published`
names these renderers): its controlled table, the seeds each cell took, and the headline of its declared primary
comparison, each rendered from the study's page in docs/studies/centring (matching.results.publish)."""

from __future__ import annotations

import collections
from pathlib import Path

from matching.results.publish import interval_cell, mean_cell, verdict_cell
from matching.results.study_table import study_rows
from matching.studies.published import declared_primary
from matching.studies.spec import Primary

#: The study's tasks as its tables show them, in order: (task, what its row says).
TASKS = {
    "snli_check": "SNLI check acc (842 dev pairs)",
    "trecqa": "TrecQA clean-dev MAP (65 questions)",
    "wikiqa": "WikiQA dev MAP (122 questions)",
    "snli_check_encoder": "SNLI check acc, frozen encoder",
    "trecqa_encoder": "TrecQA clean-dev MAP, frozen encoder",
    "wikiqa_encoder": "WikiQA dev MAP, frozen encoder",
}
#: Its families as the table's columns show them, in order.
FAMILIES = ("softmax", "softmax_centred", "coda", "coda_centred", "conflict", "conflict_centred",
            "softmax_conflict", "softmax_conflict_centred")  # fmt: skip
#: The metrics its tasks are monitored by (a row of another metric is left out).
MONITORED = {"acc", "map"}


def table(folder: Path) -> str:
    """The controlled comparison's table: each family's dev mean ± std (seeds), then CoDA centred against softmax
    centred, then each centred aligner against itself uncentred (its twin), each with its interval and verdict."""
    rows = [r for r in study_rows(folder) if r["split"] == "dev" and r["metric"] in MONITORED]
    by = {(r["task"], r["family"]): r for r in rows}
    labels = {r["family"]: r["label"] for r in rows}
    families = [f for f in FAMILIES if f in labels] or list(FAMILIES)
    head = "| dev, mean ± std over seeds | " + " | ".join(labels.get(f, f) for f in families)
    head += " | CoDA, centred − softmax, centred [95 % CI] | verdict (Holm) |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    listed = []
    for task, title in TASKS.items():
        cells = [mean_cell(by.get((task, f))) for f in families]
        coda = by.get((task, "coda_centred"))
        if all(c == "–" for c in cells):
            lines.append(f"| {title} | " + " | ".join(["not run yet"] + ["–"] * (len(families) + 1)) + " |")
            continue
        vs = [interval_cell(coda, "softmax_centred"), verdict_cell(coda, "softmax_centred")] if coda else ["–", "–"]
        lines.append(f"| {title} | " + " | ".join(cells + vs) + " |")
        parts = [f"{labels[f].split(',')[0]} {interval_cell(by[(task, f)], 'twin')} ({by[(task, f)]['twin_verdict']})"
                 for f in families if (task, f) in by and by[(task, f)].get("twin_diff")]  # fmt: skip
        if parts:
            listed.append(f"- {title}: " + "; ".join(parts) + ".")
    note = (f"{seed_counts(rows, labels)} Centred − uncentred, each aligner against itself (95 % CI counting seeds "
            "and units, Holm over the page):")  # fmt: skip
    return "\n".join([*lines, "", note, "", *listed]) if listed else "\n".join(lines)


def seed_counts(rows: list[dict[str, str]], labels: dict[str, str]) -> str:
    """How many seeds each cell has: the count most cells have, then every cell with another (a study that adds seeds
    until decided gives the undecided comparisons' families more)."""
    counts = collections.Counter(r["n"] for r in rows if r["n"])
    if not counts:
        return ""
    usual = counts.most_common(1)[0][0]
    others = []
    for task, title in {r["task"]: TASKS.get(r["task"], r["task"]) for r in rows}.items():
        cells = {r["family"]: r["n"] for r in rows if r["task"] == task and r["n"]}
        off = {family: n for family, n in cells.items() if n != usual}
        if not off:
            continue
        if len(off) == len(cells) and len(set(off.values())) == 1:  # the whole task took more (or fewer)
            others.append(f"{title}: {next(iter(off.values()))} in every cell")
            continue
        said_of = []  # an aligner centred and not, with the same count, said once
        for family, n in off.items():
            base = family.removesuffix("_centred")
            if family != base and off.get(base) == n:
                continue
            both = family == base and off.get(f"{base}_centred") == n
            said_of.append(f"{labels[family]}{' (centred and not)' if both else ''} {n}")
        others.append(f"{title}: {', '.join(said_of)}")
    said = f"Seeds per cell: {usual}" + (f", except {'; '.join(others)}" if others else "")
    return said + " (as the study's rule took them)."


def headline(folder: Path, primary: dict[str, Primary] | None = None) -> str:
    """One sentence per task of the study's declared primary comparison (conf/study/centring.yaml's `primary`: how
    much of CoDA's gain survives when softmax is centred too), beside the same two aligners uncentred."""
    primary = declared_primary(folder) if primary is None else primary
    found = study_rows(folder)
    rows = {(r["task"], r["family"]): r for r in found if r["split"] == "dev" and r["metric"] in MONITORED}
    labels = {r["family"]: r["label"] for r in found}
    said = []
    for task, title in TASKS.items():
        if task not in primary:
            continue
        family, against = primary[task].family, primary[task].against
        coda = rows.get((task, family))
        uncentred = rows.get((task, family.removesuffix("_centred")))
        if coda is None or not coda.get(f"{against}_diff"):
            continue
        text = (f"{title}: {labels.get(family, family)} − {labels.get(against, against)} "
                f"**{interval_cell(coda, against)}** ({verdict_cell(coda, against)}; {coda['n']} seeds)")  # fmt: skip
        plain = against.removesuffix("_centred")
        if family.endswith("_centred") and uncentred is not None and uncentred.get(f"{plain}_diff"):
            text += f", against {interval_cell(uncentred, plain)} for both uncentred"
        said.append(text)
    missing = [t for t in TASKS if t in primary and (t, primary[t].family) not in rows]
    out = "; ".join(said) + "." if said else "The controlled comparison has no finished task yet."
    if missing:
        out += f" Not run yet: {', '.join(missing)} (`make results` runs them)."
    return out


#: The README's summary: one line a task over the frozen encoder (the default for one's own pairs), the aligners a
#: newcomer chooses between; SciTail's line comes from its own study (docs/studies/scitail), which the row links.
SUMMARY_TASKS = {
    "snli_check_encoder": ("SNLI check (842 dev pairs)", "acc", "centring"),
    "trecqa_encoder": ("TrecQA clean-dev (65 questions)", "MAP", "centring"),
    "wikiqa_encoder": ("WikiQA dev (122 questions)", "MAP", "centring"),
    "scitail_encoder": ("SciTail dev (1,304 pairs)", "acc", "scitail"),
}
SUMMARY_FAMILIES = ("softmax", "coda", "coda_centred")


def readme_summary(folder: Path) -> str:
    """A line a task: each aligner's dev mean over its seeds (one decimal), the seeds, and a link to the study page
    that holds the intervals and verdicts. No interval or verdict here: the page says whether a gap is resolved."""
    lines = ["| task, dev, frozen MiniLM encoder | metric | softmax | CoDA | CoDA, centred | seeds | page |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    pages = {study: study_rows(folder.parent / study) for _, _, study in SUMMARY_TASKS.values()}
    for task, (title, metric, study) in SUMMARY_TASKS.items():
        rows = {r["family"]: r for r in pages[study]
                if r["task"] == task and r["split"] == "dev" and r["metric"] in MONITORED}  # fmt: skip
        means = [f"{float(rows[f]['mean']):.1f}" if f in rows else "–" for f in SUMMARY_FAMILIES]
        seeds = sorted({int(rows[f]["n"]) for f in SUMMARY_FAMILIES if f in rows})
        counted = "–" if not seeds else f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
        lines.append(f"| {title} | {metric} | " + " | ".join(means) + f" | {counted} | "
                     f"[{study}](docs/studies/{study}/study.md) |")  # fmt: skip
    return "\n".join(lines)
