"""Where a split comes from: a local file in its original format, or the Hugging Face hub as a fallback.

A task config names, per split, a `path` (relative to `paths.data_dir`, or absolute; plain or `.gz`) and an
optional `start`/`stop` slice over the pairs read. When the file is missing and the task has a `hub` entry,
the split is fetched with `datasets` (when the machine is online) into the cache folder.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from matching.data.downloads import check_reachable
from matching.data.pairs import Pair
from matching.data.tables import (
    label_names,
    label_order,
    pairs_from_rows,
    read_pair_table,
    resolve_columns,
    rows_of_dataset,
)
from matching.data.tasks import Task
from matching.errors import ConfigError, DataFormatError, UserError
from matching.extras import require
from matching.files import existing, gz_twin

log = logging.getLogger(__name__)


class CorpusNotFoundError(UserError, FileNotFoundError):
    """A split could be found neither locally nor on the hub; the message says how to get it."""


def resolve_path(path: str | os.PathLike, data_dir: str | os.PathLike) -> Path:
    """Where a split's file is: an absolute path as it is; a relative one from the working directory when a file or
    folder (or its .gz) is there, as every command-line tool resolves it, else under `paths.data_dir` (the
    benchmarks' layout, `data_dir/snli/...`)."""
    path = Path(os.path.expanduser(str(path)))
    if path.is_absolute() or existing(path) is not None:
        return path
    return Path(data_dir) / path


def places_looked(path: str | os.PathLike, data_dir: str | os.PathLike) -> str:
    """Every place `resolve_path` looks for a split's file, for a message that says it is in none of them."""
    path = Path(os.path.expanduser(str(path)))
    if path.is_absolute():
        return f"{path} (nor {gz_twin(path).name})"
    under = Path(data_dir) / path
    return (
        f"{path} in the working directory ({Path.cwd()}) nor {under} under paths.data_dir={data_dir} (nor their .gz "
        "twins)"
    )


def read_split(task: Task, split: str, data_dir: str | os.PathLike, cache_dir: str | os.PathLike) -> list[Pair]:
    """All pairs of `split` for `task`: read by the task's reader, or from its hub dataset."""
    spec = task.splits[split]
    path = resolve_path(spec.path, data_dir)
    if existing(path) is not None:
        log.info("reading %s %s from %s", task.name, split, path)
        pairs = task.reader(path)
    else:
        pairs = _read_hub(task, split, places_looked(spec.path, data_dir), cache_dir)
    return list(islice(pairs, spec.start, spec.stop))


def _read_hub(task: Task, split: str, looked: str, cache_dir: str | os.PathLike) -> Iterator[Pair]:
    """The split's pairs from the task's hub dataset, its columns named by `hub.fields` or `task.columns` (else
    found by their usual names, see matching.data.tables)."""
    dataset = _load_hub(task, split, looked, cache_dir)
    rows, names, is_text, declared = rows_of_dataset(dataset)
    fields = {**(task.columns or {}), **{k: v for k, v in (task.hub.get("fields") or {}).items() if v is not None}}
    where = f"{task.hub['name']} {task.hub['splits'][split]} (Hugging Face hub)"
    columns = resolve_columns(names, is_text, *(fields.get(k) for k in ("a", "b", "label", "group")), where)
    return pairs_from_rows(rows, columns, where, declared.get(columns.label), task.kind == "rank", unit="row")


def _load_hub(task: Task, split: str, looked: str, cache_dir: str | os.PathLike) -> Any:
    """The split as a `datasets.Dataset` from the task's hub entry (cached under `cache_dir/hub`), or a
    CorpusNotFoundError that says where it was looked for (`looked`, see places_looked) and how to get it."""
    hub = task.hub
    how = task.download
    if not hub or not hub.get("name") or split not in (hub.get("splits") or {}):
        raise CorpusNotFoundError(
            f"{task.name} {split} split not found: no file at {looked}.\n"
            f"{how}\nPoint at your copy with paths.data_dir=<folder> (or MATCHING_DATA_DIR), or at this one file "
            f"with task.splits.{split}.path=<file>."
        )
    try:
        datasets = require("datasets", "hub", f"fetching {task.name} from the Hugging Face hub")
        check_reachable()  # offline: fail in seconds, not after datasets' retries
        log.info("%s not found locally (%s); loading it from the Hugging Face hub (%s)", split, looked, hub["name"])
        return datasets.load_dataset(
            hub["name"], hub.get("config"), split=hub["splits"][split], cache_dir=str(Path(cache_dir) / "hub")
        )
    except Exception as err:  # offline, hub down, dataset renamed: all end the same way for the user
        raise CorpusNotFoundError(
            f"{task.name} {split} split not found: no file at {looked}, and loading "
            f"{hub['name']} from the Hugging Face hub failed ({err}).\n{how}\n"
            f"Or point at your copy with paths.data_dir=<folder> (or MATCHING_DATA_DIR), or at this one file with "
            f"task.splits.{split}.path=<file>."
        ) from err


def labels_from_data(task: Task, data_dir: str | os.PathLike, cache_dir: str | os.PathLike) -> list[str]:
    """The label names of a task whose config leaves `labels` empty (the generic tasks, task=pairs): the names its
    training data declares (a ClassLabel of a Hugging Face dataset or of a Parquet file the hub wrote), else the
    values of its labelled training pairs, in numeric order when all are numbers (0 before 1: a ranking task's
    match label is the second), else sorted. A ranking task must find exactly two."""
    pairs = read_split(task, "train", data_dir, cache_dir)
    seen = label_order(p.label for p in pairs)
    declared = _declared_labels(task, data_dir, cache_dir)
    labels, source = (declared, "declared by the dataset") if declared else (seen, "seen in the training split")
    if declared and not set(seen) <= set(declared):
        raise DataFormatError(
            f"{task.name} train: labels {sorted(set(seen) - set(declared))} are not among the names its dataset "
            f"declares ({declared}); set task.labels to the corpus's labels"
        )
    if task.kind == "rank" and len(labels) != 2:
        raise ConfigError(
            f"{task.name} is a ranking task, which needs two labels (no match, match), but its training split has "
            f"{labels}; set task.labels=[<no match>,<match>] or choose a classification task (task=pairs)"
        )
    if len(labels) < 2:
        raise DataFormatError(
            f"{task.name} train: every labelled pair has the label {labels}; a classifier needs two labels or more. "
            "Check task.columns.label"
        )
    log.info("%s labels, %s: %s", task.name, source, labels)
    if not declared:
        warn_rare_labels(task.name, [p.label for p in pairs], labels)
    return labels


#: A label on at most this share of the training pairs, beside two or more others, is more likely a stray value than
#: a class of its own.
RARE_SHARE = 0.01


def warn_rare_labels(task: str, seen: list[str], labels: list[str]) -> None:
    """A warning when the labels seen in the training split include a rare one (a "binary" file with one `maybe`
    row trains a 3-class model, without F1, AP and ROC-AUC): each label's count, and the way out."""
    counts = collections.Counter(seen)
    rare = [label for label in labels if counts[label] <= RARE_SHARE * len(seen)]
    if len(labels) < 3 or not rare:
        return
    kept = [label for label in labels if label not in rare]
    each = ", ".join(f"{label!r}: {counts[label]:,}" for label in labels)
    log.warning(
        "%s train: %d labels seen (%s), so this trains a %d-class model%s. If %s %s not meant as a class, name "
        "the labels: task.labels=[%s] and data.on_bad_example=skip (pairs with another label are then left out and "
        "counted)",
        task, len(labels), each, len(labels),
        "; a two-label model would report F1, precision, recall, AP and ROC-AUC besides accuracy" if len(kept) == 2
        else "", " and ".join(repr(r) for r in rare), "is" if len(rare) == 1 else "are", ",".join(kept),
    )  # fmt: skip


def _declared_labels(task: Task, data_dir: str | os.PathLike, cache_dir: str | os.PathLike) -> list[str] | None:
    path = resolve_path(task.splits["train"].path, data_dir)
    column = (task.columns or {}).get("label")
    if existing(path) is None:  # from the hub (read_split has just loaded it: datasets' cache answers)
        dataset = _load_hub(task, "train", places_looked(task.splits["train"].path, data_dir), cache_dir)
        _, names, is_text, declared = rows_of_dataset(dataset)
        label = resolve_columns(names, is_text, None, None, column, None, str(path), labelled=False).label
        return declared.get(label) if label else None
    reader = getattr(task.reader, "func", task.reader)
    if reader is not read_pair_table:
        return None
    options = getattr(task.reader, "keywords", {})
    return label_names(path, options.get("label") or column, options.get("format"))
