"""Peak memory (RSS) and time to load pretrained vectors for a 40,000-word vocabulary from a
2,000,000-word x 300-d GloVe text file.

    python benchmarks/bench_vectors.py [--words 2000000] [--vocab 40000] [--repeats 3] [--keep DIR]

The file (~4 GB) is generated here: unique words, 300 floats each, with the vocabulary's words spread
through it. Each load runs in a fresh process through `matching.model.vector_files.load_vectors` (no cache), and
its peak RSS is read from the kernel (ru_maxrss of the child). Prints medians; the last line is the headline.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LOAD = """
import json, sys, time, resource
from matching.model.vector_files import load_vectors
words = json.load(open(sys.argv[2]))
start = time.perf_counter()
matrix, found = load_vectors(sys.argv[1], words, format="glove", dim=300)
print(json.dumps({"seconds": time.perf_counter() - start, "found": int(found.sum()), "shape": matrix.shape}))
"""


def make_file(path: Path, words: int, vocab: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    pool = [" ".join(f"{x:.5f}" for x in rng.standard_normal(300)) for _ in range(512)]
    every = max(1, words // len(vocab))
    with open(path, "w", buffering=1 << 22) as f:
        for i in range(words):
            spot, rest = divmod(i, every)
            word = vocab[spot] if rest == 0 and spot < len(vocab) else f"w{i}x"
            f.write(f"{word} {pool[i % 512]}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--vocab", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="folder to keep the generated file in")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-vectors-"))
    work.mkdir(parents=True, exist_ok=True)
    vocab = [f"vocab{i}" for i in range(args.vocab)]
    vectors, words_file = work / f"glove.{args.words}.300d.txt", work / "vocab.json"
    words_file.write_text(json.dumps(vocab + ["absent-word"]))
    if not vectors.exists():
        start = time.perf_counter()
        make_file(vectors, args.words, vocab)
        print(f"generated {vectors} ({vectors.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - start:.0f}s")
    seconds, rss = [], []
    for i in range(args.repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        done = subprocess.run([sys.executable, "-c", LOAD, str(vectors), str(words_file)], capture_output=True,
                              text=True, check=True)  # fmt: skip
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        result = json.loads(done.stdout.strip().splitlines()[-1])
        seconds.append(result["seconds"])
        rss.append(max(peak_kb, before) / 2**20)  # KiB -> GiB; the max over children so far
        print(f"repeat {i + 1}: {result['seconds']:.1f}s, found {result['found']:,} of {len(vocab) + 1:,}, "
              f"peak RSS {rss[-1]:.2f} GiB")  # fmt: skip
    print(f"median load {statistics.median(seconds):.1f}s; peak RSS {max(rss):.2f} GiB (target <= 1.5 GB)")
    print(f"HEADLINE peak RSS loading {args.vocab:,} of {args.words:,} x 300-d vectors: {max(rss):.2f} GiB")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
