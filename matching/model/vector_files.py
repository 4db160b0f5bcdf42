"""Word vectors files for a vocabulary: GloVe / word2vec text (plain or gzip), word2vec binary, gensim .kv.

Only the rows of the requested words are ever kept in memory: text files are streamed line by line and only the
lines of vocabulary words have their floats parsed, so a 2M-word GloVe file loads with a small footprint. The
embedding source that uses them is `matching.model.embeddings.PretrainedVectors`.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from tqdm import tqdm

from matching.data.cache import content_sha256
from matching.data.downloads import OfflineError, download_from_hub
from matching.errors import ConfigError, MissingFileError, UserError
from matching.extras import require
from matching.files import GZIP_MAGIC, ZIP_MAGIC, existing, open_binary, write_npz_atomic, zip_member

log = logging.getLogger(__name__)

FORMATS = ("auto", "glove", "word2vec", "word2vec_bin", "kv")

_PROGRESS_MIN_BYTES = 50_000_000  # smaller files load in a moment: no progress bar
_PROGRESS_EVERY_LINES = 0xFFF  # update the bar every 4096 lines (a mask, tested with &)
_BATCH_ROWS = 4096  # vocabulary lines parsed together
_PANDAS_MIN_ROWS = 256  # below this, pandas' C parser does not pay for itself
_BOM = b"\xef\xbb\xbf"


class VectorsError(UserError, ValueError):
    """Bad/unsupported vectors file; message says which file, which line, what to do."""


def missing_vectors_message(path: str | os.PathLike, hub: dict | None = None, why: str = "", download: str = "") -> str:
    """One paragraph: the file that was expected, what was tried, how to get the file the config asks for (its
    `download` text: each way there is) and what else works."""
    tried = (
        f" Fetching {hub['filename']} from the Hugging Face hub ({hub['repo_id']}) failed too ({why}); with internet "
        f"the run downloads it by itself into {hub['folder']} (resumable; GloVe 840B is 2 GB)."
        if hub
        else ""
    )
    how = " ".join(download.split()) or "Check embeddings.path."
    return (
        f"No word vectors at {path}.{tried} {how} Any GloVe-text, word2vec (text or binary) or gensim .kv file works "
        "too: embeddings.path=/path/to/vectors.txt embeddings.dim=300. To train randomly initialised embeddings "
        "instead (no pretrained vectors), choose it explicitly: embeddings=random"
    )


def locate_vectors(path: str | os.PathLike, hub: dict | None = None, download: str = "") -> Path:
    """The vectors file: `path` (or its .gz twin, or a .zip beside it), else the copy fetched from the hub into
    `hub["folder"]` (downloaded now if it is not there yet). `hub`: {repo_id, filename, folder}. `download`: how to
    get the file by hand, for the message when it is missing."""
    path = Path(path)
    candidates = [path, path.with_name(path.stem + ".zip")] if path.suffix == ".txt" else [path]
    for candidate in candidates:
        if (found := existing(candidate)) is not None:
            if found.is_dir():
                raise VectorsError(f"embeddings.path={found} is a folder; point it at the vectors file inside it")
            return found
    if not hub:
        raise MissingFileError(missing_vectors_message(path, download=download))
    fetched = Path(hub["folder"]) / hub["filename"]
    if fetched.is_file():
        return fetched
    try:
        return download_from_hub(hub["repo_id"], hub["filename"], Path(hub["folder"]))
    except OfflineError as err:
        raise MissingFileError(missing_vectors_message(path, hub, str(err), download)) from None
    except Exception as err:  # hub errors, disk full, a renamed repository: the same advice
        raise MissingFileError(missing_vectors_message(path, hub, f"{type(err).__name__}: {err}", download)) from None


def load_vectors(
    path: str | os.PathLike,
    words: Sequence[str],
    *,
    format: str = "auto",
    dim: int | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (matrix float32 (len(words), dim), found bool (len(words),)).

    Row i is the vector of words[i] (zeros where not found). Words are looked up exactly as given.
    format: "auto" (by extension: .kv -> gensim KeyedVectors; .bin/.bin.gz -> word2vec binary; otherwise text,
    with a first line of exactly two integers meaning word2vec text, else GloVe text), "glove", "word2vec",
    "word2vec_bin", "kv". dim: expected dimension (a mismatch raises VectorsError). cache_dir: when given, the
    result is cached as .npz keyed by (the file's sha256, format, hash of the word list): a copy of the file finds it.
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown vectors format {format!r}; expected one of {', '.join(FORMATS)}")
    path = _existing(Path(path))
    words = list(words)

    cache_file = vectors_cache_file(Path(cache_dir), path, format, words) if cache_dir is not None else None
    if cache_file is not None and (cached := _read_cache(cache_file, len(words))) is not None:
        matrix, found = cached
        log.info("word vectors for %d words loaded from cache %s (source %s)", len(words), cache_file, path)
        _check_dim(path, matrix.shape[1], dim)
        return matrix, found

    start = time.perf_counter()
    fmt = _resolve_format(path) if format == "auto" else format
    if fmt in ("word2vec_bin", "kv"):
        matrix, found = _read_gensim(path, words, fmt, dim)
    else:
        header = {"glove": False, "word2vec": True}.get(fmt)  # None: detect
        matrix, found = _read_text(path, words, header=header, dim=dim)

    n = int(found.sum())
    log.info(
        "%s: found %d of %d words (%.1f%%), dim %d, %.1f s",
        path,
        n,
        len(words),
        100.0 * n / max(len(words), 1),
        matrix.shape[1],
        time.perf_counter() - start,
    )
    if cache_file is not None:
        write_vectors_cache(cache_file, matrix, found)
    return matrix, found


def first_words(path: str | os.PathLike, count: int, format: str = "auto") -> list[str]:
    """The first `count` words of a vectors file, in file order (the most frequent first, by convention)."""
    path = _existing(Path(path))
    if count <= 0:
        return []
    fmt = _resolve_format(path) if format == "auto" else format
    if fmt in ("word2vec_bin", "kv"):
        KeyedVectors = require("gensim.models", "formats", "reading word2vec binary and .kv vectors").KeyedVectors

        if fmt == "kv":
            kv = KeyedVectors.load(str(path), mmap="r")
        else:
            kv = KeyedVectors.load_word2vec_format(str(path), binary=True, limit=count, unicode_errors="replace")
        return list(kv.index_to_key[:count])
    words: list[str] = []
    with open_binary(path) as stream:
        for number, line in enumerate(stream, 1):
            fields = line.removeprefix(_BOM).split(None, 1) if number == 1 else line.split(None, 1)
            if number == 1 and fmt != "glove" and len(line.split()) == 2 and line.split()[0].isdigit():
                continue  # word2vec text header
            if len(fields) == 2:
                words.append(_utf8_key(fields[0]).decode("utf-8"))
            if len(words) >= count:
                break
    return words


def _existing(path: Path) -> Path:
    found = existing(path)
    if found is None:
        raise MissingFileError(missing_vectors_message(path))
    return found


def _resolve_format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".kv"):
        return "kv"
    if name.endswith((".bin", ".bin.gz")):
        return "word2vec_bin"
    return "text"


def _check_dim(path: Path, found: int, expected: int | None, hint: str = "") -> None:
    if expected is not None and found != expected:
        raise VectorsError(
            f"{path}: the vectors have dimension {found}, but dimension {expected} was expected.{hint} "
            f"Set embeddings.dim={found} or point embeddings.path at {expected}-dimensional vectors."
        )


# --- text formats ---------------------------------------------------------------------------------------------


def _read_text(path: Path, words: list[str], *, header: bool | None, dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    index: dict[bytes, int] = {}
    for i, w in enumerate(words):
        index.setdefault(w.encode("utf-8"), i)
    # Vocabulary words with spaces can only be matched by looking at every line's field count (slow path).
    spaced = any(b" " in key for key in index)

    size = path.stat().st_size
    reader = _TextReader(path, index, spaced, dim)
    with ExitStack() as stack:
        raw = stack.enter_context(open(path, "rb", buffering=1 << 20))
        stream = raw
        magic = raw.peek(4)[:4]
        if magic[:2] == GZIP_MAGIC:  # progress follows `raw`: the compressed position
            stream = stack.enter_context(io.BufferedReader(gzip.GzipFile(fileobj=raw), 1 << 20))
        elif magic == ZIP_MAGIC:  # GloVe's own .zip, read without unpacking
            stream = stack.enter_context(io.BufferedReader(zip_member(raw, path), 1 << 20))
        bar = stack.enter_context(
            tqdm(
                total=size,
                unit="B",
                unit_scale=True,
                desc=f"reading vectors {path.name}",
                disable=size < _PROGRESS_MIN_BYTES,
            )
        )
        reader.read(stream, raw, header, bar, len(words))

    matrix, found = reader.matrix, reader.found
    if len(index) != len(words):  # repeated words in the list share the first one's row
        for i, w in enumerate(words):
            j = index[w.encode("utf-8")]
            if j != i:
                matrix[i], found[i] = matrix[j], found[j]
    return matrix, found


class _TextReader:
    """One pass over a GloVe / word2vec text file, filling the rows of vocabulary words."""

    def __init__(self, path: Path, index: dict[bytes, int], spaced: bool, dim: int | None):
        self.path = path
        self.index = index
        self.spaced = spaced
        self.dim = dim
        self.remaining = dict(index)  # words not found yet; the first occurrence of a word wins
        self.matrix = np.zeros((0, 0), np.float32)
        self.found = np.zeros(0, bool)
        self.batch: list[tuple[int, int, bytes, bytes]] = []  # (row, line number, word, values)
        self.recoded = 0  # words not in UTF-8 (Windows-1252 / latin-1)
        self.skipped = 0  # garbled lines of words outside the vocabulary
        self.duplicates: list[tuple[bytes, int]] = []  # (vocabulary word, line) of a repeated word: first one wins
        self.irregular: list[int] = []  # lines of vocabulary words separated by tabs or several spaces (read fine)

    def read(self, stream, raw, header: bool | None, bar: tqdm, n_rows: int) -> None:
        lineno, first = self._first_vector_line(stream, header)
        start = lineno + 1
        self.matrix = np.zeros((n_rows, self.dim), np.float32)
        self.found = np.zeros(n_rows, bool)
        if first is not None:  # the dimension-defining line is always checked, in the vocabulary or not
            word, values = self._split(first, lineno, always=True)
            vector = self._parse_line(values.split(), lineno, word)
            if (row := self._take(word)) is not None:
                self._check_finite(vector[None], [(row, lineno, word, values)])
                self.matrix[row], self.found[row] = vector, True

        remaining, get, batch, spaced, index = self.remaining, self.remaining.get, self.batch, self.spaced, self.index
        dim_spaces = self.dim - 1
        for lineno, line in enumerate(stream, start):
            if not lineno & _PROGRESS_EVERY_LINES:
                bar.update(raw.tell() - bar.n)
                if not remaining:
                    break
            sp = line.find(b" ")
            word = line[:sp]
            row = get(word)
            if row is not None and sp > 0 and not spaced:
                values = line[sp + 1 :].rstrip()
                if values.count(b" ") == dim_spaces and b"\t" not in values:  # the common case: a well-formed line
                    del remaining[word]
                    batch.append((row, lineno, word, values))
                    if len(batch) >= _BATCH_ROWS:
                        self._flush()
                    continue
            elif sp > 0:
                if row is None and word in index:  # a vocabulary word already read: a repeated line
                    self.duplicates.append((word, lineno))
                    continue
                vocabulary_word = False
                if not word.isascii() and (key := _utf8_key(word)) is not word:
                    self.recoded += 1  # e.g. Windows-1252: looked up by its UTF-8 form
                    vocabulary_word = key in remaining
                elif _OTHER_WHITESPACE.search(word):  # e.g. "cat\t0.1 ...": the word ends before the tab
                    vocabulary_word = word.split(None, 1)[0] in remaining
                if not (vocabulary_word or spaced):
                    continue
            # rare cases: extra fields (a word with spaces), odd spacing, no space at all, a re-encoded word
            word, values = self._split(line, lineno)
            if word is not None and (row := self._take(word)) is not None:
                if line[:1].isspace() or b"\t" in line or b"  " in line.rstrip():  # not one space between fields
                    self.irregular.append(lineno)
                batch.append((row, lineno, word, values))
        self._flush()
        bar.update(raw.tell() - bar.n)

        if self.recoded:
            log.info("%s: %d words were not UTF-8; read them as Windows-1252/latin-1", self.path, self.recoded)
        if self.skipped:
            log.warning("%s: skipped %d garbled line(s) (none of them a vocabulary word)", self.path, self.skipped)
        if self.irregular:
            log.warning(
                "%s: %d vocabulary line(s) separate their fields with tabs or several spaces instead of one space "
                "(lines %s); they were read all the same", self.path, len(self.irregular), _some(self.irregular),
            )  # fmt: skip
        if self.duplicates:
            shown = ", ".join(f"{_show(w)} at line {n}" for w, n in self.duplicates[:5])
            log.warning(
                "%s: %d line(s) repeat a vocabulary word already read (%s%s); the first vector of each word is used",
                self.path, len(self.duplicates), shown, ", ..." if len(self.duplicates) > 5 else "",
            )  # fmt: skip
        if not remaining:
            log.debug("%s: all words found by line %d; stopped reading", self.path, lineno)

    def _first_vector_line(self, stream, header: bool | None) -> tuple[int, bytes | None]:
        """Read the optional word2vec header and the first vector line; fix self.dim."""
        first = stream.readline().removeprefix(_BOM)
        if not first.strip():
            raise VectorsError(f"{self.path}: line 1 is empty; this is not a word-vector file.")
        fields = first.split()
        is_header = len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit()
        if header is True and not is_header:
            raise VectorsError(
                f"{self.path}: line 1 is not a word2vec header ('<count> <dim>'): {first[:80]!r}. "
                "If this is a GloVe file (no header), use format='glove' or 'auto'."
            )
        if header is not False and is_header:
            _check_dim(self.path, int(fields[1]), self.dim, " (line 1, the word2vec header)")
            self.dim = int(fields[1])
            if self.dim < 1:
                raise VectorsError(f"{self.path}: line 1: the word2vec header gives dimension 0.")
            line = stream.readline()
            return 2, (line if line.strip() else None)
        hint = " The first line looks like a word2vec header: use format='word2vec' or 'auto'." if is_header else ""
        found_dim = len(fields) - 1
        if found_dim < 1:
            raise VectorsError(f"{self.path}: line 1 has no numbers after the word {fields[0][:80]!r}.{hint}")
        _check_dim(self.path, found_dim, self.dim, f" (line 1 has {found_dim} numbers after the word){hint}")
        self.dim = found_dim
        return 1, first

    def _split(self, line: bytes, lineno: int, always: bool = False) -> tuple[bytes | None, bytes]:
        """Split a line into (word, values) where the word is everything but the last `dim` fields.

        A malformed line raises VectorsError when its word is in the vocabulary (or `always`); otherwise it
        is counted and (None, b"") is returned.
        """
        parts = line.rsplit(None, self.dim)
        if len(parts) == self.dim + 1:
            head = parts[0].split(None, 1)
            if len(head) == 2 and _utf8_key(head[0]) in self.remaining and _is_number(head[1].split(None, 1)[0]):
                raise VectorsError(
                    f"{self.path}: line {lineno}: expected a word and {self.dim} numbers, found "
                    f"{len(line.split()) - 1} numbers after the word {_show(_utf8_key(head[0]))}. The file is "
                    "damaged: download it again, or check embeddings.dim and embeddings.format."
                )
            return _utf8_key(parts[0]), b" ".join(parts[1:])
        if not line.strip():
            return None, b""
        word = _utf8_key(line.split(None, 1)[0])
        if always or word in self.remaining:
            raise VectorsError(
                f"{self.path}: line {lineno}: expected a word and {self.dim} numbers, found "
                f"{len(line.split()) - 1} numbers after the word {_show(word)}. The file is truncated or "
                "damaged: download it again, or check embeddings.dim and embeddings.format."
            )
        self.skipped += 1
        return None, b""

    def _take(self, word: bytes) -> int | None:
        return self.remaining.pop(word, None)

    def _flush(self) -> None:
        if not self.batch:
            return
        rows = [row for row, *_ in self.batch]
        block = self._parse_batch()
        self._check_finite(block, self.batch)
        self.matrix[rows] = block
        self.found[rows] = True
        self.batch.clear()

    def _check_finite(self, block: np.ndarray, entries: list[tuple[int, int, bytes, bytes]]) -> None:
        """NaN or inf in a vocabulary word's vector is an error naming the line (it would surface later as a NaN
        training loss that seems to blame the learning rate)."""
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            _, lineno, word, _ = entries[int(np.argmin(finite))]
            raise VectorsError(
                f"{self.path}: line {lineno}: the vector of the word {_show(word)} has a value that is not a finite "
                "number (nan or inf). The file is damaged: download it again, or remove that line."
            )

    def _parse_batch(self) -> np.ndarray:
        # Each batch entry holds exactly `dim` fields joined by single spaces, so a large batch can go
        # through pandas' C parser in one call (about 3x faster than numpy per line). Anything it does
        # not accept is parsed line by line below, which finds and reports the bad line.
        if len(self.batch) >= _PANDAS_MIN_ROWS:
            try:
                import pandas as pd

                block = pd.read_csv(
                    io.BytesIO(b"\n".join(values for *_, values in self.batch)),
                    sep=" ",
                    header=None,
                    dtype=np.float32,
                    na_filter=False,
                    quoting=csv.QUOTE_NONE,
                    engine="c",
                ).to_numpy(np.float32)
                if block.shape == (len(self.batch), self.dim):
                    return block
            except Exception:  # any failure: the exact parser below finds the bad line
                pass
        out = np.empty((len(self.batch), self.dim), np.float32)
        for k, (_, lineno, word, values) in enumerate(self.batch):
            out[k] = self._parse_line(values.split(), lineno, word)
        return out

    def _parse_line(self, fields: list[bytes], lineno: int, word: bytes) -> np.ndarray:
        if len(fields) != self.dim:
            raise VectorsError(
                f"{self.path}: line {lineno}: expected {self.dim} numbers after the word {_show(word)}, "
                f"found {len(fields)}. The file is truncated or damaged: download it again."
            )
        try:
            return np.array(fields, dtype=np.float32)
        except ValueError:
            pass
        for k, field in enumerate(fields, 1):
            try:
                float(field)
            except ValueError:
                raise VectorsError(
                    f"{self.path}: line {lineno}: value {k} of the word {_show(word)} is not a number: "
                    f"{field[:40]!r}. The file is damaged or not a word-vector text file: download it again "
                    "or check embeddings.format."
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover


_OTHER_WHITESPACE = re.compile(rb"[\t\x0b\x0c\r]")


def _is_number(field: bytes) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _some(lines: list[int]) -> str:
    return ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")


def _utf8_key(word: bytes) -> bytes:
    """The vocabulary key of a word: its UTF-8 bytes; a word in Windows-1252 (or latin-1) is re-encoded."""
    if word.isascii():
        return word
    try:
        word.decode("utf-8")
        return word
    except UnicodeDecodeError:
        pass
    try:
        text = word.decode("cp1252")
    except UnicodeDecodeError:
        text = word.decode("latin-1")
    return text.encode("utf-8")


def _show(word: bytes) -> str:
    return repr(word.decode("utf-8", "replace")[:80])


# --- gensim formats -------------------------------------------------------------------------------------------


def _read_gensim(path: Path, words: list[str], fmt: str, dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    KeyedVectors = require("gensim.models", "formats", "reading word2vec binary and .kv vectors").KeyedVectors

    try:
        if fmt == "kv":
            kv = KeyedVectors.load(str(path), mmap="r")
        else:
            kv = KeyedVectors.load_word2vec_format(str(path), binary=True, unicode_errors="replace")
    except Exception as e:  # gensim raises many kinds: pickle, EOF, value, unicode errors
        what = "a gensim KeyedVectors (.kv) file" if fmt == "kv" else "a word2vec binary file"
        raise VectorsError(
            f"{path}: could not read it as {what}: {type(e).__name__}: {e}. Check embeddings.format "
            "(glove, word2vec, word2vec_bin, kv) or download the file again."
        ) from e
    if not isinstance(kv, KeyedVectors):
        raise VectorsError(f"{path}: holds a {type(kv).__name__}, not gensim KeyedVectors; save model.wv instead.")
    _check_dim(path, kv.vector_size, dim)

    key_to_index = kv.key_to_index
    rows, indices = [], []
    for i, w in enumerate(words):
        j = key_to_index.get(w)
        if j is not None:
            rows.append(i)
            indices.append(j)
    matrix = np.zeros((len(words), kv.vector_size), np.float32)
    found = np.zeros(len(words), bool)
    if rows:
        order = np.argsort(indices)  # read a memory-mapped file in order
        matrix[np.asarray(rows)[order]] = kv.vectors[np.asarray(indices)[order]]
        found[rows] = True
        finite = np.isfinite(matrix[rows]).all(axis=1)
        if not finite.all():
            word = words[rows[int(np.argmin(finite))]]
            raise VectorsError(
                f"{path}: the vector of the word {word!r} has a value that is not a finite number (nan or inf). "
                "The file is damaged: download it again, or rebuild it without that word."
            )
    return matrix, found


# --- cache ----------------------------------------------------------------------------------------------------


def vectors_cache_file(cache_dir: Path, path: Path, format: str, words: list[str]) -> Path:
    """Where the rows of `words` read from `path` are cached: by the file's content (its sha256, remembered under
    `cache_dir/sha256/`), not its path or modification time."""
    key = hashlib.sha256(json.dumps([content_sha256(path, cache_dir), format]).encode())
    key.update(hashlib.sha256("\0".join(words).encode("utf-8", "surrogatepass")).digest())
    key.update(str(len(words)).encode())
    return cache_dir / f"{path.name}.{key.hexdigest()[:24]}.npz"


def _read_cache(cache_file: Path, n_words: int) -> tuple[np.ndarray, np.ndarray] | None:
    if not cache_file.exists():
        return None
    try:
        with np.load(cache_file) as z:
            matrix, found = z["matrix"], z["found"]
    except Exception as e:  # a damaged cache is rebuilt, never fatal
        log.warning("ignoring unreadable vectors cache %s (%s)", cache_file, e)
        return None
    if matrix.ndim != 2 or matrix.shape[0] != n_words or found.shape != (n_words,):
        log.warning("ignoring vectors cache %s: unexpected shape %s", cache_file, matrix.shape)
        return None
    return matrix.astype(np.float32, copy=False), found.astype(bool, copy=False)


def write_vectors_cache(cache_file: Path, matrix: np.ndarray, found: np.ndarray) -> None:
    try:
        write_npz_atomic(cache_file, matrix=matrix, found=found)
    except OSError as e:
        log.warning("could not write vectors cache %s (%s)", cache_file, e)
        return
    log.info("cached word vectors in %s", cache_file)
