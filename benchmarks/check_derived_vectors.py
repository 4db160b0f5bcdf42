"""Check vectors made by `matching-derive-vectors` against a reference file (the MiniLM static vectors we publish
numbers with): the same words in the same order, and the cosine of each word's two vectors.

    python benchmarks/check_derived_vectors.py --reference /path/to/minilm-static-300d.txt.gz \\
        [--derived derived.txt.gz]

Without --derived, the vectors are derived first, with the reference's own word list
(`matching-derive-vectors words=<reference> out=<tmp>`, needs the vectors extra), and the time is printed.
Target: every word's cosine ≥ 0.99.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from matching.files import open_binary


def read(path: Path) -> tuple[list[str], np.ndarray]:
    words, rows = [], []
    with open_binary(path) as f:
        for line in f:
            word, *values = line.decode("utf-8").rstrip("\n").split(" ")
            words.append(word)
            rows.append(np.array(values, dtype=np.float32))
    return words, np.stack(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--derived", type=Path, default=None)
    args = parser.parse_args()
    derived = args.derived
    if derived is None:
        derived = Path(tempfile.mkdtemp(prefix="derived-vectors-")) / "minilm-static-300d.txt.gz"
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "matching.derive_vectors", f"words={args.reference}", f"out={derived}"]
        subprocess.run(cmd, check=True)
        print(f"derived {derived} in {time.perf_counter() - start:.0f} s")
    ref_words, ref = read(args.reference)
    new_words, new = read(derived)
    print(f"words: reference {len(ref_words):,}, derived {len(new_words):,}, same list in the same order: "
          f"{ref_words == new_words}")  # fmt: skip
    if ref_words != new_words:
        index = {w: i for i, w in enumerate(new_words)}
        common = [w for w in ref_words if w in index]
        print(f"  {len(common):,} words in both; comparing those")
        ref = ref[[ref_words.index(w) for w in common]]
        new, ref_words = new[[index[w] for w in common]], common
    cos = (ref * new).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(new, axis=1)).clip(1e-12)
    low = np.argsort(cos)[:5]
    print(f"cosine per word: min {cos.min():.5f}, 1st percentile {np.percentile(cos, 1):.5f}, "
          f"median {np.median(cos):.5f}; below 0.99: {(cos < 0.99).sum():,} of {len(cos):,} (target 0)")  # fmt: skip
    print("lowest:", ", ".join(f"{ref_words[i]!r} {cos[i]:.4f}" for i in low))
    print(f"max |difference| {np.abs(ref - new).max():.5f}")


if __name__ == "__main__":
    main()
