"""Aggregate training throughput of N runs sharing one machine, through the real sweep command.

    python benchmarks/bench_concurrent.py [--trainer gpu] [--jobs 1,4,8] [--pairs 100000] [--aligner softmax]

For each N, one `matching.train -m` sweep of N seeds with `hydra/launcher=joblib hydra.launcher.n_jobs=N` (one
epoch each, the SNLI shape, hidden 200, batch 64, frozen random 300-d vectors); prints the median epoch time
of its runs and the aggregate pairs/s (N x pairs / median epoch time), so that a study fills a GPU: a step is
bound by per-step host work, and N processes overlap it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from bench_epoch import ROOT, command_env, train_command  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainer", default="gpu")
    parser.add_argument("--jobs", default="1,4,8")
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--aligner", default="softmax")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-concurrent-"))
    rows = []
    for n in map(int, args.jobs.split(",")):
        sweep = work / f"sweep-{n}"
        cmd = train_command(work, "snli", args.pairs, args.aligner, args.trainer, [], name=None)
        cmd = [*cmd[:3], "-m", *cmd[3:]]
        cmd += [f"seed={','.join(str(s) for s in range(1, n + 1))}", "hydra/launcher=joblib",
                f"hydra.launcher.n_jobs={n}", f"hydra.sweep.dir={sweep}", *args.extra]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, env=command_env(ROOT), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"N={n}: failed\n{done.stderr[-2000:]}", flush=True)
            continue
        seconds = [json.loads(p.read_text())["seconds_last_epoch"] for p in sweep.rglob("metrics.json")]
        median = statistics.median(seconds)
        rows.append((n, median, n * args.pairs / median))
        print(f"N={n:<3} median epoch {median:7.1f} s  aggregate {n * args.pairs / median:10,.0f} pairs/s", flush=True)
    base = rows[0][2] if rows else float("nan")
    print(f"HEADLINE concurrent runs trainer={args.trainer} {args.aligner}: " +
          ", ".join(f"N={n} {agg:,.0f} pairs/s ({agg / base:.1f}x)" for n, _, agg in rows))  # fmt: skip


if __name__ == "__main__":
    main()
