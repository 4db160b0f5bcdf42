"""How many intra-op threads one inference call uses.

More threads than free cores stall a small call in the thread pool: on a 2-core machine with two other busy
processes, a static model's 10-candidate `rank` fell from 1,847 pairs/s on one thread to ~50 on two. So a call
uses one thread unless it is big enough to share (its tokens, weighed by what a token costs the model), and never
more threads than the cores that were free over the last half second (the machine's idle time from /proc/stat plus
what this process used itself) nor more than its `cap` (a server's workers share the cores: cores // workers).
`threads=N` (N > 0) fixes the count instead.
"""

from __future__ import annotations

import os
import time

import numpy as np

#: Tokens of a call per thread worth using: below it, one thread is faster than waking a pool. PyTorch's OpenMP
#: pool costs a static model's small call more than it gives (and stalls it when the cores are busy); ONNX Runtime's
#: own pool gains from a second thread from a 10-candidate rank on (benchmarks/bench_inference.py,
#: docs/results/performance.md); an encoder's tokens are costly enough to share for either.
TOKENS_PER_THREAD = {"static": 4096, "onnx": 256, "contextual": 128}

_SAMPLE_SECONDS = 0.5


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _FreeCores:
    """Cores left idle by other processes, re-measured at most every half second."""

    def __init__(self) -> None:
        self.sample = self._read()
        self.free = self._from_load()

    @staticmethod
    def _read() -> tuple[float, float, float, float] | None:
        """(wall clock, machine's idle seconds, machine's busy seconds, this process's CPU seconds)."""
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [float(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        idle = (fields[3] + fields[4]) / tick  # idle + iowait
        busy = sum(fields[:8]) / tick - idle
        own = sum(os.times()[:2])
        return time.monotonic(), idle, busy, own

    @staticmethod
    def _from_load() -> int:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            return cores()
        return max(1, cores() - int(load + 0.5))

    def __call__(self) -> int:
        if self.sample is None:
            return self.free
        now = self._read()
        if now is None or now[0] - self.sample[0] < _SAMPLE_SECONDS:
            return self.free
        wall = now[0] - self.sample[0]
        idle, own = (now[1] - self.sample[1]) / wall, (now[3] - self.sample[3]) / wall
        self.free = max(1, min(cores(), int(idle + own + 0.5)))
        self.sample = now
        return self.free


free_cores = _FreeCores()


def call_tokens(sides: np.ndarray) -> int:
    """The padded tokens of one batch: pairs × (longest a + longest b)."""
    return int(len(sides) * (sides[:, 0].max() + sides[:, 1].max())) if len(sides) else 0


def thread_count(requested: int, tokens: int, kind: str = "static", cap: int | None = None) -> int:
    """Threads for a call of `tokens` padded tokens to a model of `kind` (static or contextual); `requested` > 0 is
    the user's fixed count; `cap`: at most this many (default: every core)."""
    if requested > 0:
        return requested
    limit = min(cap or cores(), cores())
    wanted = max(1, tokens // TOKENS_PER_THREAD[kind])
    return max(1, min(wanted, limit, free_cores()))
