"""`python -m matching.demo_sample paths.data_dir=/path/to/corpora` (conf/demo_sample.yaml): rebuild the demo's sample.

`make demo` trains on a small sample that ships inside the package (`matching/demo_data/`, package data), so that
it runs offline on a fresh machine. This command is how that sample was made, so that it is no mystery blob:
run on the same two files it writes the same bytes (gzip without a time stamp, a seeded shuffle).

- `snli_sample_{train,dev}.jsonl.gz`: `train_pairs` and `dev_pairs` labelled lines of SNLI 1.0 dev
  (`snli_1.0_dev.jsonl`, CC BY-SA 4.0), copied verbatim (SNLI's own JSON Lines, every field). Lines are taken by
  premise (`captionID`): the premises are shuffled with `seed`, dev takes whole premises first, then train, so no
  premise is on both sides (SNLI gives each premise three hypotheses, one per label; sharing them would leak).
  Each file keeps the original line order.
- `minilm-static-300d.sample.txt.gz`: the rows of the MiniLM static vectors (`embeddings=minilm`, Apache-2.0) for
  every word of the two files and of the demo's new pairs (`new_pairs.jsonl`, written by hand), tokenised as a run
  tokenises them, in the file's order, rounded to `decimals` decimals.

`README.md` in the same folder says where each file comes from and under which licence.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import sys
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig

from matching import DEMO_DATA
from matching.cli import command
from matching.errors import DataFormatError, MissingFileError
from matching.files import existing, open_binary, write_atomic

log = logging.getLogger(__name__)

LABELS = ("entailment", "neutral", "contradiction")
TRAIN, DEV, VECTORS, NEW_PAIRS = (
    "snli_sample_train.jsonl.gz",
    "snli_sample_dev.jsonl.gz",
    "minilm-static-300d.sample.txt.gz",
    "new_pairs.jsonl",
)


def split_by_premise(lines: list[str], train_pairs: int, dev_pairs: int, seed: int) -> tuple[list[str], list[str]]:
    """(train, dev) lines: labelled SNLI lines grouped by premise (`captionID`), premises shuffled with `seed`, dev
    filled first with whole premises (the last one cut to size), then train from the premises left; file order kept."""
    premises: dict[str, list[int]] = {}
    for number, line in enumerate(lines):
        record = json.loads(line)
        if record.get("gold_label") in LABELS:
            premises.setdefault(record["captionID"], []).append(number)
    order = list(premises)
    random.Random(seed).shuffle(order)
    if sum(map(len, premises.values())) < train_pairs + dev_pairs:
        raise DataFormatError(
            f"the SNLI file has {sum(map(len, premises.values()))} labelled pairs, fewer than train_pairs + dev_pairs "
            f"= {train_pairs + dev_pairs}; give the full snli_1.0_dev.jsonl or ask for fewer pairs"
        )

    def take(count: int) -> list[str]:
        chosen: list[int] = []
        while len(chosen) < count:
            chosen += premises[order.pop(0)]
        return [lines[n] for n in sorted(chosen[:count])]

    dev = take(dev_pairs)
    return take(train_pairs), dev


def sample_words(texts: Iterable[str]) -> set[str]:
    """The words a run looks up for these texts (the tokeniser of `data.lowercase=true`)."""
    from matching.data.vocab import Tokenizer  # here: the demo imports this module's names before torch

    tokenize = Tokenizer(lowercase=True)
    return {word for text in texts for word in tokenize(text)}


def vector_rows(path: Path, words: set[str], decimals: int) -> tuple[list[str], set[str]]:
    """The lines of a GloVe-text vectors file for `words`, in file order, values rounded; and the words found."""
    rows, found = [], set()
    with open_binary(path) as f:
        for line in f:
            word, _, values = line.decode("utf-8").rstrip("\n").partition(" ")
            if word in words and word not in found:
                found.add(word)
                rows.append(" ".join([word, *(f"{float(v):.{decimals}f}" for v in values.split())]) + "\n")
    return rows, found


def write_gz(path: Path, lines: list[str]) -> Path:
    """Gzip without a file name or time stamp in the header: the same lines give the same bytes."""
    data = gzip.compress("".join(lines).encode("utf-8"), compresslevel=9, mtime=0)
    return write_atomic(path, lambda tmp: tmp.write_bytes(data))


def make_sample(snli: Path, vectors: Path, out: Path, train_pairs: int = 3000, dev_pairs: int = 500,
                seed: int = 0, decimals: int = 4, new_pairs: Path | None = None) -> dict[str, int]:  # fmt: skip
    """Write the sample's three data files into `out` (see the module docstring); returns what was written."""
    with open_binary(snli) as f:
        lines = [line.decode("utf-8") for line in f if line.strip()]
    lines = [line if line.endswith("\n") else line + "\n" for line in lines]
    train, dev = split_by_premise(lines, train_pairs, dev_pairs, seed)
    texts = [r[k] for r in map(json.loads, train + dev) for k in ("sentence1", "sentence2")]
    new_pairs = new_pairs or DEMO_DATA / NEW_PAIRS
    texts += [r[k] for r in map(json.loads, new_pairs.read_text().splitlines()) for k in ("premise", "hypothesis")]
    words = sample_words(texts)
    rows, found = vector_rows(vectors, words, decimals)
    missing = sorted(words - found)
    if missing:  # kept as OOV words by a run, as any word without a vector; said here so that nobody is surprised
        log.warning("%d of %d words have no vector in %s: %s", len(missing), len(words), vectors, missing[:20])
    write_gz(out / TRAIN, train)
    write_gz(out / DEV, dev)
    write_gz(out / VECTORS, rows)
    return {"train": len(train), "dev": len(dev), "words": len(words), "vectors": len(rows)}


def demo_sample(cfg: DictConfig) -> dict[str, int]:
    """The `demo_sample` command on its composed config (conf/demo_sample.yaml)."""
    snli, vectors = existing(str(cfg.snli)), existing(str(cfg.vectors))
    for given, path, what in ((cfg.snli, snli, "SNLI 1.0 dev (snli_1.0_dev.jsonl)"),
                              (cfg.vectors, vectors, "the MiniLM static vectors (embeddings=minilm)")):  # fmt: skip
        if path is None or path.is_dir():
            raise MissingFileError(f"no file at {given}: the sample is taken from {what}; set paths.data_dir")
    out = Path(str(cfg.out)) if cfg.out else DEMO_DATA
    written = make_sample(snli, vectors, out, int(cfg.train_pairs), int(cfg.dev_pairs), int(cfg.seed),
                          int(cfg.decimals))  # fmt: skip
    print(
        f"wrote {written['train']:,} training and {written['dev']:,} dev pairs and {written['vectors']:,} vectors "
        f"(of {written['words']:,} words) to {out}"
    )
    return written


main = command("demo_sample", demo_sample)

if __name__ == "__main__":
    sys.exit(main())
