"""Any pair corpus in a table, without code: TSV, CSV, JSON Lines, Parquet, or a Hugging Face dataset (a folder
written by `save_to_disk`, or a dataset on the hub by name), its columns named by options.

`read_pair_table` is the reader of `task=pairs` (classification), `task=pairs_rank` (ranking) and the presets
`task=mrpc`, `task=qqp`, `task=paws`. Columns left unnamed are found by their usual names (`sentence1`/`sentence2`,
`premise`/`hypothesis`, `question1`/`question2`, `question`/`answer`, ...; case is ignored), else the first two
text columns; the label is `label`, `gold_label`, ... . Rows without a label (GLUE's test splits mark them −1) are
dropped and counted. Label names come from the data (`label_names`): a `ClassLabel`'s names where the dataset
declares them, else the values of the labelled rows.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matching.data.corpus_files import existing_corpus_file, json_array, json_lines, numbered_lines, open_text
from matching.data.pairs import Pair
from matching.errors import DataFormatError, MissingFileError
from matching.extras import require

log = logging.getLogger(__name__)

#: Pairs of text columns tried in order when the first and second text are not named (case is ignored).
TEXT_COLUMNS = [("sentence1", "sentence2"), ("premise", "hypothesis"), ("question1", "question2"),
                ("question", "answer"), ("question", "sentence"), ("query", "passage"), ("query", "document"),
                ("text1", "text2"), ("text_a", "text_b"), ("context", "response"), ("a", "b")]  # fmt: skip
#: Label columns tried in order.
LABEL_COLUMNS = ("label", "labels", "gold_label", "is_duplicate", "relevance")
#: Group (question) columns tried in order, for ranking.
GROUP_COLUMNS = ("group", "qid", "question_id", "questionid", "query_id", "id1")
#: Label values that mean "no gold label": the row is dropped and counted.
UNLABELLED = {"", "-", "-1", "none", "null", "nan"}
#: File name endings and the format each is read as.
FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
           ".parquet": "parquet"}  # fmt: skip


@dataclass(frozen=True)
class Columns:
    """The columns a table's pairs are read from (`group` None: no group, or the first text for ranking)."""

    a: str
    b: str
    label: str | None
    group: str | None


def resolve_columns(
    names: Sequence[str],
    is_text: Callable[[str], bool],
    a: str | None,
    b: str | None,
    label: str | None,
    group: str | None,
    where: str,
    labelled: bool = True,
) -> Columns:
    """The columns to read: the ones named, else found among `names` by their usual names, else (texts) the first
    two columns for which `is_text` holds. A named column that does not exist, or none found, is a DataFormatError
    that lists the columns there are. `labelled`: a label column is required."""
    lower = {n.lower(): n for n in names}

    def named(option: str, value: str | None) -> str | None:
        if value is None:
            return None
        if str(value) in names:
            return str(value)
        if str(value).lower() in lower:
            return lower[str(value).lower()]
        raise DataFormatError(
            f"{where}: there is no column {value!r} (task.columns.{option}); the columns are {list(names)}"
        )

    a, b, label, group = named("a", a), named("b", b), named("label", label), named("group", group)
    if a is None or b is None:
        found = next(((lower[x], lower[y]) for x, y in TEXT_COLUMNS if x in lower and y in lower), None)
        if found is None:
            texts = [n for n in names if n not in (label, group) and is_text(n)]
            found = tuple(texts[:2]) if len(texts) >= 2 else None
        if found is None:
            raise DataFormatError(
                f"{where}: cannot tell which columns hold the two texts; the columns are {list(names)}. Name them "
                "with task.columns.a=<column> task.columns.b=<column>"
            )
        a, b = a or found[0], b or found[1]
    if label is None:
        label = next((lower[n] for n in LABEL_COLUMNS if n in lower), None)
        if label is None and labelled:
            raise DataFormatError(
                f"{where}: no label column (looked for {list(LABEL_COLUMNS)}); the columns are {list(names)}. "
                "Name it with task.columns.label=<column>"
            )
    if group is None:
        group = next((lower[n] for n in GROUP_COLUMNS if n in lower and lower[n] not in (a, b, label)), None)
    return Columns(a, b, label, group)


def label_value(value: Any, names: Sequence[str] | None = None) -> str:
    """A label as the task knows it: a ClassLabel's name, an integral number without its ".0" (1.0 -> "1"), a
    string stripped; "" for a row without a label (None, −1, "-", empty)."""
    if value is None or isinstance(value, bool):
        return "" if value is None else str(int(value))
    if isinstance(value, float):
        value = int(value) if value.is_integer() else value
    if names is not None and isinstance(value, int):
        return names[value] if 0 <= value < len(names) else ""
    text = str(value).strip()
    if text.lower() in UNLABELLED:
        return ""
    number = _number(text)
    return str(int(number)) if number is not None and number.is_integer() else text


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def label_order(labels: Iterable[str]) -> list[str]:
    """Labels seen in data, in the order a task lists them: numbers in numeric order first (0 before 1, so that a
    ranking task's match label is the second), then the others sorted."""

    def key(label: str) -> tuple[int, float, str]:
        number = _number(label)
        return (0, number, label) if number is not None else (1, 0.0, label)

    return sorted(set(labels), key=key)


def pairs_from_rows(
    rows: Iterable[tuple[int, dict[str, Any]]],
    columns: Columns,
    where: str,
    label_names: Sequence[str] | None = None,
    group_by_text: bool = False,
    unit: str = "line",
) -> Iterator[Pair]:
    """Pairs from `(line or row number, row)`: the texts, the label (see label_value) and the group (the group
    column, or the first text when `group_by_text`). A row without a label is dropped and counted; a text that is
    not a string is a DataFormatError naming the row."""
    kept = dropped = 0
    for number, row in rows:
        label = label_value(row.get(columns.label), label_names) if columns.label else ""
        if columns.label and not label:
            dropped += 1
            continue
        a, b = row.get(columns.a), row.get(columns.b)
        if not isinstance(a, str) or not isinstance(b, str):
            bad, value = (columns.a, a) if not isinstance(a, str) else (columns.b, b)
            raise DataFormatError(
                f"{where}, {unit} {number}: column {bad!r} holds {value!r:.60}, not a text. Fix or remove that row, "
                "or name the text columns with task.columns.a / task.columns.b"
            )
        group = row.get(columns.group) if columns.group else (a.strip() if group_by_text else None)
        kept += 1
        yield Pair(a.strip(), b.strip(), label, None if group is None else str(group), number)
    how = f"columns {columns.a!r}, {columns.b!r}" + (f", label {columns.label!r}" if columns.label else "")
    how += f", group {columns.group!r}" if columns.group else (", grouped by the first text" if group_by_text else "")
    log.info("read %d pairs from %s (%s); dropped %d without a label", kept, where, how, dropped)


def table_format(path: Path, format: str | None) -> str:
    """The format a file is read as: `format` when given, else by its name (a `.gz` ending ignored); a folder is a
    Hugging Face dataset written by `save_to_disk`."""
    if format:
        if format not in set(FORMATS.values()) | {"dataset"}:
            raise DataFormatError(
                f"task.reader.format={format!r} is not a table format; choose one of "
                f"{sorted(set(FORMATS.values()) | {'dataset'})} (or leave it unset to go by the file name)"
            )
        return format
    if path.is_dir():
        return "dataset"
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        raise DataFormatError(
            f"{path}: cannot tell the table format from the name {path.name!r}; name the file .tsv, .csv, .jsonl or "
            ".parquet, or set task.reader.format=tsv|csv|jsonl|parquet|dataset"
        )
    return FORMATS[suffix]


def read_pair_table(
    path: str | os.PathLike[str],
    *,
    a: str | None = None,
    b: str | None = None,
    label: str | None = None,
    group: str | None = None,
    format: str | None = None,
    header: bool = True,
    rank: bool = False,
) -> Iterator[Pair]:
    """Read pairs from a table (see the module docstring): `a`, `b`, `label`, `group` name its columns (None: found
    by their usual names); `format` tsv | csv | jsonl | parquet | dataset (None: by the file name); `header`:
    whether a TSV/CSV file's first line names its columns (False: they are named "1", "2", ... ); `rank`: a ranking
    corpus, whose pairs without a group column are grouped by their first text."""
    given = Path(os.path.expanduser(str(path)))
    found = given if given.is_dir() else existing_corpus_file(given)
    kind = table_format(found, format)
    rows, names, is_text, declared, unit = _table(found, kind, header)
    columns = resolve_columns(names, is_text, a, b, label, group, str(found))
    names_of_labels = declared.get(columns.label) if columns.label else None
    return pairs_from_rows(rows, columns, str(found), names_of_labels, group_by_text=rank, unit=unit)


def label_names(path: str | os.PathLike[str], label: str | None = None, format: str | None = None) -> list[str] | None:
    """The label names a table declares for its label column (a `ClassLabel` of a Hugging Face dataset folder or of
    a Parquet file the hub wrote), or None where it declares none (then the values seen in the data are used)."""
    given = Path(os.path.expanduser(str(path)))
    found = given if given.is_dir() else existing_corpus_file(given)
    kind = table_format(found, format)
    if kind not in ("dataset", "parquet"):
        return None
    _, names, is_text, declared, _ = _table(found, kind, True)
    column = resolve_columns(names, is_text, None, None, label, None, str(found), labelled=False).label
    return declared.get(column) if column else None


def _table(path: Path, kind: str, header: bool):
    """(rows as (number, dict), column names, is_text(column), declared label names by column, "line" | "row")."""
    if kind in ("tsv", "csv"):
        return _delimited(path, kind, header)
    if kind == "jsonl":
        return _json_rows(path)
    if kind == "parquet":
        return _parquet(path)
    return _dataset_folder(path)


def _delimited(path: Path, kind: str, header: bool):
    """TSV (no quoting, as corpora are distributed: a quote is a character of the text) or CSV (RFC 4180)."""
    csv.field_size_limit(sys.maxsize)
    quoting = {"quoting": csv.QUOTE_NONE} if kind == "tsv" else {}
    delimiter = "\t" if kind == "tsv" else ","
    with open_text(path) as f:
        first = next(csv.reader(f, delimiter=delimiter, **quoting), None)
    if first is None:
        raise DataFormatError(f"{path} is empty: expected a {kind.upper()} table of pairs")
    first = [c.lstrip("\ufeff").strip() for c in first]
    names = first if header else [str(i) for i in range(1, len(first) + 1)]
    if header and len(set(names)) != len(names):
        raise DataFormatError(f"{path}, line 1: the header names a column twice ({names}); give each a name")
    sample: dict[str, list[str]] = {n: [] for n in names}

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        with open_text(path) as f:
            reader = csv.reader(f, delimiter=delimiter, **quoting)
            for index, cells in enumerate(reader):
                if index == 0 and header or not cells or cells == [""]:
                    continue
                if len(cells) != len(names):
                    raise DataFormatError(
                        f"{path}, line {reader.line_num}: {len(cells)} {'tab-separated' if kind == 'tsv' else ''} "
                        f"cells where the {'header names' if header else 'first line has'} {len(names)} ({names}). "
                        "Check that line for a stray or missing delimiter" + ("" if kind == "tsv" else " or quote")
                    )
                yield reader.line_num, dict(zip(names, cells, strict=True))

    for _, (_, row) in zip(range(50), rows(), strict=False):
        for n in names:
            sample[n].append(row[n])
    return rows(), names, lambda n: _looks_like_text(sample[n]), {}, "line"


def _looks_like_text(values: Sequence[Any]) -> bool:
    """Whether a column's first values look like sentences (strings, not numbers or ids of one word)."""
    strings = [v for v in values if isinstance(v, str) and v.strip()]
    if not strings or len(strings) < len(values) / 2:
        return False
    numeric = sum(1 for v in strings if label_value(v) != v.strip() or v.strip().lstrip("-").isdigit())
    spaced = sum(1 for v in strings if " " in v.strip())
    return numeric == 0 and spaced >= len(strings) / 2


def _json_rows(path: Path):
    what = "JSON Lines, one object per line with the pair's texts and label"
    lines = numbered_lines(path)
    first = next(((n, line) for n, line in lines if line.strip()), None)
    if first is None:
        raise DataFormatError(f"{path} is empty: expected {what}")

    def records() -> Iterator[tuple[int, Any]]:
        all_lines = numbered_lines(path)
        if first[1].lstrip().startswith("["):  # one JSON array
            text = "\n".join(line for _, line in all_lines)
            yield from json_array(path, text[text.index("[") :], first[0], what)
        else:
            yield from json_lines(path, all_lines, what)

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        for number, record in records():
            if not isinstance(record, dict):
                raise DataFormatError(f"{path}, line {number}: expected a JSON object, found {record!r:.60}")
            yield number, record

    head = [record for _, (_, record) in zip(range(50), rows(), strict=False)]
    names = list(dict.fromkeys(k for r in head for k in r))
    return rows(), names, lambda n: _looks_like_text([r.get(n) for r in head]), {}, "line"


def _parquet(path: Path):
    pq = require("pyarrow.parquet", "hub", "reading a Parquet table")
    table = pq.read_table(path)
    declared = _declared_labels(_hub_features(table.schema.metadata))

    head = table.slice(0, 50).to_pylist()
    return (
        enumerate(table.to_pylist(), 1),
        table.column_names,
        lambda n: _looks_like_text([r.get(n) for r in head]),
        declared,
        "row",
    )


def _hub_features(metadata: dict[bytes, bytes] | None) -> dict[str, Any]:
    """The features the Hugging Face libraries store in a Parquet file's schema metadata, if any."""
    try:
        return json.loads((metadata or {})[b"huggingface"])["info"]["features"]
    except (KeyError, ValueError, TypeError):
        return {}


def _declared_labels(features: dict[str, Any]) -> dict[str, list[str]]:
    return {k: list(v["names"]) for k, v in features.items() if isinstance(v, dict) and v.get("_type") == "ClassLabel"}


def _dataset_folder(path: Path):
    datasets = require("datasets", "hub", "reading a Hugging Face dataset folder")
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        raise DataFormatError(
            f"{path} holds a dataset with the splits {splits}: point each of task.splits.<split>.path at one of its "
            f"folders, e.g. {path / (splits[0] if splits else 'train')}"
        )
    if not (path / "dataset_info.json").is_file() and not (path / "state.json").is_file():
        raise MissingFileError(
            f"{path} is a folder but not a dataset written by datasets' save_to_disk (no state.json); point at a "
            "file (.tsv, .csv, .jsonl, .parquet) or at such a folder"
        )
    return (*rows_of_dataset(datasets.load_from_disk(str(path))), "row")


def rows_of_dataset(dataset: Any) -> tuple[Iterator[tuple[int, dict[str, Any]]], list[str], Callable, dict]:
    """A loaded `datasets.Dataset` (a folder of save_to_disk, or the hub fallback of matching.data.sources) as
    (rows, column names, is_text, the label names its ClassLabel columns declare)."""
    declared = {k: list(v.names) for k, v in dataset.features.items() if type(v).__name__ == "ClassLabel"}
    texts = {k for k, v in dataset.features.items() if getattr(v, "dtype", None) in ("string", "large_string")}
    return ((i, row) for i, row in enumerate(dataset, 1)), list(dataset.column_names), lambda n: n in texts, declared
