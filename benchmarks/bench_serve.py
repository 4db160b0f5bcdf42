"""Throughput and latency of `matching-serve` under load, beside the in-process throughput of the same model.

    python benchmarks/bench_serve.py --ckpt <run dir>/checkpoints/best.ckpt [--pairs pairs.tsv]
        [--requests 2000] [--levels 1,8,32] [server overrides, e.g. max_batch_size=32 threads=1]

Starts the server on 127.0.0.1 (a free port), then for each concurrency level sends a fixed number of single-pair
POST /classify requests from that many concurrent clients (asyncio keep-alive connections, one process) and
prints pairs/s, the p50/p95/p99 latency and the CPU time the server's processes spent per request (Linux: from
/proc; on a shared, busy machine a steadier figure than the rates, which depend on the cores the others leave).
Every answer is checked against the in-process prediction of its own pair: failed and mismatched answers are
counted, and the largest difference is printed. A pair's answer moves a little with the batch it is computed in
(the server's batches are the requests that arrive together), so the check allows the run's dtype its
`matching.model.precision.answer_tolerance`: in fp32 a classification model's probabilities to 1e-5 and a ranking
model's (which /classify answers with a score and P(match)) P(match) to 1e-5 and score, a logit margin, to 1e-4;
in bf16 (`dtype=auto` on a CPU with AMX or AVX512-BF16) probabilities to 4e-3 and scores to 4e-2.
The in-process figure runs the same pairs through Predictor.logits (matching.inference) in this process, on the
server's backend, in batches of the server's max_batch_size and, as `predict` does, of 256.

Pairs: `--pairs` (a TSV or JSON Lines file that `matching-predict` reads, e.g. WikiQA dev question<TAB>sentence),
else pairs of WikiQA's lengths (questions 4-12 words, answers 10-40) drawn from the run's vocabulary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matching.cli import compose_config  # noqa: E402
from matching.data.pairs import Pair  # noqa: E402
from matching.data.tables import read_new_pairs  # noqa: E402
from matching.inference import load  # noqa: E402
from matching.model import precision  # noqa: E402
from matching.serving.server import serving  # noqa: E402


def load_pairs(path: Path | None, vocab_words: list[str], count: int, seed: int = 0) -> list[Pair]:
    if path is not None:
        pairs = list(read_new_pairs(path))
        return (pairs * (count // len(pairs) + 1))[:count]
    rng = random.Random(seed)
    words = [w for w in vocab_words if w.isalpha()][:20000]

    def text(low: int, high: int) -> str:
        return " ".join(rng.choices(words, k=rng.randint(low, high)))

    return [Pair(text(4, 12), text(10, 40), "") for _ in range(count)]


def in_process(run, pairs: list[Pair], batch: int, repeats: int = 3) -> tuple[float, float]:
    """Median pairs/s of Predictor.logits over `pairs` in chunks of `batch` pairs, and the median CPU seconds per
    pair it took (this process, all its threads)."""
    rates, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(pairs), batch):
            run.logits(pairs[i : i + batch])
        rates.append(len(pairs) / (time.perf_counter() - start))
        cpu.append((time.process_time() - start_cpu) / len(pairs))
    return statistics.median(rates), statistics.median(cpu)


def server_processes(port: int) -> list[int]:
    """The processes of the server on `port` (Linux /proc): the `matching-serve ... port=<port>` process and every
    process of its session (serving() starts it in a session of its own; its workers stay in it). Empty elsewhere."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []

    def read(pid: Path, name: str) -> str:
        try:
            return (pid / name).read_text(errors="replace")
        except OSError:
            return ""

    pids = [p for p in proc.iterdir() if p.name.isdigit()]
    root = next((p for p in pids if "matching.serve" in read(p, "cmdline") and f"port={port}\0" in read(p, "cmdline")),
                None)  # fmt: skip
    if root is None:
        return []
    return [int(p.name) for p in pids if read(p, "stat").rsplit(")", 1)[-1].split()[3:4] == [root.name]]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (those still alive)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the answer: the load generator. httpx costs
    3.5-7 ms of CPU per request here, which on a 2-core machine takes a core from the server it measures; this
    costs about a tenth of that."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")  # fmt: skip
        self.writer.write(head.encode() + body)
        status_line, *headers = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        fields = dict(h.split(": ", 1) for h in headers if ": " in h)
        length = int(next(v for k, v in fields.items() if k.lower() == "content-length"))
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def answer_values(answer: dict, labels: list[str] | None) -> list[float]:
    """What is compared of one /classify answer: the probabilities in label order, or (P(match), score)."""
    return [answer["probs"][label] for label in labels] if labels else [answer["p_match"], answer["score"]]


async def drive(url: str, pairs: list[Pair], expected: torch.Tensor, labels: list[str] | None, concurrency: int,
                tolerance: torch.Tensor) -> dict:  # fmt: skip
    """`len(pairs)` single-pair POST /classify requests from `concurrency` clients, each on its own connection."""
    host, port = url.removeprefix("http://").split(":")
    bodies = [json.dumps({"pairs": [{"a": p.a, "b": p.b}]}).encode() for p in pairs]
    latencies: list[float] = []
    answers: dict[int, tuple[int, bytes]] = {}
    queue = iter(range(len(pairs)))

    async def client(connection: Connection) -> None:
        for i in queue:
            start = time.perf_counter()
            try:
                answers[i] = await connection.post("/classify", bodies[i])
            except (OSError, asyncio.IncompleteReadError, ValueError) as err:
                answers[i] = (0, repr(err).encode())
                connection.close()
                connection.writer = None
                continue
            latencies.append(time.perf_counter() - start)

    connections = [Connection(host, int(port)) for _ in range(concurrency)]
    await asyncio.gather(*(c.post("/classify", bodies[0]) for c in connections))  # connect and warm up
    processes = server_processes(int(port))
    start, start_cpu = time.perf_counter(), cpu_seconds(processes)
    await asyncio.gather(*(client(c) for c in connections))
    wall, cpu = time.perf_counter() - start, cpu_seconds(processes) - start_cpu
    for c in connections:
        c.close()

    failed = [i for i, (status, _) in answers.items() if status != 200]
    got = [answer_values(json.loads(answers[i][1])["predictions"][0], labels)
           for i in range(len(pairs)) if i not in failed]  # fmt: skip
    good = torch.tensor([i for i in range(len(pairs)) if i not in failed], dtype=torch.long)
    difference = (torch.tensor(got, dtype=torch.float64).view(-1, expected.shape[1]) - expected[good]).abs()
    mismatched = int((difference > tolerance).any(1).sum())
    largest = difference.max(0).values.tolist() if got else [0.0] * expected.shape[1]
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {"rate": len(latencies) / wall, "p50": q[49], "p95": q[94], "p99": q[98], "failed": len(failed),
            "mismatched": mismatched, "largest": largest,
            "cpu": cpu / len(pairs) if processes else float("nan")}  # fmt: skip


def difference_text(largest: list[float], kind: str) -> str:
    """The largest differences from the in-process answers: a probability's, or P(match)'s and the score's."""
    if kind == "rank":
        return f"P(match) {largest[0]:.1e}, score {largest[1]:.1e}"
    return f"{max(largest):.1e}"


def checked_dtype(served) -> tuple[str, precision.Tolerance]:
    """The dtype whose `answer_tolerance` the answers are checked with: the looser of this process's (the
    in-process prediction, on the CPU) and the server's (on `accelerator`), as `dtype=auto` resolves on each."""
    device = served.accelerator
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = {precision.resolve(served.dtype, "cpu"), precision.resolve(served.dtype, device)}
    name = "bf16" if torch.bfloat16 in dtypes else "fp32"
    return name, precision.answer_tolerance(precision.DTYPES[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--pairs", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level")
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("overrides", nargs="*", help="server overrides (conf/serve.yaml keys)")
    args = parser.parse_args()
    levels = [int(c) for c in args.levels.split(",")]
    served = compose_config("serve", [f"ckpt={args.ckpt}", *args.overrides])  # the server's own settings
    batch = int(served.max_batch_size)

    # The model the server's workers load: the same backend, with the overrides they get (data.batch_tokens=...)
    run = load(args.ckpt, backend=str(served.backend), quantize=served.quantize, config=served)
    pairs = load_pairs(args.pairs, run.vocab.words, args.requests)
    logits = torch.from_numpy(run.logits(pairs)).double()
    dtype, allowed = checked_dtype(served)
    if run.kind == "rank":  # /classify answers a ranking model with P(match) and the score (the logit margin)
        label_names = None
        expected = torch.stack([torch.softmax(logits, dim=-1)[:, 1], logits[:, 1] - logits[:, 0]], dim=1)
        tolerance = torch.tensor([allowed.probability, allowed.score], dtype=torch.float64)
    else:
        label_names = run.labels
        expected = torch.softmax(logits, dim=-1)
        tolerance = torch.full((len(label_names),), allowed.probability, dtype=torch.float64)
    lengths = [len(run.text.tokenizer(p.a)) + len(run.text.tokenizer(p.b)) for p in pairs]
    print(f"model: {args.ckpt} ({run.task}, {len(run.vocab):,} words, {run.backend.name}); {len(pairs):,} "
          "single-pair requests")  # fmt: skip
    print(f"pairs: {statistics.mean(lengths):.1f} tokens on average; threads: {int(served.threads) or 'per call'}")
    print(
        f"dtype {precision.arithmetic_summary(served.dtype)}; answers checked against in-process within {dtype}'s "
        f"{'P(match)' if run.kind == 'rank' else 'probabilities'} ±{allowed.probability:g}"
        f"{f' and score ±{allowed.score:g}' if run.kind == 'rank' else ''} (matching.model.precision.answer_tolerance)"
    )
    # In this process as a user calls it (threads chosen per call, or the server's threads=): the server's ratio below
    # is taken against the figure in batches of max_batch_size
    run.backend.set_threads(int(served.threads))
    inproc = {b: in_process(run, pairs, b) for b in (batch, 256)}
    print(f"in-process Predictor.logits on {run.backend.name}: {inproc[batch][0]:,.0f} pairs/s in batches of "
          f"{batch} ({inproc[batch][1] * 1e3:.3f} ms of CPU per pair), {inproc[256][0]:,.0f} pairs/s in batches of "
          "256")  # fmt: skip
    inproc = {b: rate for b, (rate, _) in inproc.items()}
    run_kind = run.kind
    del run

    with serving(args.ckpt, args.overrides) as url:
        rows = [(c, asyncio.run(drive(url, pairs, expected, label_names, c, tolerance))) for c in levels]
    head = (f"| concurrency | pairs/s | vs in-process (batch {batch}) | p50 ms | p95 ms | p99 ms | server CPU ms per "
            f"request | failed | mismatched | largest difference |")  # fmt: skip
    print(f"\n{head}")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c, r in rows:
        print(f"| {c} | {r['rate']:,.0f} | {r['rate'] / inproc[batch]:.0%} | {r['p50'] * 1e3:.1f} | "
              f"{r['p95'] * 1e3:.1f} | {r['p99'] * 1e3:.1f} | {r['cpu'] * 1e3:.3f} | {r['failed']} | "
              f"{r['mismatched']} | {difference_text(r['largest'], run_kind)} |")  # fmt: skip


if __name__ == "__main__":
    main()
