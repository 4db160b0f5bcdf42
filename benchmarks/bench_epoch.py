"""Seconds per SNLI-sized training epoch for each aligner, through the real `matching.train` command.

    python benchmarks/bench_epoch.py [--pairs 550152] [--trainer gpu] [--aligners softmax,coda,conflict]

Generates an SNLI-format corpus of `--pairs` training pairs (random words, SNLI's sentence lengths) and trains
one epoch per aligner with random 300-d embeddings (no vectors file needed), hidden 200, batch 64; prints the
epoch time (EpochTimer, validation excluded) and training pairs/s. The corpus is prepared once and cached.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def snli_file(path: Path, pairs: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30000)]
    labels = ["entailment", "neutral", "contradiction"]
    with open(path, "w") as f:
        for _ in range(pairs):
            a = " ".join(rng.choice(words) for _ in range(rng.randint(6, 25)))
            b = " ".join(rng.choice(words) for _ in range(rng.randint(3, 14)))
            f.write(json.dumps({"sentence1": a, "sentence2": b, "gold_label": rng.choice(labels)}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=550_152)
    parser.add_argument("--trainer", default="gpu")
    parser.add_argument("--aligners", default="softmax,coda,conflict,softmax_conflict")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="more overrides for every run, e.g. trainer.devices=2")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-epoch-"))
    data = work / "data" / "snli"
    data.mkdir(parents=True, exist_ok=True)
    train, dev = data / "train.jsonl", data / "dev.jsonl"
    if not train.exists():
        snli_file(train, args.pairs, 0)
        snli_file(dev, 2000, 1)
    rows = []
    for aligner in args.aligners.split(","):
        run_dir = work / "runs" / aligner
        cmd = [sys.executable, "-m", "matching.train", "task=snli", f"aligner={aligner}", f"trainer={args.trainer}",
               "trainer.max_epochs=1", "embeddings=random", f"paths.data_dir={work / 'data'}",
               f"paths.cache_dir={work / 'cache'}", f"task.splits.train.path={train}", f"task.splits.dev.path={dev}",
               "task.splits.test=null", "task.test_splits=[]", "~logger", "trainer.enable_progress_bar=false",
               f"hydra.run.dir={run_dir}", *args.extra]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, env=os.environ, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{aligner}: failed\n{done.stderr[-3000:]}", flush=True)
            continue
        metrics = json.loads((run_dir / "metrics.json").read_text())
        seconds = metrics["seconds_per_epoch_median"]
        rows.append((aligner, seconds, args.pairs / seconds))
        print(f"{aligner:<17} {seconds:8.1f} s/epoch  {args.pairs / seconds:10,.0f} pairs/s", flush=True)
    print(f"HEADLINE trainer={args.trainer} {' '.join(args.extra)}: " +
          ", ".join(f"{a} {s:.1f} s" for a, s, _ in rows) + f" per {args.pairs:,}-pair epoch")  # fmt: skip


if __name__ == "__main__":
    main()
