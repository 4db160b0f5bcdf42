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
import dataclasses
import itertools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from matching.data.corpus_files import decoded_lines, existing_corpus_file, json_array, json_lines
from matching.data.pairs import Pair
from matching.errors import DataFormatError, MissingFileError
from matching.extras import require
from matching.files import open_binary

log = logging.getLogger(__name__)

#: Pairs of text columns tried in order when the first and second text are not named (case is ignored).
TEXT_COLUMNS = [("sentence1", "sentence2"), ("premise", "hypothesis"), ("question1", "question2"),
                ("question", "answer"), ("question", "sentence"), ("query", "passage"), ("query", "document"),
                ("text1", "text2"), ("text_a", "text_b"), ("context", "response"), ("a", "b"),
                ("query", "positive"), ("anchor", "positive")]  # fmt: skip
#: Label columns tried in order.
LABEL_COLUMNS = ("label", "labels", "gold_label", "is_duplicate", "relevance")
#: Group (question) columns tried in order, for ranking.
GROUP_COLUMNS = ("group", "qid", "question_id", "questionid", "query_id", "id1")
#: Columns that name a pair or a document, never one of its texts: carried or ignored, never guessed to be a text.
ID_COLUMNS = ("id", "_id", "uid", "guid", "idx", "pair_id", "pairid", "doc_id", "document_id", "id2")
#: How a table's user names the text columns (a request's reader says how a request does).
NAME_COLUMNS = "Name them with task.columns.a=<column> task.columns.b=<column>"
#: The label of every pair of a file of matches alone (read_pair_table's `positives`): a ranking task's match.
POSITIVE = "1"
#: Label values that mean "no gold label": the row is dropped and counted.
UNLABELLED = {"", "-", "-1", "none", "null", "nan"}
#: File name endings and the format each is read as.
FORMATS = {".tsv": "tsv", ".txt": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
           ".parquet": "parquet"}  # fmt: skip
#: The formats a table can be read as (`json` is `jsonl`: either reads JSON Lines or one JSON array).
TABLE_FORMATS = ("tsv", "csv", "jsonl", "json", "parquet", "dataset")


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
    advice: str = NAME_COLUMNS,
) -> Columns:
    """The columns to read: the ones named, else found among `names` by their usual names (exactly one of the usual
    pairs, TEXT_COLUMNS, may be there), else (texts) the two columns for which `is_text` holds that are no label,
    group or id column (ID_COLUMNS), unless one column bears a usual text name without its partner (a `b` beside a
    `text`): then which text is which is not guessed by position, and the missing one is named. A named column that
    does not exist, none found, two usual pairs, half a usual pair or more than two candidate texts is a
    DataFormatError that lists the columns there are and says `advice` (how to name them).
    `labelled`: a label column is required."""
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
        usual = list(dict.fromkeys((lower[x], lower[y]) for x, y in TEXT_COLUMNS if x in lower and y in lower))
        if len(usual) > 1:
            raise DataFormatError(
                f"{where}: two pairs of texts are there, {' and '.join('/'.join(u) for u in usual)}, and which one "
                f"to read cannot be told; the columns are {list(names)}. {advice}"
            )
        found = usual[0] if usual else None
        if found is None:
            _refuse_half_pair(names, [(x, y) for x, y in TEXT_COLUMNS], where, advice)
            kept = {*LABEL_COLUMNS, *GROUP_COLUMNS, *ID_COLUMNS}
            texts = [n for n in names if n not in (label, group) and n.lower() not in kept and is_text(n)]
            if len(texts) > 2:
                raise DataFormatError(
                    f"{where}: more than two columns could be the texts ({texts}), and which two cannot be told; "
                    f"the columns are {list(names)}. {advice}"
                )
            found = tuple(texts) if len(texts) == 2 else None
        if found is None:
            raise DataFormatError(
                f"{where}: cannot tell which columns hold the two texts; the columns are {list(names)}. {advice}"
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


def _refuse_half_pair(names: Sequence[str], pairs: Sequence[tuple[str, str]], where: str, advice: str) -> None:
    """A DataFormatError when a name among `names` is one text of one of `pairs` (first, second) and its partner is
    not there: the texts would otherwise be guessed by position, perhaps swapped (`{"b": .., "text": ..}` read as
    a=b). Names the missing text and the names there are; case is ignored."""
    lower = {n.lower(): n for n in names}
    for present in names:
        missing = [
            y if x.lower() == present.lower() else x for x, y in pairs if present.lower() in (x.lower(), y.lower())
        ]
        missing = [m for m in dict.fromkeys(missing) if m.lower() not in lower]
        if missing:
            side = "first" if any(present.lower() == x.lower() for x, _ in pairs) else "second"
            other = "second" if side == "first" else "first"
            raise DataFormatError(
                f"{where}: cannot tell which columns hold the two texts: {present!r} names the {side} text of a "
                f"pair and there is no {' or '.join(repr(m) for m in missing)} for the {other} (which is which is "
                f"never guessed); the columns are {list(names)}. {advice}"
            )


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
    """Pairs from `(line or row number, row)` (see `pair_of_row`). A row without a label is dropped and counted."""
    kept = dropped = 0
    for number, row in rows:
        pair = pair_of_row(number, row, columns, where, label_names, group_by_text, unit)
        if pair is None:
            dropped += 1
            continue
        kept += 1
        yield pair
    how = f"columns {columns.a!r}, {columns.b!r}" + (f", label {columns.label!r}" if columns.label else "")
    how += f", group {columns.group!r}" if columns.group else (", grouped by the first text" if group_by_text else "")
    log.info("read %d pairs from %s (%s); dropped %d without a label", kept, where, how, dropped)


def pair_of_row(
    number: int,
    row: dict[str, Any],
    columns: Columns,
    where: str,
    label_names: Sequence[str] | None = None,
    group_by_text: bool = False,
    unit: str = "line",
) -> Pair | None:
    """One row's pair: the texts, the label (see label_value) and the group (the group column, or the first text
    when `group_by_text`); None for a row without a label where there is a label column. A text that is not a
    string is a DataFormatError naming the row."""
    label = label_value(row.get(columns.label), label_names) if columns.label else ""
    if columns.label and not label:
        return None
    a, b = row.get(columns.a), row.get(columns.b)
    if not isinstance(a, str) or not isinstance(b, str):
        bad, value = (columns.a, a) if not isinstance(a, str) else (columns.b, b)
        raise DataFormatError(
            f"{where}, {unit} {number}: column {bad!r} holds {value!r:.60}, not a text. Fix or remove that row, "
            "or name the text columns with task.columns.a / task.columns.b"
        )
    group = row.get(columns.group) if columns.group else (a.strip() if group_by_text else None)
    return Pair(a.strip(), b.strip(), label, None if group is None else str(group), number)


def table_format(path: Path, format: str | None) -> str:
    """The format a file is read as: `format` when given, else by its name (a `.gz` ending ignored); a folder is a
    Hugging Face dataset written by `save_to_disk`."""
    if format:
        if format not in TABLE_FORMATS:
            raise DataFormatError(
                f"task.reader.format={format!r} is not a table format; choose one of {list(TABLE_FORMATS)} (or leave "
                "it unset to go by the file name)"
            )
        return format
    if path.is_dir():
        return "dataset"
    kind = format_by_name(path)
    if kind is None:
        raise DataFormatError(
            f"{path}: cannot tell the table format from the name {path.name!r}; name the file .tsv, .csv, .jsonl or "
            ".parquet, or set task.reader.format=tsv|csv|jsonl|parquet|dataset"
        )
    return kind


def format_by_name(path: Path) -> str | None:
    """The table format a file's name says (`.gz` ignored), or None."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return FORMATS.get(Path(name).suffix.lower())


@dataclass
class Table:
    """An open table: its rows as `(line or row number, {column: value})` (an iterator, read once), the column
    names, whether a column looks like text (`is_text`), the label names its columns declare (a ClassLabel), what
    a row number counts ("line" or "row") and the name of the file in messages (`where`)."""

    rows: Iterator[tuple[int, dict[str, Any]]]
    names: list[str]
    is_text: Callable[[str], bool]
    declared: dict[str, list[str]]
    unit: str
    where: str


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
    positives: bool = False,
) -> Iterator[Pair]:
    """Read pairs from a table (see the module docstring): `a`, `b`, `label`, `group` name its columns (None: found
    by their usual names); `format` tsv | csv | jsonl | parquet | dataset (None: by the file name); `header`:
    whether a TSV/CSV file's first line names its columns (False: they are named "1", "2", ... ); `rank`: a ranking
    corpus, whose pairs without a group column are grouped by their first text; `positives`: a file without a label
    column holds matches alone (each pair gets the label "1"; negatives are mined, matching.data.negatives)."""
    given = Path(os.path.expanduser(str(path)))
    found = given if given.is_dir() else existing_corpus_file(given)
    table = open_table(found, table_format(found, format), header)
    columns = resolve_columns(table.names, table.is_text, a, b, label, group, table.where, labelled=not positives)
    names_of_labels = table.declared.get(columns.label) if columns.label else None
    if positives and columns.label is None:
        pairs = pairs_from_rows(table.rows, columns, table.where, None, group_by_text=rank, unit=table.unit)
        return (dataclasses.replace(p, label=POSITIVE) for p in pairs)
    return pairs_from_rows(table.rows, columns, table.where, names_of_labels, group_by_text=rank, unit=table.unit)


def label_names(path: str | os.PathLike[str], label: str | None = None, format: str | None = None) -> list[str] | None:
    """The label names a table declares for its label column (a `ClassLabel` of a Hugging Face dataset folder or of
    a Parquet file the hub wrote), or None where it declares none (then the values seen in the data are used)."""
    given = Path(os.path.expanduser(str(path)))
    found = given if given.is_dir() else existing_corpus_file(given)
    kind = table_format(found, format)
    if kind not in ("dataset", "parquet"):
        return None
    table = open_table(found, kind, True)
    column = resolve_columns(table.names, table.is_text, None, None, label, None, table.where, labelled=False).label
    return table.declared.get(column) if column else None


def open_table(
    source: Path | IO,
    kind: str,
    header: bool | str,
    where: str | None = None,
    preferred: Sequence[str | None] = (),
    named: Sequence[str] = (),
) -> Table:
    """The table in `source` (a path, or for the text formats an open stream such as stdin) read as `kind`.
    `header` (TSV, CSV): True, the first line names the columns; False, it does not (they are named "1", "2", ...);
    "auto", it does when its cells name the columns a table of pairs has (see `is_header`: the `preferred` a and b,
    a run's own, or the usual ones, or any column `named` by the user)."""
    where = str(source) if where is None else where
    if kind in ("tsv", "csv"):
        return _delimited(source, kind, header, where, preferred, named)
    if kind in ("jsonl", "json"):
        return _json_rows(source, where)
    if not isinstance(source, Path):
        raise DataFormatError(f"{where}: a {kind} table is read from a file, not from a stream; give its path")
    if kind == "parquet":
        return _parquet(source)
    return _dataset_folder(source)


def is_header(cells: Sequence[str], preferred: Sequence[str | None] = (), named: Sequence[str] = ()) -> bool:
    """Whether a first line's cells are a header: they name both texts of a pair, by the `preferred` names (a run's
    own task.columns a and b) or by one of the usual pairs (TEXT_COLUMNS), or they hold one of the columns `named`
    for this input by the user; case is ignored. A line with one such name alone (`evidence<TAB>text`) is a header
    too, so that the missing text is named (`new_pair_columns`) rather than the line read as a pair and the rows by
    position, perhaps in the other order."""
    names = {c.strip().lower() for c in cells}
    if any(str(n).lower() in names for n in named):
        return True
    wanted = [str(n).lower() for n in preferred[:2] if n is not None]
    if len(wanted) == 2 and set(wanted) <= names:
        return True
    if any(x in names and y in names for x, y in TEXT_COLUMNS):
        return True
    texts = {x for pair in TEXT_COLUMNS for x in pair} | {n for n in wanted if not n.isdigit()}
    return bool(names & texts)


def _delimited(
    source: Path | IO, kind: str, header: bool | str, where: str, preferred: Sequence[str | None], named: Sequence[str]
) -> Table:
    """TSV (no quoting, as corpora are distributed: a quote is a character of the text) or CSV (RFC 4180: a quoted
    field may hold line breaks; such fields are counted and the first named, since a stray quote makes one)."""
    rows = _delimited_rows(source, kind, where)
    first = next(rows, None)
    if first is None:
        raise DataFormatError(f"{where} is empty: expected a {kind.upper()} table of pairs")
    first_line, cells = first
    cells = [c.lstrip("\ufeff").strip() for c in cells]
    if header == "auto":
        header = is_header(cells, preferred, named)
    names = cells if header else [str(i) for i in range(1, len(cells) + 1)]
    if header and len(set(names)) != len(names):
        raise DataFormatError(f"{where}, line 1: the header names a column twice ({names}); give each a name")

    def records() -> Iterator[tuple[int, dict[str, Any]]]:
        for line, values in rows if header else itertools.chain([first], rows):
            if len(values) != len(names):
                raise DataFormatError(
                    f"{where}, line {line}: {len(values)} {'tab-separated ' if kind == 'tsv' else ''}cells where the "
                    f"{'header names' if header else 'first line has'} {len(names)} ({names}). Check that line for a "
                    "stray or missing delimiter" + ("" if kind == "tsv" else " or quote")
                )
            yield line, dict(zip(names, values, strict=True))

    head, rest = _peek(records(), 50)
    sample = {n: [row[n] for _, row in head] for n in names}
    return Table(itertools.chain(head, rest), names, lambda n: _looks_like_text(sample[n]), {}, "line", where)


def _delimited_rows(source: Path | IO, kind: str, where: str) -> Iterator[tuple[int, list[str]]]:
    """(the line a row starts on, its cells) of a TSV or CSV file or stream, blank lines skipped. A CSV field that
    runs over several lines is read as CSV says; at the end the log counts them and names the first, and a quote
    that never closes is an error naming the line where it opened."""
    csv.field_size_limit(sys.maxsize)
    quoting = {"quoting": csv.QUOTE_NONE} if kind == "tsv" else {}
    with ExitStack() as stack:
        stream = stack.enter_context(open_binary(source)) if isinstance(source, Path) else source
        at = [0]  # the number of the last line the csv reader has taken

        def lines() -> Iterator[str]:
            for number, text in decoded_lines(stream, where):
                at[0] = number
                yield text + "\n"

        # strict: a quote that never closes is an error (not the rest of the file as one text), and so is text
        # between a closing quote and the delimiter ("a" b), which a lenient reader would silently glue on
        reader = csv.reader(lines(), delimiter="\t" if kind == "tsv" else ",", strict=kind == "csv", **quoting)
        end, spanning, first_spanning = 0, 0, None
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as err:
                start = end + 1
                if "unexpected end of data" in str(err):
                    raise DataFormatError(
                        f"{where}, line {start}: a quote opens a field in the row that starts on this line and never "
                        f'closes (the file ends, at line {at[0]}, inside it). Close the quote, or double it ("") '
                        "where it is part of the text"
                    ) from None
                if at[0] > start:  # the field opened on an earlier line: there, a stray quote is the likely cause
                    raise DataFormatError(
                        f"{where}, line {start}: a quote opens a field in the row that starts on this line, and the "
                        f"field runs on to line {at[0]}, where the CSV reader stops ({err}: text after the quote "
                        f"that closes it). The rows of lines {start}-{at[0]} were swallowed into one text: remove or "
                        'double ("") the stray quote on line ' + f"{start}, or quote that whole field"
                    ) from None
                raise DataFormatError(
                    f"{where}, line {at[0]}: {err} (text after a closing quote, before the next comma). Quote the "
                    'whole field, and double a quote ("") that is part of the text'
                ) from None
            start, end = end + 1, at[0]
            if not cells or cells == [""]:
                continue
            if end > start:
                spanning += 1
                first_spanning = first_spanning or (start, end)
            yield start, cells
        if spanning:
            log.warning(
                "%s: %d text%s run%s over several lines (a quoted field with line breaks, as CSV allows), the first "
                "on lines %d-%d: if that is a stray quote, the rows it swallowed were read as one text",
                where, spanning, "" if spanning == 1 else "s", "s" if spanning == 1 else "", *first_spanning,
            )  # fmt: skip


def _looks_like_text(values: Sequence[Any]) -> bool:
    """Whether a column's first values look like sentences (strings, not numbers or ids of one word)."""
    strings = [v for v in values if isinstance(v, str) and v.strip()]
    if not strings or len(strings) < len(values) / 2:
        return False
    numeric = sum(1 for v in strings if label_value(v) != v.strip() or v.strip().lstrip("-").isdigit())
    spaced = sum(1 for v in strings if " " in v.strip())
    return numeric == 0 and spaced >= len(strings) / 2


def _json_rows(source: Path | IO, where: str) -> Table:
    """JSON Lines, or one JSON array of objects (told apart by the first non-blank character), from a file or stream;
    JSON Lines are read lazily."""
    what = "JSON Lines (one object per line with the pair's texts) or one JSON array of such objects"

    def records() -> Iterator[tuple[int, Any]]:
        with ExitStack() as stack:
            stream = stack.enter_context(open_binary(source)) if isinstance(source, Path) else source
            lines = decoded_lines(stream, where)
            first = next(((n, line) for n, line in lines if line.strip()), None)
            if first is None:
                return
            if first[1].lstrip().startswith("["):  # one JSON array
                text = "\n".join([first[1], *(line for _, line in lines)])
                yield from json_array(where, text[text.index("[") :], first[0], what)
            else:
                yield from json_lines(where, itertools.chain([first], lines), what)

    def rows() -> Iterator[tuple[int, dict[str, Any]]]:
        for number, record in records():
            if not isinstance(record, dict):
                raise DataFormatError(f"{where}, line {number}: expected a JSON object, found {record!r:.60}")
            yield number, record

    head, rest = _peek(rows(), 50)
    if not head:
        raise DataFormatError(f"{where} is empty: expected {what}")
    names = list(dict.fromkeys(k for _, r in head for k in r))
    is_text = lambda n: _looks_like_text([r.get(n) for _, r in head])  # noqa: E731
    return Table(itertools.chain(head, rest), names, is_text, {}, "line", where)


def _peek(items: Iterator, n: int) -> tuple[list, Iterator]:
    """The first `n` items (a list) and the rest (the same iterator, advanced past them)."""
    return list(itertools.islice(items, n)), items


def _parquet(path: Path) -> Table:
    pq = require("pyarrow.parquet", "hub", "reading a Parquet table")
    table = pq.read_table(path)
    declared = _declared_labels(_hub_features(table.schema.metadata))
    head = table.slice(0, 50).to_pylist()
    is_text = lambda n: _looks_like_text([r.get(n) for r in head])  # noqa: E731
    return Table(enumerate(table.to_pylist(), 1), table.column_names, is_text, declared, "row", str(path))


def _hub_features(metadata: dict[bytes, bytes] | None) -> dict[str, Any]:
    """The features the Hugging Face libraries store in a Parquet file's schema metadata, if any."""
    try:
        return json.loads((metadata or {})[b"huggingface"])["info"]["features"]
    except (KeyError, ValueError, TypeError):
        return {}


def _declared_labels(features: dict[str, Any]) -> dict[str, list[str]]:
    return {k: list(v["names"]) for k, v in features.items() if isinstance(v, dict) and v.get("_type") == "ClassLabel"}


def _dataset_folder(path: Path) -> Table:
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
    return Table(*rows_of_dataset(datasets.load_from_disk(str(path))), "row", str(path))


def rows_of_dataset(dataset: Any) -> tuple[Iterator[tuple[int, dict[str, Any]]], list[str], Callable, dict]:
    """A loaded `datasets.Dataset` (a folder of save_to_disk, or the hub fallback of matching.data.sources) as
    (rows, column names, is_text, the label names its ClassLabel columns declare)."""
    declared = {k: list(v.names) for k, v in dataset.features.items() if type(v).__name__ == "ClassLabel"}
    texts = {k for k, v in dataset.features.items() if getattr(v, "dtype", None) in ("string", "large_string")}
    return ((i, row) for i, row in enumerate(dataset, 1)), list(dataset.column_names), lambda n: n in texts, declared


# -- new pairs: what predict, Matcher and the server score ------------------------------------------------------


def read_new_pairs(
    source: str | os.PathLike[str] | IO[bytes],
    *,
    where: str | None = None,
    format: str = "auto",
    header: bool | str = "auto",
    preferred: Mapping[str, str | None] | None = None,
    named: Mapping[str, str | None] | None = None,
) -> Iterator[Pair]:
    """New pairs to score, from a table of one's own in any format training reads (TSV, CSV, JSON Lines, one JSON
    array, Parquet, a dataset folder; plain or .gz), a file or a stream of bytes (stdin). `format` auto goes by the
    file's name, else by its first non-blank line (`{` JSON Lines, `[` a JSON array, else TSV). `header` auto: a
    first line that names the texts' columns (the run's own, `preferred`, or the usual ones) is a header, never a
    pair; a file without one is read by position, `a<TAB>b[<TAB>group]`. The columns are `named` (a user's options
    for this input: they must exist), else the run's own `preferred` task.columns where the input has them, else
    found by their usual names (see resolve_columns). A label column, if any, is not read. An empty text is an
    error naming its line."""
    if format not in ("auto", *TABLE_FORMATS):
        raise DataFormatError(f"input_format must be one of {['auto', *TABLE_FORMATS]}, got {format!r}")
    if header not in (True, False, "auto"):
        raise DataFormatError(f"the header setting must be true, false or auto, got {header!r}")
    if isinstance(source, (str, os.PathLike)):
        path = Path(os.path.expanduser(str(source)))
        where = where or str(path)
        kind = format if format != "auto" else "dataset" if path.is_dir() else format_by_name(path)
        if kind is None:
            with open_binary(path) as stream:
                kind = _sniffed(stream)[0]
        opened: Path | IO = path
    else:
        where = where or "<stdin>"
        kind, lines = _sniffed(source)
        kind = kind if format == "auto" else format
        opened = lines
    named = {k: v for k, v in (named or {}).items() if v}
    run_names = [(preferred or {}).get(k) for k in ("a", "b")]
    table = open_table(opened, kind, header, where, run_names, list(named.values()))
    records = kind in ("jsonl", "json")  # objects, each with its own keys: one that lacks the columns is read alone
    try:
        columns, how = new_pair_columns(table.names, table.is_text, preferred or {}, named, where)
    except DataFormatError:
        if not records or named:
            raise
        columns, how = None, ""  # the rows name their texts differently (a/b here, premise/hypothesis there)
    if columns is None:
        log.info("%s: each row's texts found by its own keys", where)
    else:
        log.info("%s: texts from columns %r and %r%s (%s)", where, columns.a, columns.b,
                 f", group {columns.group!r}" if columns.group else "", how)  # fmt: skip
    count = 0
    for number, row in table.rows:
        place = f"{where}, {table.unit} {number}"
        if records and not named and (columns is None or columns.a not in row or columns.b not in row):
            pair = pair_of_mapping(row, place, preferred, number)
        else:
            pair = pair_of_row(number, row, columns, where, unit=table.unit)
        if not pair.a.strip() or not pair.b.strip():
            side = "first" if not pair.a.strip() else "second"
            raise DataFormatError(f"{place}: the {side} text is empty; give both texts of the pair")
        count += 1
        yield pair
    log.info("read %d new pair%s from %s", count, "" if count == 1 else "s", where)


def _sniffed(stream: IO[bytes]) -> tuple[str, Iterator[bytes]]:
    """The format a stream's first non-blank line says (`{` jsonl, `[` json, else tsv), and the stream's lines from
    its start (the ones read to tell are put back)."""
    read: list[bytes] = []
    kind = "tsv"
    for raw in stream:
        read.append(raw)
        text = raw.decode("utf-8", errors="replace").lstrip("\ufeff").strip() if isinstance(raw, bytes) else raw.strip()
        if text:
            kind = "jsonl" if text[0] == "{" else "json" if text[0] == "[" else "tsv"
            break
    return kind, itertools.chain(read, stream)


def new_pair_columns(
    names: Sequence[str],
    is_text: Callable[[str], bool],
    preferred: Mapping[str, str | None],
    named: Mapping[str, str | None],
    where: str,
    advice: str = NAME_COLUMNS,
) -> tuple[Columns, str]:
    """The columns new pairs are read from (no label), and how they were chosen: see read_new_pairs. Headerless
    tables name their columns "1", "2", ...: by position, the two texts and an optional group, unless the run was
    trained on such a table."""
    lower = {n.lower() for n in names}
    if named.get("a") or named.get("b") or named.get("group"):
        found = resolve_columns(names, is_text, named.get("a"), named.get("b"), None, named.get("group"), where,
                                labelled=False, advice=advice)  # fmt: skip
        how = "as named for this input"
    elif all(preferred.get(k) and str(preferred[k]).lower() in lower for k in ("a", "b")):
        group = preferred.get("group") if preferred.get("group") and str(preferred["group"]).lower() in lower else None
        found = resolve_columns(names, is_text, preferred["a"], preferred["b"], None, group, where, labelled=False,
                                advice=advice)  # fmt: skip
        how = "the run's own"
    elif names and names[0] == "1":  # a file without a header: by position
        if len(names) not in (2, 3):
            raise DataFormatError(
                f"{where}: expected 2 or 3 columns (a, b[, group]), found {len(names)}, and no header line naming "
                f"them. Add a header naming the columns (the run's own{_listed(preferred)}, or e.g. a and b), or give "
                "the columns with columns.a=<name> columns.b=<name>"
            )
        found = Columns("1", "2", None, "3" if len(names) == 3 else None)
        how = "by position: no header line"
    else:
        # One of the run's own names without the other (both would have been read above): that text is read only
        # where a usual pair puts it on its own side (a run's question/sentence given question/answer); else the
        # other is named as missing, never guessed by position.
        own = (str(preferred.get("a") or ""), str(preferred.get("b") or ""))
        half = [(side, n) for side, n in zip(("a", "b"), own, strict=True) if all(own) and n.lower() in lower]
        try:
            found = resolve_columns(names, is_text, None, None, None, None, where, labelled=False, advice=advice)
        except DataFormatError:
            if not half:
                raise
            found = None
        usual = found is not None and (found.a.lower(), found.b.lower()) in TEXT_COLUMNS
        if half and (not usual or getattr(found, half[0][0]).lower() != half[0][1].lower()):
            _refuse_half_pair(names, [own], where, advice)
        how = "found by their usual names" + (
            f"; the run's own{_listed(preferred)} are not among {list(names)}" if preferred.get("a") else ""
        )
    return Columns(found.a, found.b, None, found.group), how


def _listed(preferred: Mapping[str, str | None]) -> str:
    named = [str(preferred[k]) for k in ("a", "b", "group") if preferred.get(k)]
    return f" ({', '.join(named)})" if named else ""


def text_names(columns: Mapping[str, Any]) -> tuple[str, str]:
    """The names of a run's two texts in what it gives back (predictions, the page, its card, its HTTP messages): its
    own column names (`task.columns.a`/`.b`, e.g. claim and evidence), else a and b."""
    return str(columns.get("a") or "a"), str(columns.get("b") or "b")


def pair_of_mapping(
    obj: object,
    where: str,
    preferred: Mapping[str, str | None] | None = None,
    line: int = 0,
    advice: str = NAME_COLUMNS,
) -> Pair:
    """A new pair from a dict (a JSON object of a request, a row of a JSON Lines file, an item given to Matcher): its
    texts under the run's own column names (`preferred`) or the usual ones, by the rule files are read by
    (`new_pair_columns`), its group under a group column if any; other keys (an id, a label) are ignored.
    `advice`: how this input's user names the texts, said when they cannot be told."""
    if not isinstance(obj, dict):
        raise DataFormatError(f"{where}: expected an object with the two texts, got {obj!r:.60}")
    names = [str(k) for k in obj]
    columns, _ = new_pair_columns(names, lambda n: isinstance(obj.get(n), str), preferred or {}, {}, where, advice)
    a, b = obj.get(columns.a), obj.get(columns.b)
    if not isinstance(a, str) or not isinstance(b, str):
        raise DataFormatError(f"{where}: {columns.a!r} and {columns.b!r} must be strings, got {a!r:.40}, {b!r:.40}")
    group = obj.get(columns.group) if columns.group else None
    return Pair(a, b, "", None if group is None else str(group), line)
