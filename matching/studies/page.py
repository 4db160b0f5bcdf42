"""A study's page: one folder with `study.md` (and `study.csv`) that states the protocol and budget, every family's
selection results, the confirmed table (mean ± std, Δ against each baseline with its 95 % interval, p, detectable
Δ and verdict), the held-out table beside it when the study tested, the ranking chart, side-by-side heat-maps of
one dev pair through every family's kept model, and the command that reproduces it.

Every number comes from the runs' own files (metrics.json, eval_test.json, scores/), through the report's machinery
(`matching.results.tables`): a family is one row, named by the study and shown with its parts (its overrides)."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from matching.extras import MissingExtraError
from matching.files import write_json, write_text_atomic
from matching.results.charts import write_ranking
from matching.results.discovery import Run
from matching.results.rows import Comparison, Row
from matching.results.tables import (
    MANY_RULE,
    VERSUS_HEADS,
    adjust_for_many,
    compare,
    metric_key,
    summarise,
    versus_cells,
)
from matching.studies.results import RunResult
from matching.studies.seeds import RULE as SEEDS_RULE
from matching.studies.seeds import SeedPlan
from matching.studies.selection import Choice, rule
from matching.studies.spec import StudySpec
from matching.training.scores import ranked_answers, unit_rows

log = logging.getLogger(__name__)


def _runs(results: Sequence[RunResult], kept: dict[tuple[str, str], str]) -> list[Run]:
    """The kept settings' runs as the report reads runs: one 'aligner' per family, the study's task name."""
    runs = []
    for r in results:
        if kept.get((r.planned.task, r.planned.family)) != r.planned.setting.slug:
            continue
        metrics = {**(r.metrics or {}), **(r.test_metrics or {})}
        runs.append(Run(r.folder, r.planned.task, r.planned.family, r.planned.seed, metrics, config=r.config,
                        missing=None if r.finished else r.state))  # fmt: skip
    return runs


def _value(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _per_seed(members: Sequence[RunResult], key: str) -> str:
    """The per-seed values of a metric over one setting's runs, in %, in seed order ("63.18, 62.35, 62.71"; "–" for
    a missing one)."""
    values = []
    for r in sorted(members, key=lambda r: r.planned.seed):
        metrics = {**(r.metrics or {}), **(r.test_metrics or {})}
        value = metrics.get(key)
        values.append("–" if value is None or math.isnan(value) else f"{100 * value:.2f}")
    return ", ".join(values)


def _span(values: list[float], digits: int = 1) -> str:
    if not values:
        return "–"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}–{high:.{digits}f}"


def pick_pair(spec: StudySpec, task: str, run: RunResult) -> tuple[str, str] | None:
    """The dev pair the heat-maps show: the study's `heatmaps.<task>`, else from the run's dev scores the first
    short pair with no word outside the vocabulary (for ranking: a question and one of its correct answers)."""
    if task in spec.heatmaps:
        return spec.heatmaps[task]["a"], spec.heatmaps[task]["b"]

    def fits(text: str, words: int) -> bool:
        return bool(text) and "<oov>" not in text and len(text.split()) <= words

    rows = unit_rows(run.folder, "val") or {}
    answers = ranked_answers(run.folder, "val")
    if answers is not None:
        for unit, candidates in answers.items():
            question = (rows.get(unit) or {}).get("question", "")
            for c in candidates:
                if c["label"] == "1" and fits(question, 12) and fits(c["answer"], 24):
                    return question, c["answer"]
        return None
    for row in rows.values():
        if fits(row.get("a", ""), 14) and fits(row.get("b", ""), 14):
            return row["a"], row["b"]
    return None


def draw_alignments(spec: StudySpec, task: str, firsts: list[RunResult], out: Path) -> Path | None:
    """One row of heat-maps per family (its kept setting's first seed) for one dev pair; None when there is no
    pair or matplotlib is missing."""
    from matching.matcher import Matcher  # here: loads torch
    from matching.results.alignment_figures import heatmap

    if not firsts:
        return None
    unloadable = [r.folder for r in firsts if not (r.folder / "checkpoints" / "best.ckpt").is_file()]
    if unloadable:  # runs pulled from their published small files (matching.results.publish pull): no weights
        if out.is_file():
            log.warning("%s: kept as published; %s has no checkpoint to draw it again from", out, unloadable[0])
            return out
        log.warning("no heat-maps for %s: %s has no checkpoint (its small files alone)", task, unloadable[0])
        return None
    pair = pick_pair(spec, task, firsts[0])
    if pair is None:
        log.warning("%s: no short dev pair to draw; name one with study.heatmaps.%s={a: ..., b: ...}", task, task)
        return None
    matchers = [Matcher.load(r.folder) for r in firsts]
    labels = [f"{spec.families[r.planned.family].label} (seed {r.planned.seed})" for r in firsts]
    try:
        return heatmap(matchers[0], pair[0], pair[1], out, others=tuple(matchers[1:]), labels=labels)
    except MissingExtraError as err:
        log.warning("no heat-maps: %s", err)
        return None


#: The key of a family's entry in a weights table's JSON that holds its aligner's learned scalars (beside its matrices).
LEARNED = "learned"


def weight_table(
    spec: StudySpec, task: str, firsts: list[RunResult], out: Path, path_settings: Mapping[str, str] | None = None
) -> list[str]:
    """What each family's weights do on dev (its kept setting's first seed, up to 2,000 pairs): the share of its
    weights below 0 and of the tokens that receive nothing (every weight 0), per matrix of weights
    (matching.results.split_matrices), and the learned scalars that shape them (Aligner.learned_constants:
    differential's λ, ...); written to `out` (JSON: family -> {matrix: shares, ..., "learned": {name: value}}, the
    last only for an aligner that has such scalars) and kept there for runs pulled without checkpoints.
    `path_settings`: the study command's `paths.*` (Launch.path_settings), where each run reads its dev split (as its
    test evaluation does: the corpora may have moved since the run was trained)."""
    from matching.results.split_matrices import split_matrices
    from matching.saved.run_folder import load_run

    known = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    shares = {}
    for run in firsts:
        family = run.planned.family
        checkpoint = run.folder / "checkpoints" / "best.ckpt"
        if not checkpoint.is_file():
            if family in known:
                shares[family] = known[family]
            continue
        trained = load_run(checkpoint, settings=dict(path_settings or {}))
        summary = split_matrices(trained, "dev").summary()
        shares[family] = {name: {k: s[k] for k in ("cells", "negative", "attends_to_nothing")}
                          for name, s in summary.items() if "attends_to_nothing" in s}  # fmt: skip
        if learned := trained.model.aligner.learned_constants():
            shares[family][LEARNED] = learned
    if not shares:
        return []
    write_json(out, shares)
    lines = [f"What the weights do on dev (seed {spec.seeds[0]} of each family's kept setting, up to 2,000 pairs; "
             f"[{out.name}]({out.name})): the share of weights below 0, and of tokens that receive nothing, every "
             "weight 0 (a softmax gives neither).", "",
             "| family | matrix | weights | below 0 | tokens given nothing |", "|---|---|---|---|---|"]  # fmt: skip
    for family, matrices in shares.items():
        for name, s in matrices.items():
            if name != LEARNED:
                lines.append(f"| {spec.families[family].label} | `{name}` | {s['cells']:,} | "
                             f"{100 * s['negative']:.1f} % | {100 * s['attends_to_nothing']:.1f} % |")  # fmt: skip
    learned = [(family, name, value) for family, matrices in shares.items()
               for name, value in matrices.get(LEARNED, {}).items()]  # fmt: skip
    if learned:
        lines += ["", "The learned scalars that shape those weights (the same models):", "",
                  "| family | learned | value |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {spec.families[family].label} | {name} | {value:.4g} |" for family, name, value in learned]
    return [*lines, ""]


def data_hint(tasks: dict[str, list[str]], command: str) -> list[str]:
    """Where the study's data must be for its command to run: a benchmark's corpora under `paths.data_dir` (unless the
    command names it), a task of one's own files (`task.splits.*.path`) where those paths say, relative to the folder
    it is run from."""
    own = [t for t, overrides in tasks.items() if any(str(o).startswith("task.splits.") for o in overrides)]
    hint = []
    if len(own) < len(tasks) and "paths.data_dir=" not in command:
        hint.append("with the corpora under `paths.data_dir` (add `paths.data_dir=/path/to/corpora`, or set "
                    "`MATCHING_DATA_DIR`).")  # fmt: skip
    if own:
        hint.append(f"from the folder that holds the files of {', '.join(own)} (its `task.splits.*.path`, relative "
                    "to where the command runs).")  # fmt: skip
    return [*hint, ""] if hint else []


def primary_text(spec: StudySpec) -> str:
    """The study's declared primary comparison as its page says it: each family against its baseline, the tasks it
    holds for and when it was declared (`Primary.when`)."""
    labels = {name: family.label for name, family in spec.families.items()}
    tasks: dict[tuple[str, str, str], list[str]] = {}
    for task, primary in spec.primary.items():
        tasks.setdefault((primary.family, primary.against, primary.when), []).append(task)
    return "; ".join(f"{labels.get(family, family)} against {labels.get(against, against)} ({', '.join(names)}; "
                     f"{when})" for (family, against, when), names in tasks.items())  # fmt: skip


def write_page(
    spec: StudySpec,
    study_dir: Path,
    choices: Sequence[Choice],
    results: Sequence[RunResult],
    command: str,
    tested: dict | None,
    figures: bool = True,
    seeds: SeedPlan | None = None,
    path_settings: Mapping[str, str] | None = None,
) -> Path:
    """Writes study.md, study.csv, ranking.png and alignments_<task>.png in `study_dir`; returns study.md. `seeds`:
    an adaptive study's decisions (its verdicts on the monitored metric are those, not a test of all its seeds).
    `path_settings`: the command's `paths.*` (Launch.path_settings), where the weights table reads the dev splits."""
    kept = {(c.task, c.family): c.chosen.slug for c in choices if c.chosen is not None}
    runs = _runs(results, kept)
    rows = summarise(runs) if runs else []
    compared, twinned = _compared(spec, rows, runs)
    finished = [r for r in results if r.finished]
    minutes = [r.minutes for r in finished if r.minutes is not None]
    lines = [f"# Study `{spec.name}`", ""]
    if spec.about:
        lines += [spec.about, ""]
    lines += ["Reproduce it (finished runs are skipped, so the same command also resumes a stopped study):", "",
              "```bash", command, "```", ""]  # fmt: skip
    lines += data_hint(spec.tasks, command)
    lines += ["## Protocol", ""]
    tasks = "; ".join(
        f"**{t}** (`{' '.join(o)}`)" if o else f"**{t}** (each family names its task config)"
        for t, o in spec.tasks.items()
    )
    budget = f"the first {spec.budget} settings of each grid" if spec.budget else "every setting of each grid"
    if spec.budget == 1:
        budget = "the first setting of each grid (the values written first), so nothing is selected"
    planned_total = len(results)
    untimed = len(finished) - len(minutes)  # resumed by an earlier version: results.training_minutes
    left_out = (f" (left out: the minutes of {untimed} run{'s' * (untimed > 1)} resumed by a version that timed "
                "the last sitting only)")  # fmt: skip
    left_out = left_out if untimed else ""
    lines += [
        f"- Tasks: {tasks}.",
        f"- Every run: `{' '.join(spec.train) or '(the defaults)'}`; seeds {_seeds_text(spec)}; "
        f"selection at seed{'s' if len(spec.selection_seeds) > 1 else ''} {', '.join(map(str, spec.selection_seeds))}.",
        f"- Budget: {budget}; {planned_total} runs planned, {len(finished)} finished"
        + (f", {sum(minutes):.0f} training minutes in all ({_span(minutes)} per run)" if minutes else "")
        + left_out
        + ".",
        f"- Selection: {rule(spec)}",
        f"- Baselines: {', '.join(spec.families[b].label for b in spec.baselines) or 'none'}. Each row's Δ is its "
        "difference from the baseline in points. Its 95 % interval and p count the seeds and the questions (or "
        "examples) together: the training run is a unit of chance like a question (a crossed seeds × units design, "
        "Student's t on Satterthwaite's degrees of freedom; docs/concepts/comparing.md), so the verdict is about the "
        "method, not the seeds drawn. The detectable Δ is the difference these seeds and units would find with "
        "80 % power; an unresolved row says how many seeds a side would find its Δ. With fewer than three seeds on a "
        "side there is no verdict (docs/concepts/comparing.md, 'Two seeds a side'). Beside it, the conditional test "
        "over units alone (these trained models, seeds averaged), which says "
        "nothing about the method.",
        *(
            [f"- Primary comparison (the question the study was run to answer): {primary_text(spec)}."]
            if spec.primary
            else []
        ),  # fmt: skip
        f"- Many comparisons: {MANY_RULE}.",
        *(
            [
                f"- Seeds: {SEEDS_RULE}. The verdicts on the monitored metric are these sequential decisions (section "
                "'Seeds'), and their p is the one each decision used (its last look's Holm over that look's "
                "comparisons, not the page-wide one above); the other metrics' verdicts test every seed a family took "
                "and are descriptive."
            ]
            if spec.adaptive
            else []
        ),
        "- Held-out test: " + _test_text(spec, tested),
    ]
    numerics = _numerics(finished)
    if numerics:
        lines.append(f"- Numerics (the first run's log): {numerics}.")
    lines += ["", "## Families", "", "| family | parts (overrides) | grid |", "|---|---|---|"]
    for f in spec.families.values():
        grid = "; ".join(f"`{k}`: {', '.join(v)}" for k, v in f.grid) or "–"
        lines.append(f"| {f.label} (`{f.name}`) | `{f.parts}` | {grid} |")
    lines.append("")
    table_rows: list[dict[str, object]] = []
    for task in spec.tasks:
        lines += [f"## {task}", ""]
        lines += _selection_table(spec, task, choices)
        sequential = _sequential(seeds, task)
        for split, title in (("dev", "Confirmed on dev"), ("test", "Held-out test (evaluated once, after selection)")):
            task_rows = [r for r in rows if r.task == task and r.split == split]
            if not task_rows:
                continue
            lines += [f"### {title}", ""]
            lines += _confirmed_table(spec, task, split, task_rows, compared, results, kept, table_rows,
                                      sequential if split == "dev" else {})  # fmt: skip
        if twinned:
            lines += _twins_table(spec, task, twinned, table_rows, sequential)
        if seeds is not None:
            lines += _seeds_section(spec, task, seeds)
        for c in choices:
            if c.task == task and c.chosen is None:
                lines.append(f"- {spec.families[c.family].label}: not selected yet; missing {', '.join(c.missing)}.")
        if figures:
            firsts = [
                r
                for r in results
                if r.finished
                and r.planned.task == task
                and kept.get((task, r.planned.family)) == r.planned.setting.slug
                and r.planned.seed == spec.seeds[0]
            ]
            order = {f: i for i, f in enumerate(spec.families)}
            firsts.sort(key=lambda r: order[r.planned.family])
            figure = draw_alignments(spec, task, firsts, study_dir / f"alignments_{task}.png")
            if figure is not None:
                lines += [f"![{task}: one dev pair through every family's kept model, seed {spec.seeds[0]}]"
                          f"({figure.name})", ""]  # fmt: skip
            if spec.weights:
                lines += weight_table(spec, task, firsts, study_dir / f"weights_{task}.json", path_settings)
        lines.append("")
    lines += outside_section(spec, study_dir)
    if figures and compared:
        first = compared[spec.baselines[0]]
        try:
            if write_ranking(first, study_dir / "ranking.png"):
                lines += ["## The ranking", "", f"![Every family's Δ from {spec.families[spec.baselines[0]].label}, "
                          "95 % interval, filled where resolved; grey: the detectable Δ](ranking.png)", ""]  # fmt: skip
        except MissingExtraError as err:
            log.warning("no ranking chart: %s", err)
    page = write_text_atomic(study_dir / "study.md", "\n".join(lines).rstrip() + "\n")
    write_text_atomic(study_dir / "study.csv", _csv(table_rows))
    return page


def _outside_cells(side: dict) -> str:
    """A side of an outside comparison as its table's cells: dev MAP and MRR (mean ± std over its seeds) and its
    training minutes a run."""

    def spread(node: dict) -> str:
        return f"{node['mean']:.2f} ± {node['std']:.2f}" if node.get("std") is not None else f"{node['mean']:.2f}"

    minutes = side.get("train_minutes")
    return f"{spread(side['map'])} | {spread(side['mrr'])} | {'–' if minutes is None else f'{minutes:.1f}'}"


def outside_section(spec: StudySpec, study_dir: Path) -> list[str]:
    """The baselines trained outside the study (`outside:`, e.g. the CrossEncoder of benchmarks/cross_encoder.py), each
    task's comparison as its script wrote it (<study>/<name>/<task>/comparison.json): the baseline's own row and each
    family compared with it, seed-aware, Holm over the families compared. Both sides are on the study's page."""
    lines = []
    for name in spec.outside:
        found = sorted((study_dir / name).glob("*/comparison.json"))
        if not found:
            continue
        said = (f"Trained by its own script, with the study's seeds compared seed for seed (the seed-aware test, Holm "
                f"over the families compared); its files are in `{name}/<task>/`. Training minutes are one thread a "
                "run, timed while other jobs shared the machine: a cost, not a speed figure.")  # fmt: skip
        lines += [f"## The outside baseline: `{name}`", "", said, ""]
        for path in found:
            data = json.loads(path.read_text(encoding="utf-8"))
            base = data[name]
            lines += [f"### {path.parent.name}", "", "```bash", data.get("command", ""), "```", "",
                      "| | seeds | dev MAP | MRR | training minutes a run | Δ MAP vs the baseline [95 % CI] | Holm p | "
                      "verdict |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
            lines.append(f"| **{name}** | {base.get('seeds', '–')} | {_outside_cells(base)} | – | – | – |")
            for row in data.get("compared", []):
                label = spec.families[row["name"]].label if row["name"] in spec.families else row["name"]
                versus = ("too few seeds" if row.get("too_few_seeds") else
                          f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]")  # fmt: skip
                lines.append(f"| {label} | {row['seeds']} | {_outside_cells(row)} | {versus} | "
                             f"{row.get('p_holm', float('nan')):.2g} | {row.get('verdict', '–')} |")  # fmt: skip
            lines.append("")
    return lines


def _compared(spec: StudySpec, rows: list[Row], runs: list[Run]) -> tuple[dict[str, list[Row]], list[Row]]:
    """Every row against each baseline ({baseline: rows}) and each family's row against its twin (`study.twins`),
    with Holm's adjustment over all of them together (one family of comparisons per split and metric)."""
    if not rows:
        return {}, []
    lists = [compare(rows, runs, b) for b in spec.baselines]
    twins_of = {}
    for family, twin in spec.twins.items():
        twins_of.setdefault(twin, set()).add(family)
    for twin, families in twins_of.items():  # only the twinned families' rows are compared, against their twin's
        pair = [r for r in rows if r.aligner in families or r.aligner == twin]
        lists.append([r for r in compare(pair, runs, twin) if r.aligner in families])
    adjusted = adjust_for_many(lists)
    twinned = [r for rows_ in adjusted[len(spec.baselines) :] for r in rows_ if r.comparison is not None]
    return dict(zip(spec.baselines, adjusted[: len(spec.baselines)], strict=True)), twinned


def _twins_table(
    spec: StudySpec, task: str, twinned: list[Row], table_rows: list[dict[str, object]], sequential: dict
) -> list[str]:
    """Each family against its twin (`study.twins`) on one task: the difference, its interval and verdict."""
    mine = [r for r in twinned if r.task == task and r.comparison and (r.comparison.tested or r.comparison.note)]
    if not mine:
        return []
    order = {f: i for i, f in enumerate(spec.families)}
    head = f"| family | against | split | metric | {' | '.join(VERSUS_HEADS)} |"
    lines = ["### Each family against its twin", "", head, "|---" * (4 + len(VERSUS_HEADS)) + "|"]
    for row in sorted(mine, key=lambda r: (r.split, r.metric, order[r.aligner])):
        twin = spec.twins[row.aligner]
        cells = list(versus_cells(row.comparison or Comparison()))
        decided = sequential.get((row.aligner, twin, row.metric)) or sequential.get((twin, row.aligner, row.metric))
        decided = decided if row.split == "dev" else None
        if decided:
            cells[1:3] = decided.p_text, decided.text
        lines.append(f"| {spec.families[row.aligner].label} | {spec.families[twin].label} | {row.split} | "
                     f"{row.metric} | {' | '.join(cells)} |")  # fmt: skip
        c = row.comparison
        record = next((r for r in table_rows if (r["task"], r["family"], r["split"], r["metric"])
                       == (task, row.aligner, row.split, row.metric)), None)  # fmt: skip
        if record is not None and c is not None:
            record |= {
                "twin": twin, "twin_diff": c.diff, "twin_ci": f"{c.ci_low} {c.ci_high}" if c.tested else "",
                "twin_p": c.p_value, "twin_p_holm": c.p_adjusted, "twin_detectable": c.detectable,
                "twin_verdict": c.verdict, "twin_seeds_needed": c.seeds_needed,
            }  # fmt: skip
            if decided:
                record |= {"twin_verdict": decided.verdict, "twin_p_holm": decided.p_holm}
    return [*lines, ""]


def _seeds_text(spec: StudySpec) -> str:
    if not spec.adaptive:
        return ", ".join(map(str, spec.seeds))
    return (f"{len(spec.seeds)} to {spec.max_seeds} a family, {spec.seed_step} more at each look while its "
            "comparisons are undecided")  # fmt: skip


class Decided(NamedTuple):
    """A sequential decision as a study page writes it: in full in its cell, in a few words (with the p of its last
    look) in study.csv."""

    text: str
    verdict: str
    p_holm: float | None
    p_text: str  # the page's p cell: the p its decision used (its last look's Holm), not a second adjustment


def _sequential(seeds: SeedPlan | None, task: str) -> dict[tuple[str, str, str], Decided]:
    """{(family, baseline, metric): its sequential decision} of one task: an adaptive study's verdict is its decision,
    not a test of every seed taken."""
    if seeds is None:
        return {}
    return {(d.family, d.baseline, d.metric): Decided(d.text(seeds.schedule[-1]), d.verdict,
                                                      d.looks[-1].p_adjusted if d.looks else None, _look_p(d))
            for d in seeds.decisions if d.task == task}  # fmt: skip


def _look_p(decision) -> str:
    """The p cell of a sequentially decided comparison: its last look's Holm-adjusted p (the one its verdict is
    about), with the raw p, so that one comparison shows one adjusted p on its page."""
    if not decision.looks:
        return "–"
    last = decision.looks[-1]
    return f"{last.p_adjusted:.3g} (raw {last.p_value:.3g}; Holm over look {len(decision.looks)}'s comparisons)"


def _seeds_section(spec: StudySpec, task: str, seeds: SeedPlan) -> list[str]:
    """How many seeds each family took and why it stopped, and every comparison's looks."""
    mine, seen = [], set()
    for d in seeds.decisions:  # two baselines against each other are one test: listed once, in its first direction
        if d.task == task and d.pair not in seen:
            seen.add(d.pair)
            mine.append(d)
    levels = ", ".join(f"{r} seeds: p < {level:.3g}" for r, level in zip(seeds.schedule, seeds.levels, strict=True))
    lines = ["### Seeds: how many each family needed", "", f"Looks and their levels (after Holm): {levels}.", "",
             "| family | seeds | why it stopped |", "|---|---|---|"]  # fmt: skip
    for name, family in spec.families.items():
        involved = [d for d in mine if name in (d.family, d.baseline)]
        n = seeds.wanted.get((task, name), len(spec.seeds))
        demanding = [d for d in involved if d.looks and d.looks[-1].seeds == n]
        why = "; ".join(
            f"vs {spec.families[d.baseline if d.family == name else d.family].label}: {d.status}" for d in demanding
        )
        lines.append(f"| {family.label} | {n} | {why or '–'} |")
    lines += ["", "| comparison | metric | looks (seeds a side: Δ, raw p → Holm p) | decision |", "|---|---|---|---|"]
    for d in mine:
        looked = "; ".join(f"{k.seeds}: {k.difference:+.2f}, {k.p_value:.3g} → {k.p_adjusted:.3g}" for k in d.looks)
        lines.append(f"| {spec.families[d.family].label} vs {spec.families[d.baseline].label} | {d.metric} | "
                     f"{looked or '–'} | {d.text(seeds.schedule[-1])} |")  # fmt: skip
    return [*lines, ""]


def _test_text(spec: StudySpec, tested: dict | None) -> str:
    if not spec.test:
        return "not run (`study.test=false`): every figure on this page is dev."
    if not tested:
        return "asked for (`study.test=true`), not run yet: it runs once every family is confirmed."
    none = "; ".join(f"{t}: {why}" for t, why in (tested.get("no_test_split") or {}).items())
    return (
        f"evaluated once, on {tested.get('tested_at')}, on the kept settings only, after every selection and "
        f"confirmation was complete (test.json records the selection it followed, sha256 "
        f"{str(tested.get('selection_sha256'))[:12]}); no test figure was read by the selection."
        + (f" No test split: {none}." if none else "")
    )


def _numerics(finished: Sequence[RunResult]) -> str | None:
    for r in sorted(finished, key=lambda r: str(r.folder)):
        log_file = r.folder / "train.log"
        if log_file.is_file():
            match = re.search(r"numerics: (.*)", log_file.read_text(errors="replace"))
            if match:
                return match.group(1).strip()
    return None


def _selection_table(spec: StudySpec, task: str, choices: Sequence[Choice]) -> list[str]:
    selecting = [c for c in choices if c.task == task and len(c.settings) > 1]
    if not selecting:
        return []
    seeds = spec.selection_seeds
    monitor = next((c.monitor for c in selecting if c.monitor), "the monitored metric")
    head = " | ".join(f"seed {s}" for s in seeds)
    lines = [f"### Selection (dev {monitor}, %)", "", f"| family | setting | {head} | mean | kept |",
             "|---|---|" + "---|" * len(seeds) + "---|---|"]  # fmt: skip
    for c in selecting:
        for setting, values in c.settings:
            cells = " | ".join(_value(None if v is None else 100 * v) for v in values)
            mean = c.mean(setting)
            mark = "**kept**" if setting == c.chosen else ""
            lines.append(f"| {spec.families[c.family].label} | `{setting.text}` | {cells} | "
                         f"{_value(None if mean is None else 100 * mean)} | {mark} |")  # fmt: skip
    return [*lines, ""]


def _confirmed_table(
    spec: StudySpec,
    task: str,
    split: str,
    task_rows: list[Row],
    compared: dict[str, list[Row]],
    results: Sequence[RunResult],
    kept: dict[tuple[str, str], str],
    table_rows: list[dict[str, object]],
    sequential: dict[tuple[str, str, str], Decided] | None = None,
) -> list[str]:
    lines = []
    seeds = ", ".join(map(str, spec.seeds)) if not spec.adaptive else "as each family took them"
    metrics = list(dict.fromkeys(r.metric for r in task_rows))
    head = "| family | setting | metric | mean ± std (seeds " + seeds + ") | best epochs | minutes per run |"
    for b in spec.baselines:
        head += (
            f" Δ vs {spec.families[b].label} {VERSUS_HEADS[0].removeprefix('Δ ')} | {VERSUS_HEADS[1]} | "
            f"{VERSUS_HEADS[2]} | {VERSUS_HEADS[3]} |"
        )
    lines += [head, "|---" * (head.count("|") - 1) + "|"]
    order = {f: i for i, f in enumerate(spec.families)}
    for metric in metrics:
        for row in sorted((r for r in task_rows if r.metric == metric), key=lambda r: order[r.aligner]):
            family = spec.families[row.aligner]
            slug = kept[(task, row.aligner)]
            members = [r for r in results if (r.planned.task, r.planned.family, r.planned.setting.slug)
                       == (task, row.aligner, slug)]  # fmt: skip
            setting = next((r.planned.setting for r in members), None)
            key = metric_key("val" if split == "dev" else "test", metric)
            per_seed = _per_seed(members, key)
            by_seed = sorted(members, key=lambda r: r.planned.seed)
            epochs = ", ".join(str(r.best_epoch) if r.best_epoch else "–" for r in by_seed)
            minutes = _span([r.minutes for r in members if r.minutes is not None])
            if not row.n:
                mean = "–"
            elif row.n < row.planned:
                mean = f"{row.mean:.2f}, {row.n} of {row.planned} seeds ({per_seed})"
            else:
                mean = f"{row.mean:.2f} ± {row.std:.2f} ({per_seed})"
            line = (f"| {family.label} | `{setting.text if setting else '–'}` | {metric} | {mean} | "
                    f"{epochs if split == 'dev' else '–'} | {minutes if split == 'dev' else '–'} |")  # fmt: skip
            record: dict[str, object] = {
                "task": task, "family": row.aligner, "label": family.label, "parts": family.parts,
                "setting": setting.text if setting else "", "split": split, "metric": metric, "mean": row.mean,
                "std": row.std, "n": row.n, "per_seed": per_seed, "best_epochs": epochs if split == "dev" else "",
            }  # fmt: skip
            for b in spec.baselines:
                here = (task, row.aligner, split, metric)
                mine = next(r for r in compared[b] if (r.task, r.aligner, r.split, r.metric) == here)
                cells = list(versus_cells(mine.comparison or Comparison()))
                decided = (sequential or {}).get((row.aligner, b, metric))
                if decided:
                    cells[1:3] = decided.p_text, decided.text
                line += "".join(f" {cell} |" for cell in cells)
                c = mine.comparison
                record |= {
                    f"{b}_diff": c.diff if c else None,
                    f"{b}_ci": f"{c.ci_low} {c.ci_high}" if c and c.tested else "",
                    f"{b}_p": c.p_value if c else None,
                    f"{b}_p_holm": c.p_adjusted if c else None,
                    f"{b}_detectable": c.detectable if c else None,
                    f"{b}_verdict": c.verdict if c else None,
                    f"{b}_seeds_needed": c.seeds_needed if c else None,
                    f"{b}_units_ci": f"{c.units_ci_low} {c.units_ci_high}" if c and c.tested else "",
                    f"{b}_units_p": c.units_p if c else None,
                }
                if decided:
                    record |= {f"{b}_verdict": decided.verdict, f"{b}_p_holm": decided.p_holm}
            table_rows.append(record)
            lines.append(line)
    return [*lines, ""]


def _csv(rows: list[dict[str, object]]) -> str:
    out = io.StringIO()
    if not rows:
        return "task,family\n"
    fields = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None or (isinstance(v, float) and math.isnan(v)) else v for k, v in r.items()}
                     for r in rows)  # fmt: skip
    return out.getvalue()
