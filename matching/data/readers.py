"""Readers for the sentence-pair corpora, one function per distributed file *format*.

Every reader takes the path of one split file (plain or gzipped; see :func:`open_text`) and yields
:class:`Pair` objects with the texts and the label exactly as the corpus spells them. Mapping labels to ids,
tokenising and building vocabularies happen elsewhere. The ranking readers (WikiQA, TrecQA, Ubuntu) normalise
relevance labels to "1"/"0" and set ``Pair.group`` to the question/context id; TrecQA's token format takes a
split *folder* (``a.toks``, ``b.toks``, ``sim.txt``, ``id.txt``).

Readers decode line by line from bytes rather than through a text stream, so that a bad byte, a bad JSON
line or a short row is reported with the line it is on. Examples without a usable label (SNLI/MultiNLI
``gold_label`` "-" or an empty label) are dropped and counted; each reader logs one INFO summary line when
it reaches the end of its file.
"""

from __future__ import annotations

import csv
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

from matching.data.corpus_files import (
    existing_corpus_file,
    json_array,
    json_lines,
    numbered_lines,
)
from matching.data.pairs import Pair
from matching.errors import DataFormatError, MissingFileError

logger = logging.getLogger(__name__)

__all__ = [
    "read_dnli",
    "read_scitail_tsv",
    "read_snli_jsonl",
    "read_trecqa_toks",
    "read_trecqa_xml",
    "read_ubuntu_csv",
    "read_ubuntu_tsv",
    "read_wikiqa_tsv",
]

# Labels that mark an example with no usable gold label, and how the summary line describes them.
_DROPPED_LABELS = {"-": 'label "-" (no annotator consensus)', "": "empty label"}


#: The field names of a pair's two texts in JSON objects (predict's input, `Matcher.predict`'s dicts), and of its
#: group (question) id.


# --------------------------------------------------------------------------------------------- opening


# ---------------------------------------------------------------------------------------------- helpers


class _Tally:
    """Counts kept and dropped examples for the one summary log line per file."""

    __slots__ = ("path", "kept", "dropped")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = 0
        self.dropped: Counter[str] = Counter()

    def counts(self) -> str:
        """What was read, for the summary line."""
        return f"{self.kept} pairs"

    def log(self) -> None:
        n_dropped = sum(self.dropped.values())
        if n_dropped:
            why = ", ".join(f"{n} with {reason}" for reason, n in self.dropped.most_common())
            logger.info("read %s from %s; dropped %d (%s)", self.counts(), self.path, n_dropped, why)
        else:
            logger.info("read %s from %s; dropped 0", self.counts(), self.path)


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
        yield Pair(a.strip(), b.strip(), label, line=lineno)
    tally.log()


# ---------------------------------------------------------------------------------------------- readers

_SNLI_WHAT = "SNLI/MultiNLI 1.0 JSON Lines (sentence1, sentence2, gold_label)"
_DNLI_WHAT = "Dialogue NLI JSON (sentence1, sentence2, label)"


def read_snli_jsonl(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read SNLI 1.0 or MultiNLI 1.0 JSON Lines: ``sentence1``, ``sentence2``, ``gold_label``.

    Lines whose ``gold_label`` is "-" (annotators did not agree) are dropped, as is conventional.
    """
    p = existing_corpus_file(path)
    return _pairs_from_records(
        p, json_lines(p, numbered_lines(p), _SNLI_WHAT), ("sentence1", "sentence2", "gold_label"), _SNLI_WHAT
    )


def read_scitail_tsv(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read SciTail 1.1 ``tsv_format``: no header; premise, hypothesis, label (entails/neutral)."""
    p = existing_corpus_file(path)
    return _scitail(p)


def _scitail(path: Path) -> Iterator[Pair]:
    tally = _Tally(path)
    for lineno, line in numbered_lines(path):
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
        yield Pair(a, b, label, line=lineno)
    tally.log()


def read_dnli(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read Dialogue NLI: ``sentence1``, ``sentence2``, ``label`` (positive/neutral/negative).

    The official ``.jsonl`` files are in fact one JSON array; converted copies are often true JSON Lines.
    Both are accepted: the file is an array when its first non-whitespace character is ``[``. An array
    is decoded whole (the largest split, train, is a few hundred MB of text at most).
    """
    p = existing_corpus_file(path)
    return _pairs_from_records(p, _dnli_records(p), ("sentence1", "sentence2", "label"), _DNLI_WHAT)


def _dnli_records(path: Path) -> Iterator[tuple[int, Any]]:
    lines = numbered_lines(path)
    for lineno, line in lines:
        if not line or line.isspace():
            continue
        if line.lstrip().startswith("["):
            rest = [line.lstrip()]
            rest.extend(ln for _, ln in lines)
            yield from json_array(path, "\n".join(rest), lineno, _DNLI_WHAT)
        else:
            yield from json_lines(path, _chain_one((lineno, line), lines), _DNLI_WHAT)
        return


def _chain_one(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


# -------------------------------------------------------------------------------------- ranking corpora
#
# Ranking readers yield one Pair per (question/context, candidate) with label "1" (a correct candidate) or
# "0", and ``group`` set to the question/context id, the same for every candidate of a question.

_BINARY = ("0", "1")


class _GroupTally(_Tally):
    """A :class:`_Tally` that also counts groups, positives and groups holding both labels.

    Candidates of one group must be consecutive. With ``unique=True`` (group ids read from the file) a group
    id that comes back after another group is an error: the file is shuffled or two splits were concatenated,
    and grouping by id would silently merge two questions.
    """

    __slots__ = ("groups", "positives", "both", "_group", "_labels", "_seen")

    def __init__(self, path: Path, *, unique: bool = False) -> None:
        super().__init__(path)
        self.groups = 0
        self.positives = 0
        self.both = 0
        self._group: str | None = None
        self._labels: set[str] = set()
        self._seen: set[str] | None = set() if unique else None

    def add(self, pair: Pair, where: str, what: str = "question id") -> None:
        """Count ``pair``; ``where`` ("file, line n") and ``what`` name the id in a uniqueness error."""
        if pair.group != self._group:
            self._close()
            if self._seen is not None:
                if pair.group in self._seen:
                    raise DataFormatError(
                        f"{where}: {what} {pair.group!r} appears again after other questions; the candidates "
                        f"of a question must be on consecutive lines and each {what} used once per split. The "
                        "file looks shuffled or concatenated from several files; use the split as distributed."
                    )
                self._seen.add(pair.group)  # type: ignore[arg-type]
            self.groups += 1
            self._group = pair.group
        self._labels.add(pair.label)
        self.kept += 1
        if pair.label == "1":
            self.positives += 1

    def _close(self) -> None:
        if len(self._labels) == 2:
            self.both += 1
        self._labels = set()

    def counts(self) -> str:
        return (
            f"{self.kept} pairs in {self.groups} groups ({self.positives} positive; {self.both} groups with both "
            "labels)"
        )

    def log(self) -> None:
        self._close()
        super().log()


def _binary_label(path: Path, lineno: int, value: str, what: str) -> str:
    """Normalise a 0/1 relevance label: "1", "1.0", " 0 " -> "1"/"0"; anything else is an error."""
    v = value.strip()
    if v in _BINARY:
        return v
    try:
        x = float(v)
    except ValueError:
        x = None
    if x in (0.0, 1.0):
        return str(int(x))  # type: ignore[arg-type]
    raise DataFormatError(
        f"{path}, line {lineno}: label {value!r} is not 0 or 1 (1.0/0.0 are accepted too). Expected {what}; "
        "fix or remove that line."
    )


def _tsv_turns_context(turns: Iterable[str]) -> str:
    return " ".join(f"{t} __eot__" for t in turns)


# WikiQA ------------------------------------------------------------------------------------------------

_WIKIQA_HEADER = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label")
_WIKIQA_WHAT = "WikiQA TSV (" + ", ".join(_WIKIQA_HEADER) + ")"


def read_wikiqa_tsv(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read a WikiQA split, ``WikiQA-{train,dev,test}.tsv`` (plain or gzipped; CRLF line endings).

    Tab-separated with the header ``QuestionID Question DocumentID DocumentTitle SentenceID Sentence Label``.
    Yields ``Pair(Question, Sentence, Label, QuestionID)``. Every question is kept, including those with no
    correct sentence or only correct ones; the usual "filtered" evaluation drops those later.
    """
    p = existing_corpus_file(path)
    return _wikiqa(p)


def _wikiqa(path: Path) -> Iterator[Pair]:
    tally = _GroupTally(path, unique=True)
    header_seen = False
    for lineno, line in numbered_lines(path):
        if not line or line.isspace():
            continue
        cols = line.split("\t")
        if not header_seen:
            if tuple(c.strip() for c in cols) != _WIKIQA_HEADER:
                raise DataFormatError(
                    f"{path}, line {lineno}: expected the WikiQA header {' '.join(_WIKIQA_HEADER)!r} "
                    f"(tab-separated), found {line[:100]!r}. Use WikiQA-train/dev/test.tsv from the "
                    "WikiQACorpus release (not the .ref files or WikiQASent.*)."
                )
            header_seen = True
            continue
        if len(cols) != len(_WIKIQA_HEADER):
            raise DataFormatError(
                f"{path}, line {lineno}: found {len(cols)} tab-separated columns, expected "
                f"{len(_WIKIQA_HEADER)} ({', '.join(_WIKIQA_HEADER)}). Check that line for a stray or missing tab."
            )
        qid, question, _doc, _title, _sid, sentence, label = cols
        pair = Pair(
            question.strip(), sentence.strip(), _binary_label(path, lineno, label, _WIKIQA_WHAT), qid.strip(), lineno
        )
        tally.add(pair, f"{path}, line {lineno}", "QuestionID")
        yield pair
    tally.log()


# TrecQA ------------------------------------------------------------------------------------------------

_TRECQA_FILES = ("a.toks", "b.toks", "sim.txt", "id.txt")


def read_trecqa_toks(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read a TrecQA split folder in the token format of Rao et al. (2016), e.g. ``trecqa/raw-dev``.

    The folder holds ``a.toks`` (question), ``b.toks`` (candidate), ``sim.txt`` (0/1) and ``id.txt``
    (question id), one line per pair, each plain or gzipped (``boundary.txt``/``numrels.txt`` are not
    needed). Yields ``Pair(question, candidate, "0"/"1", id)``. Raises :class:`FileNotFoundError` naming the
    folder and the expected files when one is missing.
    """
    folder = Path(path)
    return _trecqa_toks(folder, _trecqa_files(folder))


def _trecqa_files(folder: Path) -> list[Path]:
    expected = ", ".join(_TRECQA_FILES)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "not found"
        raise MissingFileError(
            f"TrecQA split folder {str(folder)!r} {what}: pass the folder (e.g. trecqa/raw-dev) holding "
            f"{expected} (each plain or .gz), one line per pair."
        )
    found, missing = [], []
    for name in _TRECQA_FILES:
        try:
            found.append(existing_corpus_file(folder / name))
        except FileNotFoundError:
            missing.append(name)
    if missing:
        raise MissingFileError(
            f"TrecQA split folder {str(folder)!r} lacks {', '.join(missing)} (nor .gz); it must hold {expected} "
            "(each plain or .gz), one line per pair."
        )
    return found


def _trecqa_toks(folder: Path, files: list[Path]) -> Iterator[Pair]:
    sim_path, id_path = files[2], files[3]
    sim_what = "sim.txt with one 0/1 label per line"
    tally = _GroupTally(folder, unique=True)
    streams = [numbered_lines(f) for f in files]
    for lineno, rows in enumerate(zip_longest(*streams), 1):
        if None in rows:
            counts = [lineno - 1 + (r is not None) + sum(1 for _ in s) for r, s in zip(rows, streams, strict=True)]
            listing = ", ".join(f"{f.name} {n}" for f, n in zip(files, counts, strict=True))
            raise DataFormatError(
                f"{folder}: the files have different numbers of lines ({listing}); they must have one line per "
                "pair. One of them looks truncated or comes from another split; re-extract this split folder."
            )
        (_, a), (_, b), (_, sim), (_, qid) = rows
        qid = qid.strip()
        if not qid:
            raise DataFormatError(
                f"{id_path}, line {lineno}: empty question id. id.txt must give each pair's question id; fix "
                "that line or re-extract this split folder."
            )
        pair = Pair(a.strip(), b.strip(), _binary_label(sim_path, lineno, sim, sim_what), qid, lineno)
        tally.add(pair, f"{id_path}, line {lineno}")
        yield pair
    tally.log()


_XML_BLOCKS = {"<question>": "</question>", "<positive>": "</positive>", "<negative>": "</negative>"}
_XML_QAPAIRS = re.compile(r"""<QApairs\s+id\s*=\s*(['"])(.*?)\1\s*>""")
_XML_WHAT = "Jacana pseudo-XML (<QApairs id=...> with <question>, <positive>, <negative> blocks)"


def read_trecqa_xml(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read TrecQA in the Jacana pseudo-XML of Yao et al. (2013): ``train.xml``, ``dev.xml``, ``test.xml``.

    Each ``<QApairs id='1.4'>`` element holds a ``<question>`` block then ``<positive>``/``<negative>``
    blocks. The first line after each opening tag is the tab-separated tokens, joined here with single
    spaces; the following lines (POS tags, dependency labels and heads, NER, answer spans) are ignored.
    HTML characters are not escaped in these files, so they are parsed line by line, not as XML. Yields
    ``Pair(question, candidate, "1"/"0", QApairs id)``; a question without candidates is counted as dropped.
    """
    p = existing_corpus_file(path)
    return _trecqa_xml(p)


def _trecqa_xml(path: Path) -> Iterator[Pair]:
    tally = _GroupTally(path, unique=True)
    lines = numbered_lines(path)
    group: str | None = None  # id of the open <QApairs>
    group_line = 0
    question: str | None = None
    n_candidates = 0
    for lineno, line in lines:
        tag = line.strip()
        if not tag:
            continue
        m = _XML_QAPAIRS.fullmatch(tag)
        if m:
            if group is not None:
                raise DataFormatError(
                    f"{path}, line {lineno}: <QApairs> opens inside <QApairs id='{group}'> (line {group_line}), "
                    f"which was never closed with </QApairs>. Expected {_XML_WHAT}; fix the file there."
                )
            group, group_line, question, n_candidates = m.group(2).strip(), lineno, None, 0
            if not group:
                raise DataFormatError(f"{path}, line {lineno}: <QApairs> with an empty id. Expected {_XML_WHAT}.")
        elif tag == "</QApairs>":
            if group is None:
                raise DataFormatError(
                    f"{path}, line {lineno}: </QApairs> without an opening <QApairs id=...>. Expected {_XML_WHAT}."
                )
            if question is None:
                raise DataFormatError(
                    f"{path}, line {group_line}: <QApairs id='{group}'> has no <question> block. Expected {_XML_WHAT}."
                )
            if not n_candidates:
                tally.dropped["a question but no candidates"] += 1
            group = None
        elif tag in _XML_BLOCKS:
            if group is None:
                raise DataFormatError(
                    f"{path}, line {lineno}: {tag} outside any <QApairs id=...> element. Expected {_XML_WHAT}."
                )
            if tag == "<question>" and question is not None:
                raise DataFormatError(
                    f"{path}, line {lineno}: a second <question> in <QApairs id='{group}'> (line {group_line}). "
                    f"Expected {_XML_WHAT}."
                )
            if tag != "<question>" and question is None:
                raise DataFormatError(
                    f"{path}, line {lineno}: {tag} before the <question> of <QApairs id='{group}'> "
                    f"(line {group_line}); the question must come first. Expected {_XML_WHAT}."
                )
            text = _xml_block(path, lineno, tag, lines)
            if tag == "<question>":
                question = text
            else:
                pair = Pair(question, text, "1" if tag == "<positive>" else "0", group, lineno)  # type: ignore[arg-type]
                tally.add(pair, f"{path}, line {group_line}", "QApairs id")
                n_candidates += 1
                yield pair
        else:
            raise DataFormatError(
                f"{path}, line {lineno}: unexpected line outside a <question>/<positive>/<negative> block: "
                f"{line[:60]!r}. Expected {_XML_WHAT}."
            )
    if group is not None:
        raise DataFormatError(
            f"{path}, line {group_line}: the file ends inside <QApairs id='{group}'> (no </QApairs>); it looks "
            "truncated; re-download it."
        )
    tally.log()


def _xml_block(path: Path, lineno: int, tag: str, lines: Iterator[tuple[int, str]]) -> str:
    """Consume one block after its opening ``tag`` (on ``lineno``); return its tokens joined by spaces."""
    close = _XML_BLOCKS[tag]
    first = next(lines, None)
    tokens = [] if first is None or first[1].strip() == close else first[1].split("\t")
    text = " ".join(t.strip() for t in tokens if t.strip())
    if not text:
        raise DataFormatError(
            f"{path}, line {lineno}: the {tag} block has no token line (the first line after the tag must hold "
            f"the tab-separated tokens). Expected {_XML_WHAT}."
        )
    for n, line in lines:
        s = line.strip()
        if s == close:
            return text
        if s in _XML_BLOCKS or s == "</QApairs>" or s.startswith("<QApairs"):
            raise DataFormatError(
                f"{path}, line {n}: {s} inside the {tag} block opened on line {lineno}, which was not closed "
                f"with {close}. Expected {_XML_WHAT}."
            )
    raise DataFormatError(
        f"{path}, line {lineno}: the file ends inside this {tag} block (no {close}); it looks truncated; "
        "re-download it."
    )


# Ubuntu Dialogue Corpus --------------------------------------------------------------------------------

_UBUNTU_TRAIN_HEADER = ("Context", "Utterance", "Label")
_UBUNTU_EVAL_HEADER = ("Context", "Ground Truth Utterance", *(f"Distractor_{i}" for i in range(9)))


def read_ubuntu_csv(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read the Ubuntu Dialogue Corpus v1/v2 CSVs (``train.csv``, ``valid.csv``, ``test.csv``).

    The layout is taken from the header. ``Context,Utterance,Label`` (train): one pair per row, label
    1.0/0.0 (or 1/0) -> "1"/"0", each row its own group. ``Context,Ground Truth Utterance,Distractor_0,...,
    Distractor_8`` (valid/test): ten pairs per row, the ground truth ("1") then the nine distractors ("0").
    The group is the 1-based data row number (header excluded). Contexts keep their ``__eou__``/``__eot__``
    markers verbatim; quoted fields may hold commas, quotes and newlines.
    """
    p = existing_corpus_file(path)
    return _ubuntu_csv(p)


def _ubuntu_csv(path: Path) -> Iterator[Pair]:
    tally = _GroupTally(path)
    reader = csv.reader(line + "\n" for _, line in numbered_lines(path))
    header: tuple[str, ...] | None = None
    row_number = 0
    end = 0  # last physical line consumed by the csv reader
    while True:
        start = end + 1
        try:
            row = next(reader, None)
        except csv.Error as e:
            raise DataFormatError(
                f"{path}, line {reader.line_num}: bad CSV ({e}) in the record starting on line {start}. Fix the "
                "quoting there or re-download the file."
            ) from None
        if row is None:
            break
        end = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if header is None:
            header = tuple(c.strip() for c in row)
            if header not in (_UBUNTU_TRAIN_HEADER, _UBUNTU_EVAL_HEADER):
                raise DataFormatError(
                    f"{path}, line {start}: unknown header {','.join(row)[:120]!r}. Expected the Ubuntu Dialogue "
                    f"Corpus v1/v2 CSV header {','.join(_UBUNTU_TRAIN_HEADER)!r} (train.csv) or "
                    f"{','.join(_UBUNTU_EVAL_HEADER)!r} (valid.csv/test.csv)."
                )
            continue
        if len(row) != len(header):
            raise DataFormatError(
                f"{path}, line {start}: found {len(row)} CSV fields, expected {len(header)} "
                f"({','.join(header)}). Check the quoting of that record (a stray or unbalanced '\"')."
            )
        row_number += 1
        group = str(row_number)
        context = row[0].strip()
        where = f"{path}, line {start}"
        if header == _UBUNTU_TRAIN_HEADER:
            what = "a train.csv Label of 1.0/0.0"
            pairs = [Pair(context, row[1].strip(), _binary_label(path, start, row[2], what), group, start)]
        else:
            pairs = [Pair(context, row[1].strip(), "1", group, start)]
            pairs.extend(Pair(context, d.strip(), "0", group, start) for d in row[2:])
        for pair in pairs:
            tally.add(pair, where)
            yield pair
    tally.log()


def read_ubuntu_tsv(path: str | os.PathLike[str]) -> Iterator[Pair]:
    """Read the tab-separated Ubuntu release (``train.txt``/``valid.txt``/``test.txt``, as in Wu et al. 2017).

    Each line is ``label \\t turn1 \\t ... \\t turnN \\t response``. The context is the turns joined as
    ``"turn1 __eot__ turn2 __eot__ ... turnN __eot__"``, matching the turn markers of the CSV release.
    Consecutive lines with the same context form one group (in valid/test, ten lines per context with the
    true response first), numbered 1, 2, ... as strings.
    """
    p = existing_corpus_file(path)
    return _ubuntu_tsv(p)


def _ubuntu_tsv(path: Path) -> Iterator[Pair]:
    tally = _GroupTally(path)
    what = "label \\t turn1 \\t ... \\t turnN \\t response, with label 0 or 1"
    previous: str | None = None
    group = 0
    for lineno, line in numbered_lines(path):
        if not line or line.isspace():
            continue
        cols = line.split("\t")
        if len(cols) < 3:
            raise DataFormatError(
                f"{path}, line {lineno}: found {len(cols)} tab-separated fields, expected at least 3 (label, one "
                "or more context turns, response). Check that line for missing tabs."
            )
        label = _binary_label(path, lineno, cols[0], what)
        context = _tsv_turns_context(t.strip() for t in cols[1:-1] if t.strip())
        if context != previous:
            group += 1
            previous = context
        pair = Pair(context, cols[-1].strip(), label, str(group), lineno)
        tally.add(pair, f"{path}, line {lineno}")
        yield pair
    tally.log()
