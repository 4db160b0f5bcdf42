"""The model side of `matching-serve`: a loaded run answering jobs (`Worker`) and its micro-batcher (`Batcher`), both in
the serving process. It keeps the queue, the futures and the timeouts; the answering is the engine's
(`Matcher.answer`: matching.inference.answering).

The HTTP front (matching/serving/http.py) hands each checked request to the run's `Batcher` as a typed query
(matching.inference.queries) and awaits its typed answer, which it renders. The batcher is an asyncio task: it waits
for a job, takes every job already queued (those that arrived while its previous batch ran), gathers those the front
is reading at that moment (see `GATHER_TURNS`) and, for `batch_timeout` seconds, more, up to `max_batch_size` jobs,
and runs the batch in the run's one model thread (PyTorch and ONNX Runtime release the GIL while they compute, so the
event loop goes on reading and answering requests meanwhile): the queries of a batch are answered by one
`Matcher.answer` call, which scores their pairs in one pass. A job answers for itself: one refused, or one that fails,
never fails the others of its batch.

No pipe, no protocol of our own between the front and the model: an answer of any size is a Python object handed to
a future. More cores are used by more server processes (`workers=N`, each with its own model:
matching/serving/server.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from matching.inference.queries import Answer, Limits, Query, Refused

if TYPE_CHECKING:
    from matching.matcher import Matcher

log = logging.getLogger(__name__)

#: Turns of the event loop a batch waits for more jobs after its first, for as long as each turn brings one (it
#: stops at the first `GATHER_TURNS` turns in a row that bring none). Clients answered by one batch come back
#: together, their requests a few hundred microseconds apart: without these turns the first alone made a batch of
#: one while the others queued behind it (batches of 1, n-1, 1, n-1, ...: benchmarks/bench_serve.py at 32 clients,
#: docs/how-to/serving.md). A turn costs microseconds, so a lone client's request waits no longer than before.
GATHER_TURNS = 2


class Job(NamedTuple):
    """One request, as the front hands it to the worker: its typed `query` and `received`, time.monotonic() when the
    front took it."""

    id: int
    query: Query
    received: float


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker answers with its loaded run: what a request may hold, its share of the cores, how long a job may
    wait, and the candidates' states its run reads."""

    limits: Limits
    threads: int  # intra-op threads of every forward pass (0: chosen per call, at most `cap`)
    cap: int  # threads a call may use at most: the cores shared among the runs and server processes
    timeout: float  # seconds a job may wait in the queue before it is answered 504
    index: str | None = None  # a folder of candidates' states (Matcher.index) that /rank and /classify read


class Worker:
    """A loaded run (`matcher`, loaded once by the server) answering jobs with its `settings`, in the thread its
    `Batcher` runs it in (tests may call it directly)."""

    def __init__(self, matcher: Matcher, settings: WorkerSettings):
        self.settings, self.matcher = settings, matcher
        matcher.set_threads(settings.threads, settings.cap)  # the worker's share of the cores
        if settings.index:
            matcher.use_index(settings.index)  # a missing or stale index is refused here, before anything listens

    def answer(self, jobs: list[Job]) -> list[tuple[int, Answer | Refused]]:
        """(job id, its answer or why it is refused) of each job, in their order: one that waited past the timeout is
        refused; the others are answered together. Whatever fails answers for its own job (its traceback logged)."""
        now, timeout = time.monotonic(), self.settings.timeout
        late = {job.id: Refused("timeout", f"the request waited {now - job.received:.1f} s in the queue, over this "
                                           f"server's timeout of {timeout:g} s (timeout=); the server is overloaded: "
                                           "retry later, or serve with a larger timeout")
                for job in jobs if now - job.received > timeout}  # fmt: skip
        asked = [job for job in jobs if job.id not in late]
        answers = dict(zip((j.id for j in asked), self.matcher.answer([j.query for j in asked], self.settings.limits),
                           strict=True))  # fmt: skip
        for answer in answers.values():
            if isinstance(answer, Refused) and answer.error is not None:
                log.error("answering a request failed", exc_info=answer.error)
        return [(job.id, late.get(job.id) or answers[job.id]) for job in jobs]


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def watch_parent(parent: int) -> None:
    """End this process when `parent` is gone (a thread polls once a second): a server process of `workers=N`
    whose supervisor was killed (kill -9, the OOM killer) does not live on holding the port."""
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


class Batcher:
    """The micro-batcher of one run in the serving process: `ask` queues a job and awaits its (status, JSON body);
    one asyncio task takes the queued jobs in batches and runs each batch in the run's single model thread. It
    holds no state a failure could corrupt: an exception in a batch answers that batch's jobs (see `Worker.answer`,
    which already answers each job for itself), and the task goes on."""

    def __init__(self, worker: Worker, name: str, max_batch_size: int, batch_timeout: float):
        self.worker, self.name = worker, name
        self.max_batch_size, self.batch_timeout = max_batch_size, batch_timeout
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"matching-serve {name}")
        self.ids = itertools.count()

    def start(self) -> None:
        """Start the batching task in the running event loop (the app's lifespan)."""
        self.queue = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"batcher {self.name}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.thread.shutdown(wait=True, cancel_futures=True)

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    async def ask(self, query: Query) -> Answer | Refused:
        """The answer of `query` (or why it is refused), once its batch has run."""
        assert self.queue is not None, "the batcher was not started"
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((Job(next(self.ids), query, time.monotonic()), future))
        return await future

    async def _take(self) -> list:
        """The next batch: the first job to come, every job queued, those that come in the next turns of the event
        loop (`GATHER_TURNS`), then for `batch_timeout` seconds more, up to `max_batch_size` jobs."""
        assert self.queue is not None
        batch = [await self.queue.get()]
        self._drain(batch)
        quiet = 0
        while len(batch) < self.max_batch_size and quiet < GATHER_TURNS:
            await asyncio.sleep(0)  # one turn: the requests already on the sockets are read and reach the queue
            before = len(batch)
            self._drain(batch)
            quiet = 0 if len(batch) > before else quiet + 1
        end = time.monotonic() + self.batch_timeout
        while len(batch) < self.max_batch_size and (remaining := end - time.monotonic()) > 0:
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), remaining))
            except asyncio.TimeoutError:
                break
            self._drain(batch)
        return batch

    def _drain(self, batch: list) -> None:
        """Add the queued jobs to `batch`, up to `max_batch_size`."""
        assert self.queue is not None
        while len(batch) < self.max_batch_size and not self.queue.empty():
            batch.append(self.queue.get_nowait())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._take()
            batch = [(job, future) for job, future in batch if not future.done()]  # a client that left
            if not batch:
                continue
            jobs = [job for job, _ in batch]
            try:
                answers = await loop.run_in_executor(self.thread, self.worker.answer, jobs)
            except Exception as err:  # noqa: BLE001 - a bug of ours outside any one job: each job is told
                log.exception("a batch of run %s failed", self.name)
                answers = [(job.id, Refused("failed", f"{type(err).__name__}: {err}", err)) for job in jobs]
            for (_, future), (_, answer) in zip(batch, answers, strict=True):
                if not future.done():
                    future.set_result(answer)
