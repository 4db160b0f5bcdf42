"""Per-call latency and throughput of a trained model on each inference backend, in one sitting.

    python benchmarks/bench_inference.py --run <run dir or model folder> --pairs <file of pairs>
        [--backends torch,onnx,onnx-int8] [--calls 300] [--busy 0] [--threads 0]

For each backend (torch: PyTorch eager in the run's dtype; onnx: ONNX Runtime float32; onnx-int8: ONNX Runtime
with int8 weights) it times, through `Matcher` as a user calls it:

- `rank` of 10 candidates: one call per question (its first 10 candidates, its list cycled when shorter), p50 and
  p99 milliseconds a call and pairs/s;
- `predict` of one pair: p50 and p99 milliseconds a call;
- `predict` of every pair in chunks of 256 (what `matching-predict` does): pairs/s;
- the answers' largest difference from the torch backend's logits, and the share of questions whose best
  candidate changes.

`--busy N` starts N processes that keep a core busy each (a loaded machine, as when other jobs run beside a
server), `--threads` fixes the intra-op threads (0: chosen per call, matching.inference.threads). Pairs: any file
`matching-predict` reads, with `--columns a,b,group` naming its columns (e.g. WikiQA's dev file:
`--pairs WikiQA-dev.tsv.gz --columns Question,Sentence,QuestionID`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matching import Matcher  # noqa: E402
from matching.data.tables import read_new_pairs  # noqa: E402
from matching.inference.threads import cores  # noqa: E402

BACKENDS = {"torch": {"backend": "torch"}, "onnx": {"backend": "onnx"}, "onnx-int8": {"quantize": "int8"}}


def spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def timed_calls(call, items: list, repeats: int = 1) -> list[float]:
    times = []
    for _ in range(repeats):
        for item in items:
            start = time.perf_counter()
            call(item)
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run directory or any model folder Matcher.load takes")
    parser.add_argument("--pairs", type=Path, required=True)
    parser.add_argument("--columns", default=None, help="a,b,group: the pairs file's column names")
    parser.add_argument("--backends", default="torch,onnx,onnx-int8")
    parser.add_argument("--calls", type=int, default=300, help="rank calls (questions, cycled) and 1-pair calls")
    parser.add_argument("--busy", type=int, default=0, help="processes keeping a core busy beside the benchmark")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: chosen per call)")
    parser.add_argument("--device", default="cpu", help="the torch backend's device: cpu or cuda (ONNX: the CPU)")
    args = parser.parse_args()

    named = dict(zip(("a", "b", "group"), args.columns.split(","), strict=False)) if args.columns else None
    pairs = list(read_new_pairs(args.pairs, named=named))
    groups: dict[str, list] = {}
    for p in pairs:
        groups.setdefault(p.group or p.a, []).append(p)
    questions = [(ps[0].a, [(ps * 10)[i].b for i in range(10)]) for ps in groups.values()]
    rank_calls = (questions * (args.calls // len(questions) + 1))[: args.calls]
    one_calls = [(p.a, p.b) for p in (pairs * (args.calls // len(pairs) + 1))[: args.calls]]
    texts = [(p.a, p.b) for p in pairs]

    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    for process in busy:
        process.start()
    print(f"model: {args.run}; {len(pairs):,} pairs of {len(questions)} questions from {args.pairs.name}; "
          f"{cores()} cores, {args.busy} busy processes beside; threads={args.threads or 'per call'}")  # fmt: skip
    rows, reference, best = [], None, None
    try:
        for name in args.backends.split(","):
            device = {"device": args.device} if name == "torch" else {}
            matcher = Matcher.load(args.run, threads=args.threads, **BACKENDS[name], **device)
            matcher.rank(*rank_calls[0])  # warm-up: the first call sets up the thread pool and the session
            matcher.predict(one_calls[0])
            rank_times = timed_calls(lambda q, m=matcher: m.rank(*q), rank_calls)
            one_times = timed_calls(lambda pair, m=matcher: m.predict(pair), one_calls)
            start = time.perf_counter()
            logits = np.concatenate([matcher.logits(texts[i : i + 256]) for i in range(0, len(texts), 256)])
            batch_rate = len(texts) / (time.perf_counter() - start)
            firsts = [max(range(len(ps)), key=lambda i, ps=ps: ps[i]) for ps in _scores_by_group(logits, pairs)]
            if reference is None:
                reference, best = logits, firsts
            difference = float(np.abs(logits - reference).max())
            changed = float(np.mean([a != b for a, b in zip(firsts, best, strict=True)]))
            rank50, one50 = statistics.median(rank_times), statistics.median(one_times)
            where = f", {args.device}" if name == "torch" and args.device != "cpu" else ""
            rows.append((f"{name} ({matcher.dtype}{where})", rank50, percentile(rank_times, 99), 10 / rank50,
                         one50, percentile(one_times, 99), batch_rate, difference, changed))  # fmt: skip
    finally:
        stop.set()
        for process in busy:
            process.join()
    print(
        "\n| backend | rank 10: p50 ms | p99 ms | pairs/s | predict 1: p50 ms | p99 ms | predict all: pairs/s | "
        "largest logit difference from torch | best candidate changed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r50, r99, rate, o50, o99, batch, diff, changed in rows:
        print(f"| {name} | {r50 * 1e3:.2f} | {r99 * 1e3:.2f} | {rate:,.0f} | {o50 * 1e3:.2f} | {o99 * 1e3:.2f} | "
              f"{batch:,.0f} | {diff:.1e} | {changed:.1%} |")  # fmt: skip


def _scores_by_group(logits: np.ndarray, pairs: list) -> list[list[float]]:
    by_group: dict[str, list[float]] = {}
    for row, p in zip(logits, pairs, strict=True):
        by_group.setdefault(p.group or p.a, []).append(float(row[-1] - row[0]))
    return list(by_group.values())


if __name__ == "__main__":
    main()
