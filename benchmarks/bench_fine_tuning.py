"""What fine-tuning the encoder's top N layers costs on a CPU, with and without the frozen layers' cache.

    python benchmarks/bench_fine_tuning.py --data-dir /path/to/corpora [--layers 1,2,3] [--threads 1,2]
        [--steps 60] [--repeats 1] [--aligner coda]

CoDA over all-MiniLM-L6-v2 (`embeddings=minilm_contextual embeddings.trainable_layers=N`) on WikiQA train
(20,360 pairs, batch 64: 319 steps an epoch), fp32, through the real `matching.train` command:

1. Per N, the cache of the frozen lower layers' output (WikiQA train + dev, every distinct text once) is built in a
   fresh cache folder: the seconds and the size on disk.
2. Per N and thread count, `--steps` training steps (validation off) with the cache (`cache_frozen_layers=true`) and
   without it (the whole encoder on every batch), alternating, `--repeats` times: the median seconds per step
   (Lightning's own epoch time over the steps, from the run's metrics.json) and an epoch's worth (x 319), and the
   ratio. Give each process one thread per free core: a busy machine makes the figures meaningless.
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

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS_PER_EPOCH = 319  # WikiQA train: 20,360 pairs in batches of 64


def common(data_dir: Path, cache: Path, layers: int, aligner: str) -> list[str]:
    return ["task=wikiqa", f"aligner={aligner}", "embeddings=minilm_contextual",
            f"embeddings.trainable_layers={layers}", "dtype=fp32", f"paths.data_dir={data_dir}",
            f"paths.cache_dir={cache}"]  # fmt: skip


def build_cache(overrides: list[str], folder: Path) -> tuple[float, float]:
    """(seconds to prepare WikiQA train + dev with the frozen layers' cache, megabytes of its files); `folder`: the
    run folder the data module is given (vocabulary)."""
    from hydra import compose, initialize_config_dir

    from matching.training.build import build_datamodule

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, f"paths.output_dir={folder}"])
    started = time.perf_counter()
    dm = build_datamodule(cfg)
    dm.setup("fit")
    seconds = time.perf_counter() - started
    folder = Path(cfg.paths.cache_dir) / "contextual"
    return seconds, sum(f.stat().st_size for f in folder.glob("*-layer*")) / 1e6


def step_seconds(work: Path, name: str, overrides: list[str], steps: int, threads: int) -> float:
    """Seconds per training step over `steps` steps of a fresh run (Lightning's epoch time, validation off)."""
    run_dir = work / "runs" / name
    cmd = [sys.executable, "-m", "matching.train", "trainer.max_epochs=1", f"+trainer.limit_train_batches={steps}",
           "+trainer.limit_val_batches=0", "~logger", "trainer.enable_progress_bar=false",
           "callbacks.early_stopping=null", f"hydra.run.dir={run_dir}", *overrides]  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: training failed\n{done.stderr[-3000:]}")
    return json.loads((run_dir / "metrics.json").read_text())["seconds_last_epoch"] / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--layers", default="1,2,3")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--aligner", default="coda")
    args = parser.parse_args()
    if not any((args.data_dir / "wikiqa" / name).is_file() for name in ("WikiQA-train.tsv", "WikiQA-train.tsv.gz")):
        sys.exit(f"{args.data_dir} has no wikiqa/WikiQA-train.tsv; give --data-dir the folder that holds the corpora")
    print(f"WikiQA train, {args.aligner}, all-MiniLM-L6-v2, fp32, {args.steps} steps of 64 pairs, "
          f"{args.repeats} repeat(s); an epoch = {STEPS_PER_EPOCH} steps")  # fmt: skip
    print(f"{'N':>2} {'threads':>7} {'cached s/step':>13} {'uncached':>9} {'ratio':>6} {'cached min/epoch':>16} "
          f"{'uncached':>9}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-fine-tuning-") as tmp:
        work = Path(tmp)
        builds = {}
        for layers in map(int, args.layers.split(",")):
            cache = work / f"cache{layers}"
            overrides = common(args.data_dir, cache, layers, args.aligner)
            builds[layers] = build_cache(overrides, work / f"prepare{layers}")
            for threads in map(int, args.threads.split(",")):
                times: dict[str, list[float]] = {"true": [], "false": []}
                for r in range(args.repeats):
                    for cached in times:
                        name = f"n{layers}-t{threads}-{cached}-{r}"
                        times[cached].append(step_seconds(work, name, [*overrides,
                                                          f"embeddings.cache_frozen_layers={cached}"], args.steps,
                                                          threads))  # fmt: skip
                with_cache, without = statistics.median(times["true"]), statistics.median(times["false"])
                print(f"{layers:>2} {threads:>7} {with_cache:>13.3f} {without:>9.3f} {without / with_cache:>5.1f}x "
                      f"{with_cache * STEPS_PER_EPOCH / 60:>16.1f} {without * STEPS_PER_EPOCH / 60:>9.1f}",
                      flush=True)  # fmt: skip
        for layers, (seconds, size) in builds.items():
            print(f"cache of the {6 - layers} frozen layers' output (N={layers}), train + dev: built in "
                  f"{seconds:.0f} s on {torch.get_num_threads()} thread(s), {size:,.0f} MB float32")  # fmt: skip


if __name__ == "__main__":
    main()
