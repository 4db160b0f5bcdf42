"""The contextual embedder on WikiQA: cache build time and size, and a warm-cache epoch against a static-vector one.

    python benchmarks/bench_contextual.py --data-dir /path/to/corpora [--epochs 3] [--repeats 1] [--trainer cpu]

1. Builds the contextual states cache of WikiQA train + dev in a fresh cache folder (each distinct text encoded once
   by the frozen encoder, float16, memory-mapped) and prints the time and the size on disk; then prepares the data
   again to show that the cache is reused, and how long that takes.
2. Trains `--epochs` epochs through the real `matching.train` command twice per repeat, alternating: static vectors
   (`embeddings=minilm`, `<data-dir>/embeddings/minilm-static-300d.txt.gz` unless `--vectors`) and the contextual
   embedder with the warm cache; prints the median seconds per training epoch (EpochTimer: validation excluded) of
   each and their ratio (target: contextual ≤ 1.5x static).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_cache(data_dir: Path, cache_dir: Path, model: str) -> tuple[float, float, int]:
    """(seconds to prepare WikiQA train + dev with the contextual embedder, seconds, word states) in `cache_dir`."""
    from hydra import compose, initialize_config_dir

    from matching.training.build import build_datamodule

    overrides = ["task=wikiqa", f"paths.data_dir={data_dir}", f"paths.cache_dir={cache_dir}",
                 "embeddings=minilm_contextual", f"embeddings.model={model}",
                 f"paths.output_dir={cache_dir / 'run'}"]  # fmt: skip
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    times = []
    for _ in range(2):  # the first builds the cache, the second reuses it
        started = time.perf_counter()
        dm = build_datamodule(cfg)
        dm.setup("fit")
        times.append(time.perf_counter() - started)
    words = sum(s.source_data.rows.shape[0] for s in dm.splits.values())
    return times[0], times[1], words


def epoch_seconds(work: Path, name: str, overrides: list[str], epochs: int) -> list[float]:
    """[median seconds per training epoch] of `epochs` epochs of WikiQA through the train command."""
    run_dir = work / "runs" / name
    cmd = [sys.executable, "-m", "matching.train", "task=wikiqa", f"trainer.max_epochs={epochs}", "~logger",
           "trainer.enable_progress_bar=false", "callbacks.early_stopping=null", f"hydra.run.dir={run_dir}",
           *overrides]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=os.environ, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: training failed\n{done.stderr[-3000:]}")
    return [json.loads((run_dir / "metrics.json").read_text())["seconds_per_epoch_median"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="the corpora folder (wikiqa/, embeddings/)")
    parser.add_argument("--vectors", type=Path, default=None, help="static vectors (default: the MiniLM ones)")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="the encoder (hub name or folder)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--trainer", default="cpu")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-contextual-"))
    cache = work / "cache"
    data_dir = args.data_dir.resolve()

    built, reused, words = build_cache(data_dir, cache, args.model)
    files = sorted((cache / "contextual").glob("wikiqa-*"))
    size = sum(f.stat().st_size for f in files)
    print(f"cache build (WikiQA train + dev, {words:,} word states, {len(files)} files): {built:.1f} s, "
          f"{size / 1e6:.1f} MB on disk (float16); from the cache: {reused:.1f} s", flush=True)  # fmt: skip

    vectors = args.vectors or data_dir / "embeddings" / "minilm-static-300d.txt.gz"
    common = [f"paths.data_dir={data_dir}", f"paths.cache_dir={cache}", f"trainer={args.trainer}"]
    static = [*common, "embeddings=minilm", f"embeddings.path={vectors}"]
    contextual = [*common, "embeddings=minilm_contextual", f"embeddings.model={args.model}"]
    epoch_seconds(work, "warmup-static", [*static, "task.splits.train.stop=200"], 1)  # the static vectors' cache
    times: dict[str, list[float]] = {"static": [], "contextual": []}
    for r in range(args.repeats):  # alternating, so that both see the same machine load
        times["static"] += epoch_seconds(work, f"static-{r}", static, args.epochs)
        times["contextual"] += epoch_seconds(work, f"contextual-{r}", contextual, args.epochs)
        print(f"repeat {r + 1}: static {times['static'][-1]:.1f} s, contextual {times['contextual'][-1]:.1f} s "
              "(median seconds per training epoch)", flush=True)  # fmt: skip
    s, c = statistics.median(times["static"]), statistics.median(times["contextual"])
    print(f"HEADLINE WikiQA ({args.trainer}): cache build {built:.1f} s, {size / 1e6:.1f} MB; epoch with a warm cache "
          f"{c:.1f} s vs static vectors {s:.1f} s: {c / s:.2f}x (target <= 1.5x)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
