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
from matching.results.significance import (
    ALPHA,
    MIN_SEEDS,
    NOT_RESOLVED,
    RESOLVED,
    TOO_FEW_SEEDS,
    holm,
    method_test,
    paired_test,
    seed_mean,
)
from matching.training.scores import METRIC_COLUMNS, ranked_answers, unit_rows, unit_scores

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
    variant, e.g. "softmax" or "softmax F=parikh"), from the runs' `scores/` files: the method-level test over seeds
    and units (difference in points, 95 % interval, p, detectable Δ, seeds needed) and the conditional test over
    units beside it (`matching.results.significance`). The verdicts are those of the raw p; `adjust_for_many`
    turns them into the page's family-wise ones."""
    aligner, _, named = baseline.strip().partition(" ")
    variant = named or None
    members: dict[tuple[str, str, str | None], list[Run]] = defaultdict(list)
    for run in runs:
        if not run.missing:
            members[(run.task, run.aligner, run.variant)].append(run)

    def units(row: Row) -> list[dict[str, float]]:
        prefix, name = _prefix_and_name(row.split, row.metric)
        per_seed = [unit_scores(r.path, prefix, name) for r in members[(row.task, row.aligner, row.variant)]]
        return [u for u in per_seed if u is not None]

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
                mine, theirs = units(row), units(base)
                test = method_test(mine, theirs) if mine and theirs else None
                if test is None:
                    comparison = Comparison(
                        baseline=base.label,
                        note=f"{row.metric} has no per-question or per-example score: no paired test"
                        if _prefix_and_name(row.split, row.metric)[1] not in METRIC_COLUMNS
                        else "no per-question scores (runs from before scores/ existed: evaluate their best.ckpt)",
                    )
                else:
                    conditional = paired_test(seed_mean(mine), seed_mean(theirs))
                    partial = len(mine) < row.n or len(theirs) < base.n
                    comparison = Comparison(
                        baseline=base.label, diff=round(100 * test.difference, 2), ci_low=_points(test.low),
                        ci_high=_points(test.high), p_value=_p(test.p_value), units=test.units,
                        detectable=_points(test.detectable), verdict=test.verdict(),
                        note=f"scores of {len(mine)} of {row.n} and {len(theirs)} of {base.n} seeds" if partial
                        else None,
                        seed_counts=f"{test.seeds[0]} vs {test.seeds[1]}", seeds_needed=test.seeds_needed,
                        units_limit=test.units_limit, df=None if math.isnan(test.df) else round(test.df, 1),
                        units_ci_low=_points(conditional.low), units_ci_high=_points(conditional.high),
                        units_p=_p(conditional.p_value),
                    )  # fmt: skip
        compared.append(replace(row, comparison=comparison))
    return compared


def _points(x: float) -> float:
    return float("nan") if math.isnan(x) else round(100 * x, 2)


def _p(p: float) -> float:
    return float("nan") if math.isnan(p) else float(f"{p:.3g}")


#: How a page with many comparisons keeps its family-wise error, as the page states it.
MANY_RULE = (
    "Holm's step-down adjustment over every comparison of one metric on one split on this page (m of them; A "
    "against B and B against A count once), so "
    f"that the chance of any false 'resolved' among them stays at most {ALPHA:g}; the verdict uses the adjusted p"
)


def adjust_for_many(compared: list[list[Row]]) -> list[list[Row]]:
    """The rows of one page (one list per baseline) with each comparison's p adjusted by Holm over every tested
    comparison of the same split and metric (across tasks and baselines; A against B and B against A are one
    comparison, counted once), and its verdict from the adjusted p."""
    family: dict[tuple[str, str], dict[tuple, list[tuple[int, int]]]] = defaultdict(dict)
    for i, rows in enumerate(compared):
        for j, row in enumerate(rows):
            c = row.comparison
            if c is not None and c.tested and c.p_value is not None and not math.isnan(c.p_value):
                pair = (row.task, frozenset((row.label, str(c.baseline))))
                family[(row.split, row.metric)].setdefault(pair, []).append((i, j))
    out = [list(rows) for rows in compared]
    for pairs in family.values():
        members = list(pairs.values())
        adjusted = holm([compared[i][j].comparison.p_value for (i, j), *_ in members])
        for places, p in zip(members, adjusted, strict=True):
            for i, j in places:
                c = compared[i][j].comparison
                verdict = RESOLVED if p < ALPHA else NOT_RESOLVED
                out[i][j] = replace(
                    compared[i][j],
                    comparison=replace(c, p_adjusted=float(f"{p:.3g}"), compared_with=len(members), verdict=verdict),
                )
    return out


def _ours(r: Row) -> str:
    if not r.n:
        return "–"
    return f"{r.mean:.2f} ± {r.std:.2f}" if r.n > 1 else f"{r.mean:.2f} (n = 1)"


def points(x: float) -> str:
    """A difference in points, signed, two decimals; one that rounds to zero is "0.00" (not "-0.00")."""
    text = f"{float(x):+.2f}"
    return "0.00" if text in ("+0.00", "-0.00") else text


def _nan(x: float | None) -> bool:
    return x is None or math.isnan(x)


def versus_cells(c: Comparison) -> tuple[str, str, str, str]:
    """(Δ [95 % CI], p, the verdict about the method with what it could detect, the conditional test over units) of
    a row compared with its baseline, as the report and a study's page show them."""
    if not c.tested:
        return ("baseline", "–", "–", "–") if c.is_baseline else (c.note or "–", "–", "–", "–")
    conditional = (
        "–" if _nan(c.units_p) else f"[{points(c.units_ci_low)}, {points(c.units_ci_high)}], p = {c.units_p:.3g}"
    )
    if c.verdict == TOO_FEW_SEEDS:
        few = (
            f"too few seeds ({c.seed_counts}): a verdict about the method needs {MIN_SEEDS} a side, the seeds' "
            "spread being part of it"
        )
        return f"{points(c.diff)} [–]", "–", few, conditional
    p = f"{c.p_value:.3g}"
    if c.compared_with and c.compared_with > 1 and not _nan(c.p_adjusted):
        p = f"{c.p_adjusted:.3g} (raw {c.p_value:.3g}, m = {c.compared_with})"
    verdict = f"{c.verdict}; detectable: {c.detectable:.2f}" if not _nan(c.detectable) else str(c.verdict)
    more = c.seeds_text()
    return (f"{points(c.diff)} [{points(c.ci_low)}, {points(c.ci_high)}]", p, verdict + (f"; {more}" if more else ""),
            conditional)  # fmt: skip


#: The comparison columns' heads, as the report and a study's page write them.
VERSUS_HEADS = ("Δ [95 % CI, seeds and units]", "p (Holm)", "verdict (the method); detectable Δ (80 % power)",
                "these trained models only: units CI, p")  # fmt: skip


def to_markdown(rows: list[Row]) -> str:
    """The table; a row short of seeds says so (`1 of 2`) and names the missing ones in its last column; with a
    baseline, each row's difference from it (points, 95 % interval counting seeds and units), its p (adjusted for
    the table's many comparisons), the verdict about the method, and the conditional test over units."""
    compared = any(r.comparison is not None for r in rows)
    header = "| task | aligner | variant | split | metric | ours (mean ± std, %) | seeds | paper (test, %) |"
    if compared:
        header += "".join(f" {h} |" for h in VERSUS_HEADS)
    lines = [header + " missing |", "|---" * (header.count("|")) + "|"]
    for r in rows:
        seeds = f"{r.n} of {r.planned}" if r.missing else f"{r.n}"
        line = (
            f"| {r.task} | {r.aligner} | {r.variant or '–'} | {r.split} | {r.metric} | {_ours(r)} "
            f"| {seeds} | {r.paper_test if r.paper_test is not None else '–'} |"
        )
        if compared:
            line += "".join(f" {cell} |" for cell in versus_cells(r.comparison or Comparison()))
        lines.append(line + f" {r.missing_text() or '–'} |")
    return "\n".join(lines) + "\n"


#: The columns of report.csv: a row's, then with a baseline its comparison's.
ROW_COLUMNS = ("task", "aligner", "variant", "split", "metric", "mean", "std", "n", "seeds", "paper_test", "planned",
               "missing")  # fmt: skip
COMPARISON_COLUMNS = ("baseline", "diff", "ci_low", "ci_high", "p_value", "p_adjusted", "compared_with", "df",
                      "seed_counts", "units", "detectable", "verdict", "seeds_needed", "units_limit", "units_ci_low",
                      "units_ci_high", "units_p", "note")  # fmt: skip


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
