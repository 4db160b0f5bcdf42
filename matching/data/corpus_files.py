"""A corpus file read line by line: found beside its .gz twin, decoded as UTF-8 with each bad byte, truncated gzip
or bad JSON reported with the line it is on. What the corpus readers (matching.data.readers) and the tables of
one's own pairs (matching.data.tables) read their files with."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from matching.errors import DataFormatError, MissingFileError
from matching.files import existing, gz_twin, open_binary

_JSON_WS = re.compile(r"[ \t\n\r]*")


def existing_corpus_file(path: str | os.PathLike[str]) -> Path:
    """``path`` if it exists, else its twin (``x`` <-> ``x.gz``); FileNotFoundError names both paths tried."""
    found = existing(path)
    if found is None:
        raise MissingFileError(f"corpus file not found: tried {str(path)!r} and {str(gz_twin(path))!r}")
    if found.is_dir():
        raise DataFormatError(
            f"{found} is a folder, but this corpus format is one file per split: point task.splits.<split>.path at "
            "the file (or choose the reader of a folder format with task/reader=..., e.g. trecqa_toks)"
        )
    return found


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
    p = existing_corpus_file(path)
    return io.TextIOWrapper(open_binary(p), encoding="utf-8", errors=errors, newline=None)


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line without its line ending)`` from a plain or gzipped file.

    A leading UTF-8 byte-order mark is removed. Bad UTF-8 and truncated or corrupt gzip data raise
    :class:`DataFormatError` naming the line.
    """
    with open_binary(path) as f:
        yield from decoded_lines(f, path)


def decoded_lines(stream: BinaryIO | TextIO, where: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """``(1-based line number, line without its line ending)`` of an open stream (a file, gzip, stdin; bytes are
    decoded as UTF-8, text is taken as it is); a leading byte-order mark is removed; bad UTF-8 and truncated gzip
    data are a :class:`DataFormatError` naming ``where`` and the line."""
    lineno = 0
    try:
        for lineno, raw in enumerate(stream, 1):
            if isinstance(raw, bytes):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataFormatError(
                        f"{where}, line {lineno}: byte {raw[e.start : e.start + 1]!r} at byte offset "
                        f"{e.start} of the line is not valid UTF-8. The file must be UTF-8; "
                        "re-download it, or convert it (e.g. `iconv -f cp1252 -t utf-8`)."
                    ) from None
            else:
                line = raw
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]
            yield lineno, line.rstrip("\r\n")
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise gzip_error(Path(where), lineno + 1, e) from None


def gzip_error(path: Path, lineno: int, e: BaseException) -> DataFormatError:
    return DataFormatError(
        f"{path}, line {lineno}: the gzip data ends early or is corrupt ({e}). The file looks "
        "truncated or damaged (an interrupted download or copy?); re-download it."
    )


def json_lines(path: Path, lines: Iterable[tuple[int, str]], what: str) -> Iterator[tuple[int, Any]]:
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


def json_array(path: Path, text: str, first_lineno: int, what: str) -> Iterator[tuple[int, Any]]:
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
    rest = ws(text, pos + 1).end()
    if rest != n:
        closed = line_at(pos)
        raise DataFormatError(
            f"{path}, line {line_at(rest)}: the JSON array that starts on line {first_lineno} ends on line {closed} "
            f"(its closing ']'), and what follows ({text[rest : rest + 30]!r}) is not part of it. Give one JSON array "
            "of objects, or JSON Lines (one object per line, no brackets)"
        )
