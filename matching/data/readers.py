"""Readers for the sentence-pair corpora, one function per distributed file *format*.

Every reader takes the path of one split file (plain or gzipped; see :func:`open_text`) and yields
:class:`Pair` objects with the texts and the label exactly as the corpus spells them. Mapping labels to ids,
tokenising and building vocabularies happen elsewhere.

Readers decode line by line from bytes rather than through a text stream, so that a bad byte, a bad JSON
line or a short row is reported with the line it is on. Examples without a usable label (SNLI/MultiNLI
``gold_label`` "-" or an empty label) are dropped and counted; each reader logs one INFO summary line when
it reaches the end of its file.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

logger = logging.getLogger(__name__)

__all__ = [
    "READERS",
    "DataFormatError",
    "Pair",
    "open_text",
    "read_dnli",
    "read_scitail_tsv",
    "read_snli_jsonl",
]

_GZIP_MAGIC = b"\x1f\x8b"
# Labels that mark an example with no usable gold label, and how the summary line describes them.
_DROPPED_LABELS = {"-": 'label "-" (no annotator consensus)', "": "empty label"}
_JSON_WS = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True, slots=True)
class Pair:
    """One example: two texts and the corpus's label string.

    ``group`` identifies the question/context a candidate belongs to in ranking corpora; NLI readers
    leave it ``None``.
    """

    a: str
    b: str
    label: str
    group: str | None = None


class DataFormatError(ValueError):
    """A corpus file is malformed. The message names the file, the 1-based line number and what to do."""


# --------------------------------------------------------------------------------------------- opening


def _resolve(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` if it exists, else its twin: ``x`` -> ``x.gz``, ``x.gz`` -> ``x``.

    Raises FileNotFoundError naming both paths tried.
    """
    p = Path(path)
    if p.exists():
        return p
    twin = p.with_name(p.name[:-3]) if p.name.endswith(".gz") else p.with_name(p.name + ".gz")
    if twin.exists():
        return twin
    raise FileNotFoundError(f"corpus file not found: tried {str(p)!r} and {str(twin)!r}")


def _is_gzip(path: Path) -> bool:
    """A ``.gz`` name, or gzip magic bytes (some downloaders keep the compression but drop the suffix)."""
    if path.name.endswith(".gz"):
        return True
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _open_binary(path: Path) -> BinaryIO:
    if _is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def open_text(path: str | os.PathLike[str], *, errors: str = "strict") -> TextIO:
    """Open a corpus file as UTF-8 text with universal newlines (CRLF reads as LF).

    Gunzips transparently when the file is gzip. If ``path`` does not exist, its twin is tried:
    ``x.jsonl`` -> ``x.jsonl.gz`` and ``x.jsonl.gz`` -> ``x.jsonl``; if neither exists,
    :class:`FileNotFoundError` names both. ``errors`` is passed to the decoder (e.g. ``"replace"`` for
    files known to carry stray non-UTF-8 bytes).

    Decoding errors and truncated gzip data surface while *reading* from the returned stream, as
    :class:`UnicodeDecodeError` / :class:`EOFError`; the ``read_*`` functions turn those into
    :class:`DataFormatError` with a line number.
    """
    p = _resolve(path)
    return io.TextIOWrapper(_open_binary(p), encoding="utf-8", errors=errors, newline=None)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line without its line ending)`` from a plain or gzipped file.

    A leading UTF-8 byte-order mark is removed. Bad UTF-8 and truncated or corrupt gzip data raise
    :class:`DataFormatError` naming the line.
    """
    lineno = 0
    with _open_binary(path) as f:
        try:
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataFormatError(
                        f"{path}, line {lineno}: byte {raw[e.start : e.start + 1]!r} at byte offset "
                        f"{e.start} of the line is not valid UTF-8. The corpus files are UTF-8; "
                        "re-download the file, or convert it (e.g. `iconv -f cp1252 -t utf-8`)."
                    ) from None
                if lineno == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                yield lineno, line.rstrip("\r\n")
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise _gzip_error(path, lineno + 1, e) from None


def _gzip_error(path: Path, lineno: int, e: BaseException) -> DataFormatError:
    return DataFormatError(
        f"{path}, line {lineno}: the gzip data ends early or is corrupt ({e}). The file looks "
        "truncated or damaged (an interrupted download or copy?); re-download it."
    )


# ---------------------------------------------------------------------------------------------- helpers


class _Tally:
    """Counts kept and dropped examples for the one summary log line per file."""

    __slots__ = ("path", "kept", "dropped")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = 0
        self.dropped: Counter[str] = Counter()

    def log(self) -> None:
        n_dropped = sum(self.dropped.values())
        if n_dropped:
            why = ", ".join(f"{n} with {reason}" for reason, n in self.dropped.most_common())
            logger.info("read %d pairs from %s; dropped %d (%s)", self.kept, self.path, n_dropped, why)
        else:
            logger.info("read %d pairs from %s; dropped 0", self.kept, self.path)


def _pairs_from_records(
    path: Path,
    records: Iterable[tuple[int, Any]],
    fields: tuple[str, str, str],
    what: str,
) -> Iterator[Pair]:
    """Turn ``(line number, decoded JSON value)`` records into pairs.

    ``fields`` names the (first text, second text, label) keys; ``what`` describes the expected format
    for error messages. A ``null`` label counts as empty (dropped); a non-string text is an error.
    """
    fa, fb, fl = fields
    tally = _Tally(path)
    for lineno, rec in records:
        if not isinstance(rec, dict):
            raise DataFormatError(
                f"{path}, line {lineno}: expected a JSON object, found {type(rec).__name__}. "
                f"Is this {what}? Check the file and the task's data format setting."
            )
        try:
            a, b, label = rec[fa], rec[fb], rec[fl]
        except KeyError as e:
            raise DataFormatError(
                f"{path}, line {lineno}: missing required field {e.args[0]!r} (found fields: "
                f"{', '.join(sorted(rec)) or 'none'}). Is this {what}? Check the file and the task's "
                "data format setting."
            ) from None
        label = "" if label is None else str(label).strip()
        if label in _DROPPED_LABELS:
            tally.dropped[_DROPPED_LABELS[label]] += 1
            continue
        if not (isinstance(a, str) and isinstance(b, str)):
            bad = fa if not isinstance(a, str) else fb
            raise DataFormatError(
                f"{path}, line {lineno}: field {bad!r} is {type(rec[bad]).__name__}, expected a string. "
                f"Is this {what}? Fix or remove that line."
            )
        tally.kept += 1
        yield Pair(a.strip(), b.strip(), label)
    tally.log()


def _json_lines(path: Path, lines: Iterable[tuple[int, str]], what: str) -> Iterator[tuple[int, Any]]:
    """Decode JSON Lines, skipping blank lines."""
    loads = json.loads
    for lineno, line in lines:
        if not line or line.isspace():
            continue
        try:
            yield lineno, loads(line)
        except json.JSONDecodeError as e:
            raise DataFormatError(
                f"{path}, line {lineno}: invalid JSON ({e.msg} at column {e.colno}). Expected {what}, one "
                "object per line; if the file was cut short re-download it, otherwise fix or remove "
                "that line."
            ) from None


def _json_array(path: Path, text: str, first_lineno: int, what: str) -> Iterator[tuple[int, Any]]:
    """Decode a top-level JSON array element by element, so each element's line number is known.

    ``text`` starts at the ``[`` which is on line ``first_lineno`` of the file. Line numbers are only
    computed (by counting newlines) when an element is yielded, which is cheap for single-line arrays and
    linear overall for pretty-printed ones because counting resumes where it stopped.
    """
    decode = json.JSONDecoder().raw_decode
    ws = _JSON_WS.match
    n = len(text)
    counted_to, lineno = 0, first_lineno

    def line_at(pos: int) -> int:
        nonlocal counted_to, lineno
        lineno += text.count("\n", counted_to, pos)
        counted_to = pos
        return lineno

    def fail(pos: int, msg: str) -> DataFormatError:
        return DataFormatError(
            f"{path}, line {line_at(pos)}: {msg}. Expected {what}; if the file was cut short re-download "
            "it, otherwise fix it there."
        )

    pos = ws(text, 1).end()
    if pos < n and text[pos] == "]":
        return
    while True:
        try:
            obj, end = decode(text, pos)
        except json.JSONDecodeError as e:
            raise fail(e.pos, f"invalid JSON in the array ({e.msg})") from None
        yield line_at(pos), obj
        pos = ws(text, end).end()
        if pos >= n:
            raise fail(n, "the JSON array is not closed (no final ']'): the file looks truncated")
        if text[pos] == "]":
            break
        if text[pos] != ",":
            raise fail(pos, f"expected ',' or ']' between array elements, found {text[pos]!r}")
        pos = ws(text, pos + 1).end()
    if ws(text, pos + 1).end() != n:
        raise fail(pos + 1, "unexpected data after the closing ']' of the JSON array")


# ---------------------------------------------------------------------------------------------- readers

_SNLI_WHAT = "SNLI/MultiNLI 1.0 JSON Lines (sentence1, sentence2, gold_label)"
_DNLI_WHAT = "Dialogue NLI JSON (sentence1, sentence2, label)"


def read_snli_jsonl(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read SNLI 1.0 or MultiNLI 1.0 JSON Lines: ``sentence1``, ``sentence2``, ``gold_label``.

    Lines whose ``gold_label`` is "-" (annotators did not agree) are dropped, as is conventional.
    """
    p = _resolve(path)
    return _pairs_from_records(
        p, _json_lines(p, _lines(p), _SNLI_WHAT), ("sentence1", "sentence2", "gold_label"), _SNLI_WHAT
    )


def read_scitail_tsv(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read SciTail 1.1 ``tsv_format``: no header; premise, hypothesis, label (entails/neutral)."""
    p = _resolve(path)
    return _scitail(p)


def _scitail(path: Path) -> Iterator[Pair]:
    tally = _Tally(path)
    for lineno, line in _lines(path):
        if not line or line.isspace():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            raise DataFormatError(
                f"{path}, line {lineno}: found {len(cols)} tab-separated columns, expected 3 "
                "(premise, hypothesis, label). Use SciTailV1.1/tsv_format/ (not dgem_format or "
                "predictor_format), and check that line for a stray or missing tab."
            )
        a, b, label = (c.strip() for c in cols)
        if label in _DROPPED_LABELS:
            tally.dropped[_DROPPED_LABELS[label]] += 1
            continue
        tally.kept += 1
        yield Pair(a, b, label)
    tally.log()


def read_dnli(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read Dialogue NLI: ``sentence1``, ``sentence2``, ``label`` (positive/neutral/negative).

    The official ``.jsonl`` files are in fact one JSON array; converted copies are often true JSON Lines.
    Both are accepted: the file is an array when its first non-whitespace character is ``[``. An array
    is decoded whole (the largest split, train, is a few hundred MB of text at most).
    """
    p = _resolve(path)
    return _pairs_from_records(p, _dnli_records(p), ("sentence1", "sentence2", "label"), _DNLI_WHAT)


def _dnli_records(path: Path) -> Iterator[tuple[int, Any]]:
    lines = _lines(path)
    for lineno, line in lines:
        if not line or line.isspace():
            continue
        if line.lstrip().startswith("["):
            rest = [line.lstrip()]
            rest.extend(ln for _, ln in lines)
            yield from _json_array(path, "\n".join(rest), lineno, _DNLI_WHAT)
        else:
            yield from _json_lines(path, _chain_one((lineno, line), lines), _DNLI_WHAT)
        return


def _chain_one(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


READERS: dict[str, Callable[[str | os.PathLike[str]], Iterator[Pair]]] = {
    "snli_jsonl": read_snli_jsonl,
    "mnli_jsonl": read_snli_jsonl,
    "scitail_tsv": read_scitail_tsv,
    "dnli_json": read_dnli,
}
