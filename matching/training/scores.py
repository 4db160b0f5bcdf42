"""Per-question and per-pair scores of an evaluation, kept in the run directory (`<run>/scores/`).

The final evaluation of `train` (the best checkpoint on every dev split, and test when asked) and `evaluate`
write, for each evaluated split (by its logged prefix: `val`, `val_raw`, `val_mismatched`, `test`, ...):

- classification: `scores/<prefix>.csv`, one row per example: `unit` (its position in the split), `a`, `b`,
  `label`, `predicted`, `p_predicted` and `correct` (1 or 0). The split's accuracy is the mean of `correct`.
- ranking: `scores/<prefix>.csv`, one row per question: `unit` (the corpus's question id), `question` (its text),
  `candidates`, `positives`, `ap`, `rr`, `top1`, `top2`, `top5`, `p1`, `rr10`, `ndcg10` (see
  `matching.training.question_scores`); and
  `scores/<prefix>_pairs.csv`, one row per candidate: `unit`, `index`, `answer`, `label`, `score` (the ranking
  margin) and `rank` (1 = ranked first).

Texts are the model's tokens (lower-cased, as the vocabulary holds them; a word outside it shows as `<oov>`).
`report baseline=<aligner>` reads these files for its paired tests over questions (or examples) and for the
questions on which two models disagree most.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from matching.data.encoding import EncodedSplit
from matching.data.tasks import split_prefix
from matching.data.vocab import Vocabulary
from matching.files import write_text_atomic
from matching.training.question_scores import TOP_K, question_order, question_scores

FOLDER = "scores"
#: The per-question scores a ranking split's `<prefix>.csv` holds (`matching.training.question_scores`).
QUESTION_COLUMNS = ("ap", "rr", *(f"top{k}" for k in TOP_K), "p1", "rr10", "ndcg10")

#: The per-unit column behind each reported metric, and whether it averages only the questions with both a
#: correct and an incorrect candidate (the filtered protocol).
METRIC_COLUMNS: dict[str, tuple[str, bool]] = {
    "acc": ("correct", False),
    "map": ("ap", True),
    "mrr": ("rr", True),
    "map_raw": ("ap", False),
    "mrr_raw": ("rr", False),
} | {f"top{k}": (f"top{k}", True) for k in TOP_K} | {"p1": ("p1", True), "mrr10": ("rr10", True),
                                                       "ndcg10": ("ndcg10", True)}  # fmt: skip


def _text(ids: np.ndarray, vocab: Vocabulary | None) -> str:
    if vocab is None:
        return ""
    tokens = vocab.tokens
    return " ".join(tokens[i] if i >= vocab.first_word_id else "<oov>" for i in ids.tolist())


def _csv(rows: list[dict[str, object]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["unit"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def write_scores(
    run_dir: Path, prefix: str, record: dict[str, np.ndarray], split: EncodedSplit, labels: Sequence[str],
    kind: str, vocab: Vocabulary | None,
) -> list[Path]:  # fmt: skip
    """Writes the score files of one evaluated split (`record`: `matching.training.metrics.EvaluationRecord`'s
    arrays)."""
    folder = run_dir / FOLDER
    index, target = record["indices"], record["targets"]
    if kind != "rank":
        rows = [
            {
                "unit": int(i),
                "a": _text(split.a[i], vocab),
                "b": _text(split.b[i], vocab),
                "label": labels[y],
                "predicted": labels[p],
                "p_predicted": round(float(s), 6),
                "correct": int(y == p),
            }  # fmt: skip
            for i, y, p, s in zip(index, target, record["predicted"], record["scores"], strict=True)
        ]
        return [write_text_atomic(folder / f"{prefix}.csv", _csv(rows))]
    scores, groups = record["scores"].astype(np.float64), record["groups"]
    per_question = question_scores(scores, target, groups, index)
    names = split.group_names
    first_pair = {int(g): int(i) for g, i in zip(groups[::-1], index[::-1], strict=True)}  # lowest index per group
    questions = [
        {"unit": names[g], "question": _text(split.a[first_pair[g]], vocab), "candidates": int(n), "positives": int(p)}
        | {name: round(float(per_question[name][q]), 6) for name in QUESTION_COLUMNS}
        for q, (g, n, p) in enumerate(
            zip(per_question["question"], per_question["candidates"], per_question["positives"], strict=True)
        )
    ]
    order = question_order(scores, target, groups, index)
    pairs, rank, previous = [], 0, None
    for i in order:
        rank = rank + 1 if groups[i] == previous else 1
        previous = groups[i]
        pairs.append(
            {
                "unit": names[groups[i]],
                "index": int(index[i]),
                "answer": _text(split.b[index[i]], vocab),
                "label": int(target[i]),
                "score": round(float(scores[i]), 6),
                "rank": rank,
            }  # fmt: skip
        )
    return [
        write_text_atomic(folder / f"{prefix}.csv", _csv(questions)),
        write_text_atomic(folder / f"{prefix}_pairs.csv", _csv(pairs)),
    ]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def unit_scores(run_dir: Path, prefix: str, metric: str) -> dict[str, float] | None:
    """{unit: its score} behind a reported metric (`metric` as in a task's report_metrics, without the split's
    variant: `map`, `map_raw`, `acc`, ...) for one run and split; None when the run has no score file for it (a run
    trained before these files existed: `evaluate` on its checkpoint writes them) or the metric has no per-unit
    form."""
    column = METRIC_COLUMNS.get(metric)
    path = run_dir / FOLDER / f"{prefix}.csv"
    if column is None or not path.exists():
        return None
    name, filtered = column
    scores = {}
    for row in _rows(path):
        if filtered and not 0 < int(row["positives"]) < int(row["candidates"]):
            continue
        value = float(row[name])
        if not math.isnan(value):
            scores[row["unit"]] = value
    return scores


def ranked_answers(run_dir: Path, prefix: str) -> dict[str, list[dict[str, str]]] | None:
    """{question: its candidates as ranked (rows of `<prefix>_pairs.csv`)}, None without that file."""
    path = run_dir / FOLDER / f"{prefix}_pairs.csv"
    if not path.exists():
        return None
    ranked: dict[str, list[dict[str, str]]] = {}
    for row in _rows(path):
        ranked.setdefault(row["unit"], []).append(row)
    return ranked


def unit_rows(run_dir: Path, prefix: str) -> dict[str, dict[str, str]] | None:
    """{unit: its row of `<prefix>.csv`} (a question, or a classified example), None without that file."""
    path = run_dir / FOLDER / f"{prefix}.csv"
    return {row["unit"]: row for row in _rows(path)} if path.exists() else None


def write_recorded(run_dir: Path, recorded: dict[str, dict[str, np.ndarray]], data, labels: Sequence[str], kind: str):
    """Writes the score files of every split a `MatchingSystem` recorded (`recorded`: its `recorded`, by logged
    prefix) from `data`, the run's `PairDataModule` (its splits and vocabulary). Returns the files written."""
    splits = {split_prefix(name): split for name, split in data.splits.items()}
    written: list[Path] = []
    for prefix, record in recorded.items():
        written += write_scores(run_dir, prefix, record, splits[prefix], labels, kind, data.vocab)
    return written
