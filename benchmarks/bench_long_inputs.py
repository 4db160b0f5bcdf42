"""Peak memory (RSS) with one very long text in the input: it must not inflate its batch.

    python benchmarks/bench_long_inputs.py [--workdir DIR] [--unbounded]

Each case runs the real command in its own process and reports that process's peak RSS:
- predict on 300 pairs, and on the same 300 pairs with one 20,000-token text;
- training (1 epoch, 2,000 pairs, batch 64, hidden 200, 300-d vectors), and the same with one 5,000-token sentence.
Target: the long-text case within 1.5x of the plain case. `--unbounded` adds both long cases with
`data.max_length=null data.batch_cells=null data.batch_tokens=null` (no budget) for comparison.
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
WORDS = [f"w{i}" for i in range(3000)]
LABELS = ["entailment", "neutral", "contradiction"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def snli_file(path: Path, pairs: int, rng: random.Random, long_tokens: int = 0) -> Path:
    with open(path, "w") as f:
        for i in range(pairs):
            a = sentence(rng, long_tokens if (long_tokens and i == pairs // 2) else rng.randint(5, 30))
            record = {"sentence1": a, "sentence2": sentence(rng, rng.randint(3, 15)), "gold_label": rng.choice(LABELS)}
            f.write(json.dumps(record) + "\n")
    return path


def peak_rss_mib(cmd: list[str], may_fail: bool = False) -> float | str:
    """Run `cmd` to completion and return its peak resident set size in MiB (or how it failed, if it may)."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        if may_fail:
            last = err.strip().splitlines()[-1][:100] if err.strip() else ""
            return f"{usage.ru_maxrss / 1024:.0f} then died (exit {code}: {last})"
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--unbounded", action="store_true")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-long-"))
    rng = random.Random(0)
    data = work / "data" / "snli"
    data.mkdir(parents=True, exist_ok=True)
    dev = snli_file(data / "dev.jsonl", 200, rng)
    train_plain = snli_file(data / "train.jsonl", 2000, random.Random(1))
    train_long = snli_file(data / "train_long.jsonl", 2000, random.Random(1), long_tokens=5000)
    train = [sys.executable, "-m", "matching.train", "task=snli", f"paths.data_dir={work / 'data'}",
             f"paths.cache_dir={work / 'cache'}", "embeddings=random", "trainer.max_epochs=1", "data.cache=false",
             f"task.splits.dev.path={dev}", "task.splits.test=null", "task.test_splits=[]", "~logger",
             "trainer.enable_progress_bar=false"]  # fmt: skip

    def train_case(name: str, path: Path, *extra: str, may_fail: bool = False) -> float | str:
        cmd = [*train, f"task.splits.train.path={path}", f"hydra.run.dir={work / 'runs' / name}", *extra]
        return peak_rss_mib(cmd, may_fail)

    rows = [("train, 2,000 pairs", train_case("plain", train_plain)),
            ("train, with one 5,000-token sentence", train_case("long", train_long))]  # fmt: skip
    ckpt = work / "runs" / "plain" / "checkpoints" / "best.ckpt"
    pairs = [(sentence(rng, rng.randint(5, 30)), sentence(rng, rng.randint(3, 15))) for _ in range(300)]
    plain_tsv, long_tsv = work / "pairs.tsv", work / "pairs_long.tsv"
    plain_tsv.write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    pairs[150] = (sentence(rng, 20000), pairs[150][1])
    long_tsv.write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    predict = [sys.executable, "-m", "matching.predict", f"ckpt={ckpt}", f"output={work / 'out.jsonl'}"]
    rows += [("predict, 300 pairs", peak_rss_mib([*predict, f"input={plain_tsv}"])),
             ("predict, with one 20,000-token text", peak_rss_mib([*predict, f"input={long_tsv}"]))]  # fmt: skip
    if args.unbounded:
        off = ["data.max_length=null", "data.batch_cells=null", "data.batch_tokens=null"]
        rows.append(
            ("train, 5,000-token sentence, no budget", train_case("unbounded", train_long, *off, may_fail=True))
        )
        unbounded = peak_rss_mib([*predict, f"input={long_tsv}", *off], may_fail=True)
        rows.append(("predict, 20,000-token text, no budget", unbounded))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  peak RSS (MiB)")
    for name, mib in rows:
        print(f"{name:<{width}}  {mib:10.0f}" if isinstance(mib, float) else f"{name:<{width}}  {mib:>10}")
    train_ratio, predict_ratio = rows[1][1] / rows[0][1], rows[3][1] / rows[2][1]
    print(f"HEADLINE long/plain peak RSS: train {train_ratio:.2f}x, predict {predict_ratio:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
