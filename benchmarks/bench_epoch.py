"""Seconds per training epoch for each aligner, through the real `matching.train` command.

    python benchmarks/bench_epoch.py [--shape snli|wikiqa] [--pairs 550152] [--trainer gpu] [--aligners ...]
                                     [--code DIR] [overrides ...]

Generates a corpus in the task's real format (`--shape snli`: SNLI JSON Lines, SNLI's sentence lengths;
`--shape wikiqa`: the WikiQA TSV, short questions with ~30-token candidate sentences, 10 candidates a question)
with `--pairs` training pairs of random words, and trains one epoch per aligner with frozen random 300-d
embeddings (no vectors file needed; frozen as the paper's GloVe is), hidden 200, batch 64; prints the epoch
time (EpochTimer, validation excluded) and training pairs/s. The corpus is prepared once and cached.
`--code DIR` runs the command of another checkout of the project (e.g. the commit before a change), so that a
before/after pair is measured in one sitting on the same machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABELS = ["entailment", "neutral", "contradiction"]


def _sentence(rng: random.Random, words: list[str], low: int, high: int) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))


def snli_file(path: Path, pairs: int, seed: int) -> Path:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30000)]
    with open(path, "w") as f:
        for _ in range(pairs):
            a, b = _sentence(rng, words, 6, 25), _sentence(rng, words, 3, 14)
            f.write(json.dumps({"sentence1": a, "sentence2": b, "gold_label": rng.choice(LABELS)}) + "\n")
    return path


def wikiqa_file(path: Path, pairs: int, seed: int) -> Path:
    """WikiQA's TSV: a header, then (question, candidate sentence, 0/1) rows, ten candidates per question."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30000)]
    with open(path, "w") as f:
        f.write("QuestionID\tQuestion\tDocumentID\tDocumentTitle\tSentenceID\tSentence\tLabel\n")
        for i in range(pairs):
            q = i // 10
            qrng = random.Random(seed * 1_000_003 + q)
            question = _sentence(qrng, words, 4, 10)
            label = int(i % 10 == 0 or rng.random() < 0.03)
            f.write(f"Q{q}\t{question}\tD{q}\tT{q}\tD{q}-{i % 10}\t{_sentence(rng, words, 12, 48)}\t{label}\n")
    return path


SHAPES = {"snli": (snli_file, "jsonl"), "wikiqa": (wikiqa_file, "tsv")}


def corpus(work: Path, shape: str, pairs: int) -> tuple[Path, Path]:
    """The training and dev files of a `shape` corpus under `work` (written once)."""
    make, ext = SHAPES[shape]
    folder = work / "data" / f"{shape}-{pairs}"
    folder.mkdir(parents=True, exist_ok=True)
    train, dev = folder / f"train.{ext}", folder / f"dev.{ext}"
    if not train.exists():
        make(dev, 2000, 1)
        make(train, pairs, 0)
    return train, dev


def fp32_unless_asked(extra: list[str]) -> list[str]:
    """`++dtype=fp32` unless `extra` names a dtype: train's default, dtype=auto, computes in bf16 on a CPU with bf16
    arithmetic, and these figures are compared with an fp32 plain loop and with older checkouts (which may not have
    the key: `++` adds it there)."""
    return [] if any(o.lstrip("+~").startswith("dtype=") for o in extra) else ["++dtype=fp32"]


def train_command(
    work: Path, shape: str, pairs: int, aligner: str, trainer: str, extra: list[str], name: str | None, epochs: int = 1
) -> list[str]:
    """The `matching.train` command line of `epochs` benchmark epochs; its run directory is work/runs/<name>
    (None: Hydra's, e.g. a sweep's)."""
    train, dev = corpus(work, shape, pairs)
    return [
        sys.executable, "-m", "matching.train", f"task={shape}", f"aligner={aligner}", f"trainer={trainer}",
        f"trainer.max_epochs={epochs}", "embeddings=random", "embeddings.freeze=true",
        f"paths.data_dir={work / 'data'}", f"paths.cache_dir={work / 'cache'}", f"task.splits.train.path={train}",
        f"task.splits.dev.path={dev}", "task.splits.test=null", "task.test_splits=[]", "~logger",
        "trainer.enable_progress_bar=false", *([f"hydra.run.dir={work / 'runs' / name}"] if name else []),
        *fp32_unless_asked(extra), *extra,
    ]  # fmt: skip


def command_env(code: Path) -> dict[str, str]:
    """The environment that runs the command of the checkout `code` (first on PYTHONPATH)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))}


def train_epoch(
    work: Path, shape: str, pairs: int, aligner: str, trainer: str, extra: list[str], code: Path = ROOT,
    name: str = "", epochs: int = 1,
) -> dict | None:  # fmt: skip
    """metrics.json of a run through the real command of the checkout `code`; None if it failed."""
    name = name or f"{shape}-{aligner}"
    cmd = train_command(work, shape, pairs, aligner, trainer, extra, name, epochs)
    env = command_env(code)
    done = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{aligner}: failed\n{done.stderr[-3000:]}", flush=True)
        return None
    return json.loads((work / "runs" / name / "metrics.json").read_text())


def steps_per_epoch(pairs: int, batch: int = 64) -> int:
    return math.ceil(pairs / batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="snli")
    parser.add_argument("--pairs", type=int, default=550_152)
    parser.add_argument("--trainer", default="gpu")
    parser.add_argument("--aligners", default="softmax,coda,conflict,softmax_conflict")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=1, help="epochs per run; the last one is timed")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose command is timed")
    parser.add_argument("extra", nargs="*", help="more overrides for every run, e.g. trainer.devices=2")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-epoch-"))
    rows = []
    for aligner in args.aligners.split(","):
        metrics = train_epoch(
            work, args.shape, args.pairs, aligner, args.trainer, args.extra, args.code.resolve(), epochs=args.epochs
        )
        if metrics is None:
            continue
        seconds = metrics.get("seconds_last_epoch", metrics["seconds_per_epoch_median"])
        rows.append((aligner, seconds, args.pairs / seconds))
        print(f"{aligner:<17} {seconds:8.1f} s/epoch  {args.pairs / seconds:10,.0f} pairs/s", flush=True)
    print(f"HEADLINE {args.shape} trainer={args.trainer} {' '.join(args.extra)}: " +
          ", ".join(f"{a} {s:.1f} s" for a, s, _ in rows) + f" per {args.pairs:,}-pair epoch")  # fmt: skip


if __name__ == "__main__":
    main()
