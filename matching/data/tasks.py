"""Task: what one benchmark is (its reader, labels, splits, protocol), typed, built from `conf/task/<name>.yaml`.

A task config is a `_target_` node of :class:`Task`; its reader is a `_partial_` node of one reader function
(`conf/task/reader/`), so a new corpus is one reader function and one YAML file. Corpus-specific preparation of
the tokens (Ubuntu keeps the most recent dialogue turns) is the task's `trim_a`, a `_partial_` node too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from matching.data.negatives import Negatives
from matching.data.pairs import Pair
from matching.errors import ConfigError

Reader = Callable[[str | os.PathLike], Iterator[Pair]]
KINDS = ("classify", "rank")
TRAIN_QUESTIONS = ("all", "answered")


@dataclass
class Split:
    """One split: a file or folder (relative to `paths.data_dir`, or absolute; plain or `.gz`) and an optional
    [start, stop) slice of the pairs read from it."""

    path: str
    start: int | None = None
    stop: int | None = None


@dataclass
class Task:
    """A benchmark. `kind` "classify" (one label per pair) or "rank" (pointwise: label 1 = match, candidates of
    one question share a group and are ranked by the match score).

    `eval_splits` are logged as val*/ (the first drives checkpointing and early stopping), `test_splits` as
    test*/. `report_metrics` are the logged metric names `report` shows (e.g. "map", "raw/map_raw"), `paper` the
    CoDA paper's test numbers per aligner option and metric. `options` holds free values that the YAML's split
    paths interpolate (TrecQA's `train_set` and `variant`), so one override switches several paths. `columns`
    names a table's columns (`a`, `b`, `label`, `group`) for the generic tasks (`task=pairs`, matching/data/tables.py)
    and their hub fallback. Empty `labels`: the label names come from the training data (see
    matching.data.sources.labels_from_data) and are written into the run's config. `positive_label` is the label
    whose F1, precision, recall, average precision and ROC-AUC a two-label task reports (null: the second label;
    see matching.training.metrics). `negatives` (a ranking task whose file holds positive pairs alone): how negatives
    are mined from the corpus (matching.data.negatives.Negatives).
    """

    name: str
    kind: str
    reader: Reader
    labels: list[str]
    splits: dict[str, Split | None]
    eval_splits: list[str]
    test_splits: list[str] = field(default_factory=list)
    monitor: str = "val/acc"
    monitor_mode: str = "max"
    epochs: int = 50
    batch_size: int = 64
    train_questions: str = "all"
    keep_tokens: list[str] = field(default_factory=list)
    trim_a: Callable[[list[str]], list[str]] | None = None
    hub: dict[str, Any] | None = None
    download: str = ""
    report_metrics: list[str] = field(default_factory=lambda: ["acc"])
    paper: dict[str, dict[str, float]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, str | None] = field(default_factory=dict)
    positive_label: str | None = None
    negatives: Any = None

    def __post_init__(self) -> None:
        if self.negatives is not None and not isinstance(self.negatives, Negatives):
            self.negatives = Negatives(**dict(self.negatives))
        if self.negatives is not None and self.kind != "rank":
            raise ConfigError(
                "task.negatives mines candidates for a ranking task (task.kind=rank, e.g. task=pairs_rank)"
            )
        self.splits = {k: _split(k, v) for k, v in dict(self.splits).items()}
        self.labels = [str(label) for label in self.labels]
        self.positive_label = None if self.positive_label is None else str(self.positive_label)
        self.eval_splits, self.test_splits = list(self.eval_splits), list(self.test_splits or [])
        self.keep_tokens = list(self.keep_tokens or [])
        if self.kind not in KINDS:
            raise ConfigError(f"task.kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "rank" and self.labels and len(self.labels) != 2:
            raise ConfigError(f"ranking is pointwise with two labels (no-match, match), got task.labels={self.labels}")
        if self.train_questions not in TRAIN_QUESTIONS:
            raise ConfigError(f"task.train_questions must be one of {TRAIN_QUESTIONS}, got {self.train_questions!r}")
        if self.train_questions == "answered" and self.kind != "rank":
            raise ConfigError("task.train_questions=answered applies to ranking tasks (questions with candidates)")
        unknown = [s for s in self.eval_splits + self.test_splits if s not in self.splits]
        if unknown:
            raise ConfigError(f"task splits {unknown} are listed in eval_splits/test_splits but not in task.splits")

    @property
    def active_eval_splits(self) -> list[str]:
        """The evaluation splits that have a file (an experiment may set a split to null)."""
        return [s for s in self.eval_splits if self.splits.get(s)]

    @property
    def active_test_splits(self) -> list[str]:
        return [s for s in self.test_splits if self.splits.get(s)]

    @property
    def named_splits(self) -> list[str]:
        return [k for k, v in self.splits.items() if v]

    def text_settings(self) -> dict[str, Any]:
        """Everything here that changes the prepared tokens (part of the corpus cache key)."""
        return {
            "keep_tokens": self.keep_tokens,
            "trim_a": callable_identity(self.trim_a),
            "reader": callable_identity(self.reader),
        }


def split_prefix(split: str) -> str:
    """Logged-key prefix of a split: dev -> val, dev_mismatched -> val_mismatched, test -> test."""
    return "val" + split[3:] if split.startswith("dev") else split


def _split(name: str, spec: Split | Mapping[str, Any] | str | None) -> Split | None:
    if spec is None or isinstance(spec, Split):
        return spec
    if isinstance(spec, str):
        return Split(spec)
    if "path" not in spec:
        raise ConfigError(f"task.splits.{name} needs a path (got {dict(spec)})")
    return Split(**spec)


def callable_identity(fn: Callable | None) -> str | None:
    """A stable name of a function or partial with its arguments (no memory addresses), for cache keys."""
    if fn is None:
        return None
    func = getattr(fn, "func", fn)
    args = sorted(getattr(fn, "keywords", {}).items())
    return f"{func.__module__}.{func.__qualname__}{args if args else ''}"


def keep_recent_turns(tokens: list[str], budget: int, turn_end: str) -> list[str]:
    """The most recent whole turns of a dialogue context that fit in `budget` tokens (markers included).

    When even the last turn is longer than the budget, its last `budget` tokens are kept.
    """
    if len(tokens) <= budget:
        return tokens
    start = len(tokens) - budget
    for i in range(start, len(tokens) - 1):
        if tokens[i - 1] == turn_end:  # i starts a turn
            return tokens[i:]
    return tokens[start:]
