"""Data preparation time for a 550,000-pair corpus in SNLI format: first run and re-run from the cache.

    python benchmarks/bench_data.py [--pairs 550000] [--repeats 3] [--workdir DIR]

The corpus is generated here: a 37,000-word Zipfian vocabulary (SNLI's training vocabulary has ~37k types),
premises of ≈ 14 and hypotheses of ≈ 8 tokens with SNLI-like spread, punctuation, capitals, and the real
JSON Lines field set. Preparation is the framework's own PairDataModule.setup("fit"): read, tokenise, build
the vocabulary, encode, and (first run) write the cache. Prints medians; the last line is the headline.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from matching.data.readers import read_snli_jsonl
from matching.data.tasks import Task
from matching.training.datamodule import DataSettings, PairDataModule

LABELS = ["entailment", "neutral", "contradiction"]


def make_corpus(path: Path, pairs: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = np.array(["".join(rng.choice(letters, size=rng.integers(2, 10))) for _ in range(37_000)])
    ranks = np.arange(1, len(words) + 1)
    prob = (1 / ranks**1.07) / (1 / ranks**1.07).sum()
    len_a = np.maximum(2, rng.gamma(5.0, 13.0 / 5.0, size=pairs).astype(int))
    len_b = np.maximum(2, rng.gamma(5.0, 7.0 / 5.0, size=pairs).astype(int))
    drawn = words[rng.choice(len(words), size=int(len_a.sum() + len_b.sum()), p=prob)].tolist()
    comma = rng.random(pairs) < 0.3
    pos = 0

    def sentence(n: int, with_comma: bool) -> str:
        nonlocal pos
        toks = drawn[pos : pos + n]
        pos += n
        toks[0] = toks[0].capitalize()
        if with_comma:
            toks[n // 2] += ","
        return " ".join(toks) + "."

    with open(path, "w") as f:
        for i in range(pairs):
            s1, s2 = sentence(int(len_a[i]), bool(comma[i])), sentence(int(len_b[i]), False)
            record = {"annotator_labels": ["neutral"], "captionID": f"{i}.jpg#0", "gold_label": LABELS[i % 3],
                      "pairID": f"{i}.jpg#0r1n", "sentence1": s1, "sentence1_binary_parse": "( x )",
                      "sentence1_parse": "(ROOT (S x))", "sentence2": s2, "sentence2_binary_parse": "( x )",
                      "sentence2_parse": "(ROOT (S x))"}  # fmt: skip
            f.write(json.dumps(record) + "\n")


def prepare(train: Path, dev: Path, cache: Path) -> tuple[float, PairDataModule]:
    task = Task(name="snli", kind="classify", reader=read_snli_jsonl, labels=LABELS,
                splits={"train": {"path": str(train)}, "dev": {"path": str(dev)}}, eval_splits=["dev"])  # fmt: skip
    dm = PairDataModule(task, DataSettings(data_dir=train.parent, cache_dir=cache, batch_size=64))
    start = time.perf_counter()
    dm.setup("fit")
    return time.perf_counter() - start, dm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=550_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    train, dev = work / "snli_1.0_train.jsonl", work / "snli_1.0_dev.jsonl"
    start = time.perf_counter()
    make_corpus(train, args.pairs)
    make_corpus(dev, 10_000, seed=1)
    print(f"generated {args.pairs:,} training pairs ({train.stat().st_size / 1e6:.0f} MB) in "
          f"{time.perf_counter() - start:.0f}s at {train}")  # fmt: skip

    first, cached = [], []
    for i in range(args.repeats):
        cache = work / f"cache{i}"
        shutil.rmtree(cache, ignore_errors=True)
        seconds, dm = prepare(train, dev, cache)
        first.append(seconds)
        cached.append(prepare(train, dev, cache)[0])
        print(f"repeat {i + 1}: first {seconds:.1f}s, from cache {cached[-1]:.2f}s "
              f"({len(dm.splits['train']):,} pairs, {len(dm.vocab.words):,} words)")  # fmt: skip
    f, c = statistics.median(first), statistics.median(cached)
    print(f"median first run {f:.1f}s (target <= 60s), median from cache {c:.2f}s (target <= 5s)")
    print(f"HEADLINE prepare {args.pairs:,} pairs: {f:.1f}s first, {c:.2f}s cached ({f / c:.0f}x faster from cache)")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
