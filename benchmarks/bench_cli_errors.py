"""How long each command takes to answer a mistake in its arguments (an unknown key), the whole process timed.

    python benchmarks/bench_cli_errors.py [--run <run dir>] [--repeats 3]

A typo should be answered before any model, corpus or heavy library is loaded: this prints, per command, the
median wall-clock seconds of `python -m matching.<command> <its usual arguments> unknwon_key=1` over the repeats
(its exit status must be 2, a user's error, and its message must name the key), and the target, under a second.
Commands that work on a trained run get `ckpt=<run dir>` (a fixture-sized run is trained first when none is given).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: command -> its arguments before the typo (`{run}`: a run directory)
COMMANDS = {
    "train": [],
    "evaluate": ["ckpt={run}"],
    "predict": ["ckpt={run}", "input=-"],
    "visualize": ["ckpt={run}", "a=x", "b=y"],
    "export": ["ckpt={run}"],
    "serve": ["ckpt={run}"],
    "report": ["runs=outputs"],
    "study": [],
}


def fixture_run(folder: Path) -> Path:
    """A one-epoch run on the test fixtures (SNLI's format), the kind of run the commands load."""
    out = folder / "run"
    command = [sys.executable, "-m", "matching.train", "task=snli", "embeddings=glove",
               f"embeddings.path={ROOT / 'tests' / 'fixtures' / 'vectors' / 'glove.fixture.20d.txt'}",
               "embeddings.dim=20",
               f"paths.data_dir={ROOT / 'tests' / 'fixtures'}", f"paths.cache_dir={folder / 'cache'}",
               "trainer.max_epochs=1", f"hydra.run.dir={out}", "logger=csv"]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, cwd=folder)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    run = args.run or fixture_run(folder)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    print(f"{'command':<10} {'median s':>9}  runs (s)                 target < 1 s")
    for name, words in COMMANDS.items():
        argv = [sys.executable, "-m", f"matching.{name}", *(w.format(run=run) for w in words), "unknwon_key=1"]
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, cwd=folder, env=env, input="")
            times.append(time.perf_counter() - start)
            if done.returncode != 2 or "unknwon_key" not in done.stderr:
                print(
                    f"{name}: exit {done.returncode}, not a one-paragraph error naming the key:\n{done.stderr[-600:]}"
                )
        median = statistics.median(times)
        runs = ", ".join(f"{t:.2f}" for t in times)
        print(f"{name:<10} {median:>9.2f}  {runs:<24} {'met' if median < 1 else 'missed'}")


if __name__ == "__main__":
    main()
