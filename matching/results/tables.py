"""The report's table: one `Row` per task × aligner × variant × split × metric (mean ± std over seeds of each
metric the task's config names, `report_metrics`, with the paper's number from the same config, `paper`), each
row's `Comparison` with a baseline (`matching.results.significance` over the runs' `scores/` files), and the
table as Markdown and CSV; with a baseline, the questions (or examples) on which two rows disagree most."""

from __future__ import annotations

import csv
import io
import logging
import math
import statistics
from collections import defaultdict
from dataclasses import replace

from matching.results.discovery import Run
from matching.results.rows import BASELINE, Comparison, Row
from matching.results.scores import METRIC_COLUMNS, ranked_answers, unit_rows, unit_scores
from matching.results.significance import paired_test, seed_mean

log = logging.getLogger(__name__)


def metric_key(split: str, metric: str) -> str:
    """("val", "raw/map") -> "val_raw/map"; ("val", "map") -> "val/map"."""
    if "/" in metric:
        variant, name = metric.split("/", 1)
        return f"{split}_{variant}/{name}"
    return f"{split}/{metric}"


def _only_f(variant: str | None) -> bool:
    """A variant that names nothing but the score function F: the paper's number for the aligner applies."""
    return all(part.startswith("F=") for part in (variant or "").split())


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(runs: list[Run]) -> list[Row]:
    """One row per task × aligner × variant × metric × split: mean, std (sample) and number of the seeds that have
    the metric, the seeds planned, the missing ones and why, and the paper's number."""
    groups: dict[tuple[str, str, str | None], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.task, run.aligner, run.variant)].append(run)
    rows = []
    for (task, aligner, variant), members in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], g[0][2] or "")):
        finished = [r for r in members if not r.missing]
        seeds = sorted(r.seed for r in finished)
        if len(set(seeds)) != len(seeds):
            log.warning(
                "%s/%s %s: several runs share a seed (%s); each counts once", task, aligner, variant or "", seeds
            )
        planned = sorted({r.seed for r in members})
        reference = (finished or members)[0]
        task_config = reference.task_config
        paper = task_config.get("paper") or {}
        for metric in reference.metrics_reported:
            for split in ("val", "test"):
                key = metric_key(split, metric)
                has = [r for r in finished if key in r.metrics and not math.isnan(r.metrics[key])]
                if not has and (split == "test" or len(finished) == len(members)):
                    continue  # not computed by any run (test=false), or no run of the group has it at all
                values = [100 * r.metrics[key] for r in has]
                why: dict[int, str] = {}
                for r in members:
                    if r.seed not in {h.seed for h in has}:
                        why.setdefault(r.seed, r.missing or f"no {key} in metrics.json")
                mean, std = _mean_std(values) if values else (math.nan, math.nan)
                rows.append(
                    Row(
                        task=task,
                        aligner=aligner,
                        variant=variant,
                        split="dev" if split == "val" else "test",
                        metric=metric,
                        mean=round(mean, 2),
                        std=round(std, 2),
                        n=len(values),
                        seeds=tuple(sorted({h.seed for h in has})),
                        paper_test=(paper.get(aligner) or {}).get(metric) if _only_f(variant) else None,
                        planned=len(planned),
                        missing=dict(sorted(why.items())),
                    )
                )
    return rows


def _prefix_and_name(split: str, metric: str) -> tuple[str, str]:
    """("dev", "raw/map_raw") -> ("val_raw", "map_raw"): the score file's prefix and the metric's own name."""
    return tuple(metric_key("val" if split == "dev" else split, metric).split("/", 1))  # type: ignore[return-value]


def _baseline_row(row: Row, rows: list[Row], aligner: str, variant: str | None) -> tuple[Row | None, str]:
    """The row `row` is compared with: the baseline aligner's row with the same variant, else the one named by the
    baseline's own variant, else its only row; (None, why) when there is none or the choice is ambiguous."""
    same = [
        r for r in rows
        if r.aligner == aligner and (r.task, r.split, r.metric) == (row.task, row.split, row.metric) and r is not row
    ]  # fmt: skip
    for wanted in (row.variant, variant):
        chosen = [r for r in same if r.variant == wanted]
        if chosen and not chosen[0].n:  # planned, not finished: no other variant stands in for it
            return None, f"no finished {' '.join(filter(None, [aligner, wanted]))} run yet to compare with"
        if chosen:
            return chosen[0], ""
    if len(same) == 1:
        return same[0], ""
    if not same:
        return None, f"no {aligner} row for this task"
    options = " or ".join(sorted(f"""'baseline="{aligner} {r.variant or ""}"'""" for r in same))
    return None, f"several {aligner} rows: name one, {options}"


def compare(rows: list[Row], runs: list[Run], baseline: str) -> list[Row]:
    """Each row with its comparison with the baseline aligner's row (`baseline`: an aligner, optionally with a
    variant, e.g. "softmax" or "softmax F=parikh"): mean difference in points, 95 % bootstrap interval and paired
    randomization p over the units (questions or examples) both were scored on, each unit's score averaged over
    its seeds (`matching.results.significance`), from the runs' `scores/` files."""
    aligner, _, named = baseline.strip().partition(" ")
    variant = named or None
    members: dict[tuple[str, str, str | None], list[Run]] = defaultdict(list)
    for run in runs:
        if not run.missing:
            members[(run.task, run.aligner, run.variant)].append(run)

    def units(row: Row) -> tuple[dict[str, float] | None, int]:
        prefix, name = _prefix_and_name(row.split, row.metric)
        per_seed = [unit_scores(r.path, prefix, name) for r in members[(row.task, row.aligner, row.variant)]]
        have = [u for u in per_seed if u is not None]
        return (seed_mean(have) if have else None), len(have)

    compared = []
    for row in rows:
        comparison = Comparison()
        if row.aligner == aligner and (not variant or row.variant == variant):
            comparison = Comparison(note=BASELINE)
        elif row.n:
            base, why = _baseline_row(row, rows, aligner, variant)
            if base is None:
                comparison = Comparison(note=why)
            else:
                (mine, mine_seeds), (theirs, their_seeds) = units(row), units(base)
                test = paired_test(mine, theirs) if mine is not None and theirs is not None else None
                if test is None:
                    comparison = Comparison(
                        baseline=base.label,
                        note=f"{row.metric} has no per-question or per-example score: no paired test"
                        if _prefix_and_name(row.split, row.metric)[1] not in METRIC_COLUMNS
                        else "no per-question scores (runs from before scores/ existed: evaluate their best.ckpt)",
                    )
                else:
                    partial = mine_seeds < row.n or their_seeds < base.n
                    comparison = Comparison(
                        baseline=base.label, diff=round(100 * test.difference, 2), ci_low=round(100 * test.low, 2),
                        ci_high=round(100 * test.high, 2), p_value=float(f"{test.p_value:.3g}"), units=test.units,
                        detectable=round(100 * test.detectable, 2), verdict=test.verdict,
                        note=f"scores of {mine_seeds} of {row.n} and {their_seeds} of {base.n} seeds" if partial
                        else None,
                    )  # fmt: skip
        compared.append(replace(row, comparison=comparison))
    return compared


def _ours(r: Row) -> str:
    if not r.n:
        return "–"
    return f"{r.mean:.2f} ± {r.std:.2f}" if r.n > 1 else f"{r.mean:.2f} (n = 1)"


def points(x: float) -> str:
    """A difference in points, signed, two decimals; one that rounds to zero is "0.00" (not "-0.00")."""
    text = f"{float(x):+.2f}"
    return "0.00" if text in ("+0.00", "-0.00") else text


def _versus(c: Comparison) -> tuple[str, str, str]:
    """(Δ [95 % CI], p, what the comparison resolves) of a row compared with its baseline."""
    if not c.tested:
        return ("baseline", "–", "–") if c.is_baseline else (c.note or "–", "–", "–")
    detectable = "" if math.isnan(c.detectable) else f"; detectable: {c.detectable:.2f}"
    return (
        f"{points(c.diff)} [{points(c.ci_low)}, {points(c.ci_high)}]",
        f"{c.p_value:.3g}",
        f"{c.verdict}{detectable}",
    )


def to_markdown(rows: list[Row]) -> str:
    """The table; a row short of seeds says so (`1 of 2`) and names the missing ones in its last column; with a
    baseline, each row's difference from it (points, 95 % interval) and its p-value."""
    compared = any(r.comparison is not None for r in rows)
    header = "| task | aligner | variant | split | metric | ours (mean ± std, %) | seeds | paper (test, %) |"
    if compared:
        header += " vs baseline: Δ [95 % CI] | p | verdict; detectable Δ (80 % power) |"
    lines = [header + " missing |", "|---" * (header.count("|")) + "|"]
    for r in rows:
        seeds = f"{r.n} of {r.planned}" if r.missing else f"{r.n}"
        line = (
            f"| {r.task} | {r.aligner} | {r.variant or '–'} | {r.split} | {r.metric} | {_ours(r)} "
            f"| {seeds} | {r.paper_test if r.paper_test is not None else '–'} |"
        )
        if compared:
            delta, p, verdict = _versus(r.comparison or Comparison())
            line += f" {delta} | {p} | {verdict} |"
        lines.append(line + f" {r.missing_text() or '–'} |")
    return "\n".join(lines) + "\n"


#: The columns of report.csv: a row's, then with a baseline its comparison's.
ROW_COLUMNS = ("task", "aligner", "variant", "split", "metric", "mean", "std", "n", "seeds", "paper_test", "planned",
               "missing")  # fmt: skip
COMPARISON_COLUMNS = ("baseline", "diff", "ci_low", "ci_high", "p_value", "units", "detectable", "verdict", "note")


def to_csv(rows: list[Row]) -> str:
    """The table as CSV, one line per row: a value that is not there is an empty cell, the seeds are separated by
    spaces, the missing seeds as in the Markdown table."""

    def cells(r: Row) -> dict[str, object]:
        values = {k: getattr(r, k) for k in ROW_COLUMNS} | {"seeds": " ".join(map(str, r.seeds))}
        values["missing"] = r.missing_text()
        if r.comparison is not None:
            values |= {k: getattr(r.comparison, k) for k in COMPARISON_COLUMNS}
        return {k: "" if v is None else v for k, v in values.items()}

    table = io.StringIO()
    lines = [cells(r) for r in rows]
    writer = csv.DictWriter(table, fieldnames=list(lines[0]) if lines else ["task"])
    writer.writeheader()
    writer.writerows(lines)
    return table.getvalue()


def _short(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _ranked(runs: list[Run], prefix: str) -> dict[str, list[tuple[float, dict[str, str]]]]:
    """{question: [(score averaged over seeds, candidate row), ...] best first}, from the seeds' pair files."""
    totals: dict[str, dict[str, list]] = defaultdict(dict)
    for run in runs:
        for question, candidates in (ranked_answers(run.path, prefix) or {}).items():
            for c in candidates:
                totals[question].setdefault(c["index"], [c, []])[1].append(float(c["score"]))
    return {
        q: sorted(((sum(v) / len(v), c) for c, v in by_index.values()), key=lambda t: (-t[0], t[1]["label"]))
        for q, by_index in totals.items()
    }


def disagreements(rows: list[Row], runs: list[Run], top: int) -> str:
    """Markdown: for each compared row on the dev split's first reported metric, the `top` questions (or examples)
    on which it and its baseline differ most, with what each ranked first (or predicted)."""
    members: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        if not run.missing:
            members[f"{run.task}|{run.label}"].append(run)
    first_metric = {r.task: r.metrics_reported[0] for r in runs if not r.missing}
    intro = (
        "For each row against its baseline: the dev questions (or examples) whose score differs most between the two "
        "(each averaged over seeds), with each model's top answers (✓ correct, score averaged over seeds) or its "
        "predictions. Texts are the models' tokens (lower-cased; `<oov>`: not in the vocabulary)."
    )
    out = ["# Where the aligners disagree", "", intro, ""]
    for row in rows:
        if not row.tested or row.split != "dev" or row.metric != first_metric.get(row.task):
            continue
        c = row.comparison
        prefix, name = _prefix_and_name("dev", row.metric)
        mine, theirs = members[f"{row.task}|{row.label}"], members[f"{row.task}|{c.baseline}"]
        a = seed_mean([u for u in (unit_scores(r.path, prefix, name) for r in mine) if u is not None])
        b = seed_mean([u for u in (unit_scores(r.path, prefix, name) for r in theirs) if u is not None])
        units = sorted(a.keys() & b.keys(), key=lambda u: (-abs(a[u] - b[u]), u))[:top]
        left, right = row.label, str(c.baseline)
        out += [f"## {row.task}, dev {row.metric}: {left} against {right}", "",
                f"Δ {points(c.diff)} points over {c.units} units, p = {c.p_value}.", ""]  # fmt: skip
        texts = unit_rows(mine[0].path, prefix) or {}
        if mine[0].task_config.get("kind") == "rank":
            ranked_a, ranked_b = _ranked(mine, prefix), _ranked(theirs, prefix)
            for u in units:
                question = (texts.get(u) or {}).get("question", "")
                out += [f"### {u}: {_short(question)}", "",
                        f"{METRIC_COLUMNS[name][0]} {a[u]:.2f} ({left}) against {b[u]:.2f} ({right})", "",
                        f"| rank | {left} | {right} |", "|---|---|---|"]  # fmt: skip
                for i in range(min(3, max(len(ranked_a.get(u, [])), len(ranked_b.get(u, []))))):
                    cells = []
                    for ranked in (ranked_a.get(u, []), ranked_b.get(u, [])):
                        if i < len(ranked):
                            score, c = ranked[i]
                            mark = "✓" if c["label"] == "1" else "✗"
                            cells.append(f"{mark} {_short(c['answer'], 80)} ({score:+.2f})".replace("|", "/"))
                        else:
                            cells.append("")
                    out.append(f"| {i + 1} | {cells[0]} | {cells[1]} |")
                out.append("")
        else:
            predictions = [[unit_rows(r.path, prefix) or {} for r in side] for side in (mine, theirs)]
            out += [f"| a | b | gold | {left} | {right} |", "|---|---|---|---|---|"]
            for u in units:
                text = texts.get(u, {})
                said = []
                for side in predictions:
                    counts = defaultdict(int)
                    for seed_rows in side:
                        if u in seed_rows:
                            counts[seed_rows[u]["predicted"]] += 1
                    said.append(", ".join(f"{label} ×{n}" for label, n in sorted(counts.items(), key=lambda t: -t[1])))
                cells = [_short(text.get("a", ""), 80), _short(text.get("b", ""), 80), text.get("label", ""), *said]
                out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
            out.append("")
    return "\n".join(out) + "\n"
