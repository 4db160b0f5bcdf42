"""The largest legal requests under load: `matching-serve` answering 256-pair /classify and 512 x 512-token /align
requests from 32 concurrent clients for minutes, while /health is asked once a second.

    python benchmarks/bench_serve_large.py --ckpt <run dir> [--minutes 3] [--concurrency 32] [server overrides]

Prints, for each kind of request, how many were answered with which status and their median and largest latency; the
/health answers (every one must be 200); and the server's memory (the resident set of its processes, Linux) at the
start and the end. Texts are drawn from the run's vocabulary: /classify pairs of 6 and 20 words, /align two texts of
`limits.max_text_tokens` words each (the run's data.max_length: 512 for a run at the defaults). Exit status 1 when
any request failed or /health ever answered otherwise than 200.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_serve import server_processes  # noqa: E402

from matching.inference import load  # noqa: E402
from matching.serving.server import serving  # noqa: E402


def resident_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


async def soak(url: str, words: list[str], tokens: int, minutes: float, concurrency: int) -> tuple[dict, Counter]:
    import httpx

    rng = random.Random(0)

    def text(n: int) -> str:
        return " ".join(rng.choices(words, k=n))

    classify = {"pairs": [{"a": text(6), "b": text(20)} for _ in range(256)]}
    align = {"a": text(tokens), "b": text(tokens)}
    latencies: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, Counter] = defaultdict(Counter)
    health: Counter = Counter()
    end = time.monotonic() + 60 * minutes

    async def client(i: int, http: httpx.AsyncClient) -> None:
        kind, body = ("align", align) if i % 4 == 0 else ("classify", classify)
        while time.monotonic() < end:
            start = time.perf_counter()
            try:
                answer = await http.post(f"{url}/{kind}", json=body)
                statuses[kind][answer.status_code] += 1
            except httpx.HTTPError as err:
                statuses[kind][type(err).__name__] += 1
            latencies[kind].append(time.perf_counter() - start)

    async def watch(http: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            try:
                health[(await http.get(f"{url}/health", timeout=10)).status_code] += 1
            except httpx.HTTPError as err:
                health[type(err).__name__] += 1
            await asyncio.sleep(1.0)

    limits = httpx.Limits(max_connections=concurrency + 1)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        await asyncio.gather(watch(http), *(client(i, http) for i in range(concurrency)))
    summary = {kind: (statuses[kind], statistics.median(latencies[kind]), max(latencies[kind])) for kind in statuses}
    return summary, health


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("overrides", nargs="*", help="server overrides (conf/serve.yaml keys)")
    args = parser.parse_args()
    predictor = load(args.ckpt)
    tokens = int(predictor.max_length or 512)
    words = [w for w in predictor.vocab.words if w.isalpha()][:20000]
    del predictor
    with serving(args.ckpt, args.overrides) as url:
        port = int(url.rsplit(":", 1)[1])
        pids = server_processes(port)
        before = resident_mib(pids)
        summary, health = asyncio.run(soak(url, words, tokens, args.minutes, args.concurrency))
        after = resident_mib(server_processes(port))
    print(f"{args.minutes:g} minutes, {args.concurrency} clients (1 in 4 /align of {tokens} x {tokens} tokens, the "
          f"others /classify of 256 pairs); server overrides: {' '.join(args.overrides) or 'none'}")  # fmt: skip
    failed = False
    for kind, (statuses, median, worst) in sorted(summary.items()):
        print(f"{kind}: {dict(statuses)}; latency median {median:.2f} s, largest {worst:.2f} s")
        failed |= set(statuses) != {200}
    print(f"/health, once a second: {dict(health)}")
    print(f"server memory (resident, all its processes): {before:.0f} MiB at the start, {after:.0f} MiB at the end")
    failed |= set(health) != {200}
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
