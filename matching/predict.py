"""`matching-predict ckpt=<path> input=<file or -> [output=<file or ->] [batch_size=N] [format=F]` (conf/predict.yaml).

Predicts on new pairs with a trained model, offline, from its run directory alone (format: auto, tsv or
jsonl; batch_size 256 by default). Input is TSV (two text
columns and an optional group id; an optional header `a<TAB>b[<TAB>group]`) or JSON Lines (`{"a": ..., "b": ...,
"group": ...}`; `sentence1`/`sentence2`, `premise`/`hypothesis`, `question`/`answer` and `context`/`response`
also work). Output is JSON Lines:

- classification: one line per pair, `{"line", "a", "b", "label", "probs": {label: p}}`;
- ranking: one line per group (question), `{"group", "a", "ranking": [{"line", "b", "score", "p_match"}, ...]}`
  with the candidates by decreasing score, the logit margin logit[match] − logit[no match] (it orders as
  P(match) does, but does not saturate: P(match) rounds to 1.0 for every confident candidate). Without a group
  id, pairs with the same first text form a group. A group's candidates must be consecutive in the input, which
  is read and written as a stream.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

import torch
from omegaconf import DictConfig

from matching.cli import command
from matching.data.readers import DataFormatError, Pair, open_text
from matching.runs import RunError, TrainedRun, load_trained
from matching.system import match_margin

log = logging.getLogger(__name__)

FIELD_ALIASES = [("a", "b"), ("sentence1", "sentence2"), ("premise", "hypothesis"), ("question", "answer"),
                 ("context", "response")]  # fmt: skip
GROUP_ALIASES = ("group", "qid", "question_id", "id")


def _from_json(obj: object, source: str, line: int) -> Pair:
    if not isinstance(obj, dict):
        raise DataFormatError(f"{source}, line {line}: expected a JSON object with the two texts, got {obj!r:.60}")
    for ka, kb in FIELD_ALIASES:
        if ka in obj and kb in obj:
            group = next((obj[k] for k in GROUP_ALIASES if obj.get(k) is not None), None)
            return Pair(str(obj[ka]), str(obj[kb]), "", None if group is None else str(group), line)
    raise DataFormatError(
        f"{source}, line {line}: no pair of text fields among {[list(p) for p in FIELD_ALIASES]}; "
        f"found keys {sorted(obj)}"
    )


def read_input(stream: IO[str], source: str, fmt: str = "auto") -> Iterator[Pair]:
    """Pairs from TSV or JSON Lines, streamed; malformed lines and empty texts are errors naming the line."""
    for pair in _parse_input(stream, source, fmt):
        if not pair.a.strip() or not pair.b.strip():
            side = "first" if not pair.a.strip() else "second"
            raise DataFormatError(f"{source}, line {pair.line}: the {side} text is empty; give both texts of the pair")
        yield pair


def _parse_input(stream: IO[str], source: str, fmt: str) -> Iterator[Pair]:
    for number, raw in enumerate(stream, start=1):
        text = raw.rstrip("\r\n")
        if not text.strip():
            continue
        if fmt == "auto":
            fmt = "jsonl" if text.lstrip().startswith("{") else "tsv"
        if fmt == "jsonl":
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                raise DataFormatError(
                    f"{source}, line {number}: invalid JSON ({err.msg}); one object per line"
                ) from err
            yield _from_json(obj, source, number)
            continue
        cols = text.split("\t")
        if number == 1 and [c.strip().lower() for c in cols[:2]] == ["a", "b"]:
            continue  # header
        if len(cols) not in (2, 3):
            raise DataFormatError(
                f"{source}, line {number}: expected 2 or 3 tab-separated columns (a, b[, group]), found {len(cols)}"
            )
        yield Pair(cols[0], cols[1], "", cols[2] if len(cols) == 3 else None, number)


def predict(run: TrainedRun, pairs: Iterable[Pair], out: IO[str], batch_size: int = 256, source: str = "input") -> int:
    """Write predictions as JSON Lines; returns the number of pairs. Batches are bounded by `batch_size` pairs
    and by the run's `data.batch_cells` (see TrainedRun.batches)."""
    labels, count = run.labels, 0
    batches = ((pairs, run.predict(batch).logits.float()) for pairs, batch in run.batches(pairs, batch_size, source))

    if run.kind == "classify":
        for batch, logits in batches:
            probs = torch.softmax(logits, dim=-1)
            for p, row in zip(batch, probs.tolist(), strict=True):
                best = max(range(len(labels)), key=row.__getitem__)
                record = {"line": p.line, "a": p.a, "b": p.b, "label": labels[best],
                          "probs": {label: round(v, 6) for label, v in zip(labels, row, strict=True)}}  # fmt: skip
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += len(batch)
        return count

    done: set[str] = set()
    current: list[tuple[Pair, float, float]] = []

    def flush() -> None:
        if current:
            group = current[0][0].group or current[0][0].a
            ranked = sorted(current, key=lambda item: (-item[1], item[0].line))
            record = {"group": group, "a": current[0][0].a,
                      "ranking": [{"line": p.line, "b": p.b, "score": round(s, 6), "p_match": round(pm, 6)}
                                  for p, s, pm in ranked]}  # fmt: skip
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            done.add(group)
            current.clear()

    for batch, scores in batches:
        margins, p_match = match_margin(scores).tolist(), torch.softmax(scores, dim=-1)[:, 1].tolist()
        for p, score, pm in zip(batch, margins, p_match, strict=True):
            group = p.group or p.a
            if current and group != (current[0][0].group or current[0][0].a):
                flush()
            if group in done:
                raise DataFormatError(
                    f"line {p.line}: group {group!r} appeared earlier and was already ranked; give the candidates of "
                    f"each group on consecutive lines (sort the input by group)"
                )
            current.append((p, score, pm))
        count += len(batch)
    flush()
    return count


def predict_command(cfg: DictConfig) -> int:
    """The `predict` command on a composed config (conf/predict.yaml over the run's saved config)."""
    if cfg.format not in ("auto", "tsv", "jsonl"):
        raise RunError(f"format must be auto, tsv or jsonl, got {cfg.format!r}")
    if int(cfg.batch_size) < 1:
        raise RunError(f"batch_size must be a positive number of pairs, got {cfg.batch_size}")
    run = load_trained(cfg.ckpt, cfg)
    with ExitStack() as stack:
        if cfg.input == "-":
            source, stream = "<stdin>", sys.stdin
        else:
            source = str(cfg.input)
            stream = stack.enter_context(open_text(source))
        fmt = cfg.format
        if fmt == "auto" and source != "<stdin>":
            suffixes = Path(source).suffixes
            fmt = "jsonl" if {".jsonl", ".json"} & set(suffixes) else "tsv" if ".tsv" in suffixes else "auto"
        out = sys.stdout if cfg.output == "-" else stack.enter_context(open(cfg.output, "w", encoding="utf-8"))
        count = predict(run, read_input(stream, source, fmt), out, int(cfg.batch_size), source)
    cut = f"; {run.truncated} had a text cut to data.max_length={run.data.max_length} tokens" if run.truncated else ""
    print(f"predicted {count} pairs{cut}", file=sys.stderr)
    return count


main = command("predict", predict_command, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
