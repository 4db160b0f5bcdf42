"""`matching-predict ckpt=<path> input=<file or -> [output=<file or ->] [input_format=F]` (conf/predict.yaml).

Predicts on new pairs with a trained model, offline, from its run directory alone. Input (a file, plain, .gz
or .zip, or stdin; UTF-8, a byte-order mark is fine) is TSV (two text columns and an optional group id; a
header line such as `a<TAB>b[<TAB>group]` or `question<TAB>answer` is recognised and skipped), JSON Lines
(`{"a": ..., "b": ..., "group": ...}`; `sentence1`/`sentence2`, `premise`/`hypothesis`, `question`/`answer`
and `context`/`response` also work) or one JSON array of such objects. `input_format=auto` (the default) goes
by the file's suffix (.tsv, .jsonl), else by the first non-blank line (`{`: JSON Lines, `[`: an array, else
TSV); `input_format=tsv|jsonl|json` says it outright. Output is JSON Lines:

- classification: one line per pair, `{"line", "a", "b", "label", "probs": {label: p}}`;
- ranking: one line per group (question), `{"group", "a", "ranking": [{"line", "b", "score", "p_match"}, ...]}`
  with the candidates by decreasing score, the logit margin logit[match] − logit[no match] (it orders as
  P(match) does, but does not saturate: P(match) rounds to 1.0 for every confident candidate). Without a group
  id, pairs with the same first text form a group. A group's candidates may be anywhere in the input: the groups
  are written in the order of their first line once the input ends (classification is written as it is read).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import IO

from omegaconf import DictConfig

from matching.cli import command
from matching.data.pairs import FIELD_ALIASES, GROUP_ALIASES, Pair, pair_from_mapping
from matching.errors import DataFormatError
from matching.files import existing, open_binary
from matching.matcher import Matcher, ranking
from matching.runs import RunError, load_trained

log = logging.getLogger(__name__)

#: Input formats: auto (by suffix, else by the first non-blank line: `{` JSON Lines, `[` a JSON array, else TSV).
INPUT_FORMATS = ("auto", "tsv", "jsonl", "json")


def read_input(stream: IO, source: str, fmt: str = "auto") -> Iterator[Pair]:
    """Pairs from TSV, JSON Lines or a JSON array, streamed from a text or binary stream; a header line, a
    byte-order mark and blank lines are skipped; malformed lines, bytes that are not UTF-8 and empty texts are
    errors naming the line."""
    if fmt not in INPUT_FORMATS:
        raise DataFormatError(f"input_format must be one of {INPUT_FORMATS}, got {fmt!r}")
    for pair in _parse_input(stream, source, fmt):
        if not pair.a.strip() or not pair.b.strip():
            side = "first" if not pair.a.strip() else "second"
            raise DataFormatError(f"{source}, line {pair.line}: the {side} text is empty; give both texts of the pair")
        yield pair


def _decoded_lines(stream: IO, source: str) -> Iterator[tuple[int, str]]:
    """(line number, text without its line ending); bytes are decoded as UTF-8, a leading BOM is dropped."""
    for number, raw in enumerate(stream, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataFormatError(
                    f"{source}, line {number}: byte {raw[err.start : err.start + 1]!r} at byte offset {err.start} of "
                    "the line is not valid UTF-8; save the input as UTF-8 (e.g. iconv -f cp1252 -t utf-8)"
                ) from None
        yield number, (raw.removeprefix("\ufeff") if number == 1 else raw).rstrip("\r\n")


def _is_header(cols: list[str]) -> bool:
    names = [c.strip().lower() for c in cols]
    return tuple(names[:2]) in FIELD_ALIASES and (len(names) == 2 or names[2] in GROUP_ALIASES)


def _json(text: str, source: str, first_line: int, expected: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"{source}, line {first_line + err.lineno - 1}"
        raise DataFormatError(f"{where}: invalid JSON ({err.msg}); expected {expected}") from None


def _parse_input(stream: IO, source: str, fmt: str) -> Iterator[Pair]:
    lines = _decoded_lines(stream, source)
    first = True
    for number, text in lines:
        if not text.strip():
            continue
        if fmt == "auto":
            start = text.lstrip()[:1]
            fmt = "jsonl" if start == "{" else "json" if start == "[" else "tsv"
        if fmt == "json":  # one JSON array of objects, possibly over many lines
            items = _json("\n".join([text, *(rest for _, rest in lines)]), source, number, "one array of objects")
            if not isinstance(items, list):
                raise DataFormatError(f"{source}: expected a JSON array of objects, got a {type(items).__name__}")
            for index, obj in enumerate(items, start=1):
                yield pair_from_mapping(obj, f"{source}, element {index} of the array", index)
            return
        if fmt == "jsonl":
            obj = _json(text, source, number, "one object per line")
            yield pair_from_mapping(obj, f"{source}, line {number}", number)
            continue
        cols = text.split("\t")
        if first and _is_header(cols):
            log.info("%s, line %d: skipped the header %r", source, number, text)
            first = False
            continue
        first = False
        if len(cols) not in (2, 3):
            raise DataFormatError(
                f"{source}, line {number}: expected 2 or 3 tab-separated columns (a, b[, group]), found {len(cols)}"
            )
        yield Pair(cols[0], cols[1], "", cols[2] if len(cols) == 3 else None, number)


def predict(matcher: Matcher, pairs: Iterable[Pair], out: IO[str], batch_size: int = 256, source: str = "input") -> int:
    """Write predictions as JSON Lines; returns the number of pairs. The input is read `batch_size` pairs at a time
    and answered by `Matcher.predict` (in batches within the run's memory budget)."""
    count = 0
    stream = iter(pairs)
    # The pairs were checked as they were read (read_input): straight to the model, not through Matcher.predict's
    # check of a caller's pairs.
    chunks = iter(lambda: list(islice(stream, batch_size)), [])
    batches = ((chunk, matcher.answers(matcher.run.logits(chunk, source))) for chunk in chunks)

    if matcher.kind == "classify":
        for batch, answers in batches:
            for p, answer in zip(batch, answers, strict=True):
                record = {"line": p.line, "a": p.a, "b": p.b, "label": answer["label"],
                          "probs": {k: round(v, 6) for k, v in answer["probs"].items()}}  # fmt: skip
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += len(batch)
        return count

    groups: dict[str, list[tuple[Pair, dict]]] = {}  # in order of first appearance
    for batch, answers in batches:
        for p, answer in zip(batch, answers, strict=True):
            groups.setdefault(p.group or p.a, []).append((p, answer))
        count += len(batch)
    for group, members in groups.items():
        ranked = ranking([p for p, _ in members], [answer for _, answer in members])
        record = {"group": group, "a": members[0][0].a,
                  "ranking": [{"line": r["candidate"].line, "b": r["candidate"].b, "score": round(r["score"], 6),
                               "p_match": round(r["p_match"], 6)} for r in ranked]}  # fmt: skip
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return count


def predict_command(cfg: DictConfig) -> int:
    """The `predict` command on a composed config (conf/predict.yaml over the run's saved config)."""
    if cfg.input_format not in INPUT_FORMATS:
        raise RunError(f"input_format must be one of {', '.join(INPUT_FORMATS)}, got {cfg.input_format!r}")
    if int(cfg.batch_size) < 1:
        raise RunError(f"batch_size must be a positive number of pairs, got {cfg.batch_size}")
    source = str(cfg.input)  # a missing or wrong input= is reported before the model is loaded
    path = None if source == "-" else existing(source)
    if source != "-" and (path is None or path.is_dir()):
        raise RunError(f"input={source}: {'a folder' if path else 'no such file'}; give a file of pairs or -")
    matcher = Matcher(load_trained(cfg.ckpt, cfg))
    with ExitStack() as stack:
        if path is None:
            source, stream = "<stdin>", sys.stdin.buffer
        else:
            stream = stack.enter_context(open_binary(path))
        fmt = cfg.input_format
        if fmt == "auto" and source != "<stdin>":
            suffixes = set(Path(source).suffixes)
            fmt = "jsonl" if ".jsonl" in suffixes else "tsv" if ".tsv" in suffixes else "auto"
        out = sys.stdout if cfg.output == "-" else stack.enter_context(open(cfg.output, "w", encoding="utf-8"))
        count = predict(matcher, read_input(stream, source, fmt), out, int(cfg.batch_size), source)
    run = matcher.run
    cut = f"; {run.truncated} had a text cut to data.max_length={run.text.max_length} tokens" if run.truncated else ""
    print(f"predicted {count} pair{'' if count == 1 else 's'}{cut}", file=sys.stderr)
    return count


main = command("predict", predict_command, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
