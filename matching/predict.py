"""`matching-predict ckpt=<path> input=<file or -> [output=<file or ->] [input_format=F] [columns.a=...]`
(conf/predict.yaml).

Predicts on new pairs with a trained model, offline, from its run directory alone. The input is read by the same
code as training's tables (matching.data.tables.read_new_pairs): a file in any format training reads (TSV, CSV,
JSON Lines, one JSON array, Parquet, a dataset folder; plain, .gz or .zip) or stdin (TSV, JSON Lines or a JSON
array), UTF-8 (a byte-order mark is fine). Its columns are the run's own (`task.columns` of the run's config, so a
run trained on `text_left`/`text_right` reads those), else the usual names (`a`/`b`, `sentence1`/`sentence2`,
`question`/`answer`, ...), or `columns.a=... columns.b=... columns.group=...` for this input; a first line that
names the columns is a header, never a pair, and a file without one is read by position (`a<TAB>b[<TAB>group]`).
`input_format=auto` (the default) goes by the file's name, else by the first non-blank line (`{`: JSON Lines,
`[`: an array, else TSV). Output is JSON Lines (its folder is created when missing):

- classification: one line per pair, `{"line", "a", "b", "label", "probs": {label: p}}`;
- ranking: one line per group (question), `{"group", "a", "ranking": [{"line", "b", "score", "p_match"}, ...]}`;
- the texts' keys are the run's own column names where it has them (a run trained with `task.columns.a=claim
  task.columns.b=evidence` writes `"claim"` and `"evidence"`), else `a` and `b`
  with the candidates by decreasing score, the logit margin logit[match] − logit[no match] (it orders as P(match)
  does, but does not saturate: P(match) rounds to 1.0 for every confident candidate). Without a group column,
  pairs with the same first text form a group. A group's candidates may be anywhere in the input: the groups are
  written in the order of their first line once the input ends (classification is written as it is read).

`line` is the line (or row, for Parquet and dataset folders) the pair was read from.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from matching.cli import command
from matching.data.pairs import Pair
from matching.data.tables import TABLE_FORMATS, read_new_pairs, text_names
from matching.errors import RunError
from matching.files import existing

if TYPE_CHECKING:
    from matching.inference.queries import Scored
    from matching.matcher import Matcher

log = logging.getLogger(__name__)

#: Input formats: auto (by the file's name, else by its first non-blank line), or one of the table formats.
INPUT_FORMATS = ("auto", *TABLE_FORMATS)


def predict(matcher: Matcher, pairs: Iterable[Pair], out: IO[str], batch_size: int = 256, source: str = "input") -> int:
    """Write predictions as JSON Lines; returns the number of pairs. The input is read `batch_size` pairs at a time,
    each chunk one classify query of `Matcher.answer` (in batches within the run's memory budget); a ranking model's
    groups are ranked once the input ends (matching.inference.queries.ranked)."""
    from matching.inference.queries import ClassifyQuery, Refused, ranked

    a, b = text_names(matcher.columns)
    stream, count = iter(pairs), 0
    groups: dict[str, list[tuple[Pair, Scored]]] = {}  # in order of first appearance
    for chunk in iter(lambda: list(islice(stream, batch_size)), []):
        # The pairs were checked as they were read (read_new_pairs): no limits, straight to the model.
        (answer,) = matcher.answer([ClassifyQuery(chunk, source)])
        if isinstance(answer, Refused):
            raise answer.error or RunError(answer.message)
        count += len(chunk)
        for p, scored in zip(chunk, answer.pairs, strict=True):
            if matcher.kind == "rank":
                groups.setdefault(p.group or p.a, []).append((p, scored))
                continue
            record = {"line": p.line, a: p.a, b: p.b, "label": scored.label,
                      "probs": {k: round(v, 6) for k, v in scored.probs.items()}}  # fmt: skip
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    for group, members in groups.items():
        rows = [(members[r.index][0], r) for r in ranked([s for _, s in members])]
        record = {"group": group, a: members[0][0].a,
                  "ranking": [{"line": p.line, b: p.b, "score": round(r.score, 6), "p_match": round(r.p_match, 6)}
                              for p, r in rows]}  # fmt: skip
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return count


def predict_command(cfg: DictConfig) -> int:
    """The `predict` command on a composed config (conf/predict.yaml over the run's saved config)."""
    if cfg.input_format not in INPUT_FORMATS:
        raise RunError(f"input_format must be one of {', '.join(INPUT_FORMATS)}, got {cfg.input_format!r}")
    if cfg.header not in (True, False, "auto"):
        raise RunError(f"header must be auto, true or false, got {cfg.header!r}")
    if int(cfg.batch_size) < 1:
        raise RunError(f"batch_size must be a positive number of pairs, got {cfg.batch_size}")
    source = str(cfg.input)  # a missing or wrong input= is reported before the model is loaded
    path = None if source == "-" else existing(source)
    if source != "-" and path is None:
        raise RunError(
            f"input={source}: no such file (looked for {Path(source).absolute()}); give a file of pairs or -"
        )
    from matching.matcher import Matcher  # here: a typo is answered before the model's modules load

    matcher = Matcher(load_predictor(cfg))
    named = OmegaConf.to_container(cfg.columns) if cfg.get("columns") else {}
    options = {"format": cfg.input_format, "header": cfg.header, "preferred": matcher.columns,
               "named": named}  # fmt: skip
    with ExitStack() as stack:
        pairs = read_new_pairs(sys.stdin.buffer if path is None else path, **options)
        if cfg.get("index"):
            pairs = list(pairs)  # read whole: a new index is built from its second texts first
            use_index(matcher, Path(str(cfg.index)).expanduser(), pairs)
        out = sys.stdout if cfg.output == "-" else stack.enter_context(output_file(cfg.output))
        count = predict(matcher, pairs, out, int(cfg.batch_size), "<stdin>" if path is None else str(path))
    done = matcher
    cut = f"; {done.truncated} had a text cut to data.max_length={done.max_length} tokens" if done.truncated else ""
    print(f"predicted {count} pair{'' if count == 1 else 's'}{cut}", file=sys.stderr)
    return count


def use_index(matcher: Matcher, folder: Path, pairs: list[Pair]) -> None:
    """Rank against the index in `folder`, or, when it holds none yet, build one there from the pairs' distinct
    second texts (the candidates) first."""
    if (folder / "index.json").is_file():
        index = matcher.use_index(folder)
        print(f"using the index in {folder} ({len(index)} texts)", file=sys.stderr)
        return
    if folder.exists() and any(folder.iterdir()):
        raise RunError(f"index={folder} is a folder with other files and no index.json; give a new folder (the index "
                       "is built there) or one that an earlier index= wrote")  # fmt: skip
    index = matcher.index(dict.fromkeys(p.b for p in pairs), save_to=folder)
    print(f"indexed {len(index)} candidate texts into {folder}; later runs with index={folder} encode only the "
          "queries", file=sys.stderr)  # fmt: skip


def load_predictor(cfg: DictConfig):
    """The model of a command's `ckpt=` (any form matching.inference.load takes) on its `backend=`, `quantize=` and
    `threads=`, with the command line's overrides of the run's config."""
    from matching.inference import load

    return load(cfg.ckpt, backend=str(cfg.get("backend") or "auto"), quantize=cfg.get("quantize"),
                threads=int(cfg.get("threads") or 0), config=cfg if "task" in cfg else None,
                encoder_backend=str(cfg.get("encoder_backend") or "torch"))  # fmt: skip


def output_file(name: str) -> IO[str]:
    """The output file, opened for writing; its folder is created when missing (as most tools do)."""
    path = Path(name).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8")


main = command("predict", predict_command, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
