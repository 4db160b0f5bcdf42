"""The model side of `matching-serve`: a loaded run answering jobs (`Worker`) and its micro-batcher (`Batcher`), both in
the serving process.

The HTTP front (matching/serving/http.py) hands each checked request to the run's `Batcher`, as a typed query
(`ClassifyQuery`, `RankQuery`, `RerankQuery`, `AlignQuery`), and awaits its answer. The batcher is an asyncio task:
it waits for a job, takes every job already queued (those that arrived while its previous batch ran) and, for
`batch_timeout` seconds, more, up to `max_batch_size` jobs, and runs the batch in the run's one model thread
(PyTorch and ONNX Runtime release the GIL while they compute, so the event loop goes on reading and answering requests
meanwhile). Each job's pairs are prepared once by the run's text preparation (`Matcher.prepare`:
matching.data.preparation), which gives both the checks (an empty text, a text over `limits.max_text_tokens`, counted
by the run's own tokenizer) and the model's inputs. The pairs of a batch's /classify and /rank jobs run through one
`Matcher.logits_of` call, which cuts them into model batches within the run's memory budget (`data.batch_tokens`,
`data.batch_cells`); /align jobs run one pair at a time. A job answers for itself: one refused, or one whose
preparation fails, never fails the others of its batch, and a batch whose forward pass fails is scored again job by
job, so that only the job that causes it gets the 500.

No pipe, no protocol of our own between the front and the model: an answer of any size is a Python object handed to
a future. More cores are used by more server processes (`workers=N`, each with its own model:
matching/serving/server.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, NamedTuple

from matching.data.preparation import PreparedPairs
from matching.errors import RunError
from matching.serving.answers import (
    BilledUnits,
    ClassifyAnswer,
    RankAnswer,
    RerankAnswer,
    RerankMeta,
    RerankResult,
    RerankUsage,
)

if TYPE_CHECKING:
    from matching.matcher import Matcher


@dataclass(frozen=True)
class Limits:
    """What one request may hold (conf/serve.yaml `limits`)."""

    max_pairs: int = 256  # pairs in one /classify request
    max_candidates: int = 1000  # candidates in one /rank request
    max_text_tokens: int = 512  # tokens in one text, counted by the run's tokenizer
    max_request_bytes: int = 4_000_000  # the request body, counted while it is read
    max_header_bytes: int = 16_384  # a request's headers, names and values

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise RunError(f"limits.{name} must be a positive whole number, got {value!r}")


@dataclass(frozen=True)
class ClassifyQuery:
    """A /classify request as the worker answers it: each pair's two texts, read by the pair rule of files
    (matching.data.tables.pair_of_mapping)."""

    pairs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RankQuery:
    """A /rank request as the worker answers it: the query and its candidates, in the order given."""

    query: str
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class AlignQuery:
    """An /align request as the worker answers it: the one pair whose alignment matrices are asked for."""

    a: str
    b: str


@dataclass(frozen=True)
class RerankQuery:
    """A /rerank request as the worker answers it: the query, each document's text as scored (its `rank_fields`
    joined), what `return_documents` repeats of each (None: not asked), the best `top_n`, the model name to echo,
    the tokens a document is cut to (`max_tokens`: a client's `max_tokens_per_doc`; None: the server's
    limits.max_text_tokens), whether a longer document is cut (else refused, Jina's `truncation: false`) and whether
    `relevance_score` is the logit margin (Infinity's `raw_scores`) instead of P(match)."""

    query: str
    documents: tuple[str, ...]
    shown: tuple[dict | str, ...] | None
    top_n: int | None
    model: str
    max_tokens: int | None = None
    truncate: bool = True
    raw_scores: bool = False


#: What a job may ask, each kind of query with the endpoint's name it answers (the logs' and the messages' word).
Query = ClassifyQuery | RankQuery | RerankQuery | AlignQuery
KINDS: dict[type, str] = {ClassifyQuery: "classify", RankQuery: "rank", RerankQuery: "rerank", AlignQuery: "align"}


class Job(NamedTuple):
    """One request, as the front hands it to the worker: its typed `query` (which says what kind of request it is)
    and `received`, time.monotonic() when the front took it."""

    id: int
    query: Query
    received: float

    @property
    def kind(self) -> str:
        """ "classify", "rank", "rerank" or "align"."""
        return KINDS[type(self.query)]


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker answers with its loaded run: what a request may hold, its share of the cores, how long a job may
    wait, and the candidates' states its run reads."""

    limits: Limits
    threads: int  # intra-op threads of every forward pass (0: chosen per call, at most `cap`)
    cap: int  # threads a call may use at most: the cores shared among the runs and server processes
    timeout: float  # seconds a job may wait in the queue before it is answered 504
    index: str | None = None  # a folder of candidates' states (Matcher.index) that /rank and /classify read


class Rejected(NamedTuple):
    """A job the worker refuses: it is answered with its own status while the rest of its batch runs."""

    status: int
    message: str


def error_body(status: int, message: str) -> bytes:
    """The JSON body of every error answer: `{"error": <what was wrong and what to do>, "status": <code>}`."""
    return json.dumps({"error": message, "status": status}, ensure_ascii=False).encode()


log = logging.getLogger(__name__)

#: What a client is told when our code fails on its request (the traceback goes to the server's log).
BUG = "the model failed on this request ({}); this is a bug in matching: please report it with the server's log"


class Worker:
    """A loaded run (`matcher`, loaded once by the server) answering jobs with its `settings`, in the thread its
    `Batcher` runs it in (tests may call it directly)."""

    def __init__(self, matcher: Matcher, settings: WorkerSettings):
        self.settings, self.limits = settings, settings.limits
        self.matcher = matcher
        matcher.set_threads(settings.threads, settings.cap)  # the worker's share of the cores
        if settings.index:
            matcher.use_index(settings.index)  # a missing or stale index is refused here, before anything listens
        # A word outside the vocabulary has no trained vector: it hashes to one of the OOV buckets' random vectors
        # (unless the model reads every word, as an encoder does: then none is marked).
        self.marks_unknown = not matcher.reads_every_word

    # -- checks --------------------------------------------------------------------------------------------------
    def check_texts(self, fields: list[str], counts: list[int], cut_from: int | None = None) -> Rejected | None:
        """Each text (its field name, its token count by the run's own tokenizer) must have at least one token
        and at most limits.max_text_tokens; the texts from index `cut_from` on (a rerank request's documents) may be
        longer: they are cut (`truncated_documents`)."""
        for i, (field, count) in enumerate(zip(fields, counts, strict=True)):
            if count == 0:
                return Rejected(422, f"{field} is empty (no tokens); give a text with at least one word")
            if count > self.limits.max_text_tokens and (cut_from is None or i < cut_from):
                return Rejected(
                    413,
                    f"{field} has {count} tokens, over this server's limit of {self.limits.max_text_tokens} "
                    f"(limits.max_text_tokens); shorten the text",
                )
        return None

    def prepare(self, job: Job) -> PreparedPairs | Rejected:
        """The job's pairs, prepared once (`Matcher.prepare`) for both the checks and the model, or why the
        job is refused."""
        from matching.data.pairs import Pair

        query = job.query
        if isinstance(query, ClassifyQuery):
            pairs = [Pair(a, b, "", None, i + 1) for i, (a, b) in enumerate(query.pairs)]
            fields = [f"pairs[{i}].{side}" for i in range(len(pairs)) for side in "ab"]
        elif isinstance(query, (RankQuery, RerankQuery)):
            candidates = query.candidates if isinstance(query, RankQuery) else query.documents
            pairs = [Pair(query.query, c, "", None, i) for i, c in enumerate(candidates)]
            listed = "candidates" if isinstance(query, RankQuery) else "documents"
            fields = ["query", *(f"{listed}[{i}]" for i in range(len(pairs)))]
        else:
            if not self.matcher.can_align:
                return Rejected(501, f"this server runs the model on {self.matcher.backend}, whose graph "
                                     "returns the logits only: /align needs the PyTorch model (serve with "
                                     "backend=torch)")  # fmt: skip
            pairs, fields = [Pair(query.a, query.b, "", None, 1)], ["a", "b"]
        prepared = self.matcher.prepare(pairs)
        counts = prepared.tokens.ravel().tolist()  # a0, b0, a1, b1, ...
        if isinstance(query, (RankQuery, RerankQuery)):  # the query once, then each candidate
            counts = [counts[0], *counts[1::2]]
        if not isinstance(query, RerankQuery):
            return self.check_texts(fields, counts) or prepared
        return self.check_texts(fields, counts, cut_from=1 if query.truncate else None) or prepared.with_second_cut(
            self.document_tokens(query)
        )

    def document_tokens(self, rerank: RerankQuery) -> int:
        """The tokens a rerank request's document is cut to: the client's max_tokens_per_doc, at most the server's
        limits.max_text_tokens."""
        return min(rerank.max_tokens or self.limits.max_text_tokens, self.limits.max_text_tokens)

    # -- answers -------------------------------------------------------------------------------------------------
    def answer(self, jobs: list[Job]) -> list[tuple[int, int, bytes]]:
        """(job id, HTTP status, JSON body) of each job, in their order. Whatever fails answers for its own job."""
        now = time.monotonic()
        work: list[PreparedPairs | Rejected] = []
        for job in jobs:
            waited = now - job.received
            if waited > self.settings.timeout:
                work.append(Rejected(504, f"the request waited {waited:.1f} s in the queue, over this server's "
                                          f"timeout of {self.settings.timeout:g} s (timeout=); the server is "
                                          f"overloaded: retry later, or serve with a larger timeout"))  # fmt: skip
                continue
            try:
                work.append(self.prepare(job))
            except Exception as err:  # noqa: BLE001 - ours, and this job's alone
                log.exception("preparing a %s request failed", job.kind)
                work.append(_bug(err))
        batched = [i for i, (job, w) in enumerate(zip(jobs, work, strict=True))
                   if not isinstance(job.query, AlignQuery) and not isinstance(w, Rejected)]  # fmt: skip
        scored = iter(self._score([work[i] for i in batched]))  # type: ignore[misc]
        out = []
        for job, w in zip(jobs, work, strict=True):
            result = w if isinstance(w, Rejected) else self._result(job, w, scored)
            if isinstance(result, Rejected):
                out.append((job.id, result.status, error_body(result.status, result.message)))
            else:
                out.append((job.id, 200, result))
        return out

    def _result(self, job: Job, prepared: PreparedPairs, scored: Iterator[list[dict] | Rejected]) -> bytes | Rejected:
        """One prepared job's JSON body (its answers the next of `scored`, unless it aligns), or why it failed."""
        answers = None if isinstance(job.query, AlignQuery) else next(scored)
        if isinstance(answers, Rejected):
            return answers
        try:
            if answers is None:
                return json.dumps(self.align(prepared), ensure_ascii=False).encode()
            return self._answer(job, answers, prepared).body()
        except Exception as err:  # noqa: BLE001 - ours, and this job's alone
            log.exception("answering a %s request failed", job.kind)
            return _bug(err)

    def _score(self, prepared: list[PreparedPairs]) -> list[list[dict] | Rejected]:
        """Each prepared job's answers, from one forward pass over them all; if it fails, job by job, so that only
        a job that causes a failure gets it."""
        if not prepared:
            return []
        try:
            answers = self.matcher.answers(self.matcher.logits_of(PreparedPairs.join(prepared), "request"))
        except Exception:  # noqa: BLE001 - scored again one by one below, each failure its own job's
            return [self._score_alone(p) for p in prepared]
        ends = itertools.accumulate(len(p) for p in prepared)
        return [answers[end - len(p) : end] for p, end in zip(prepared, ends, strict=True)]

    def _score_alone(self, prepared: PreparedPairs) -> list[dict] | Rejected:
        try:
            return self.matcher.answers(self.matcher.logits_of(prepared, "request"))
        except Exception as err:  # noqa: BLE001 - ours, and this job's alone
            log.exception("scoring a request failed")
            return _bug(err)

    def _answer(
        self, job: Job, answers: list[dict], prepared: PreparedPairs
    ) -> ClassifyAnswer | RankAnswer | RerankAnswer:
        """The answer of a classify, rank or rerank job, built as the model GET /openapi.json publishes
        (matching.serving.answers): the last in the shape rerank clients read (Cohere's, Jina's, Infinity's, with
        Cohere's `meta` and Jina's and Infinity's `usage`: the tokens the model read, the query counted with each
        document)."""
        from matching.inference.predictor import ranking

        if isinstance(job.query, ClassifyQuery):
            return ClassifyAnswer(predictions=answers)
        if isinstance(job.query, RankQuery):
            return RankAnswer(ranking=ranking(job.query.candidates, answers))
        rerank: RerankQuery = job.query
        score = "score" if rerank.raw_scores else "p_match"
        results = [RerankResult(index=r["index"], relevance_score=r[score],
                                **({"document": rerank.shown[r["index"]]} if rerank.shown is not None else {}))
                   for r in ranking(rerank.documents, answers)[: rerank.top_n]]  # fmt: skip
        tokens = int(prepared.sides().sum())
        cut = prepared.second_cut()
        said: dict = {}  # the documents cut, if any
        if cut:
            limit = self.document_tokens(rerank)
            many = len(cut) > 1
            said = {"truncated": cut, "warnings": [
                f"{len(cut)} document{'s' if many else ''} (documents{cut}) had more than {limit} tokens and "
                f"{'were' if many else 'was'} cut to the first {limit} before scoring (max_tokens_per_doc, or the "
                "server's limits.max_text_tokens)"]}  # fmt: skip
        meta = RerankMeta(billed_units=BilledUnits(search_units=1), **said)
        return RerankAnswer(id=str(uuid.uuid4()), model=rerank.model, results=results, meta=meta,
                            usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens))  # fmt: skip

    def align(self, prepared: PreparedPairs) -> dict:
        """`Matcher.align` as JSON, with what a reader of the matrices needs: which tokens are unknown words, what
        each matrix is (`matrix_title`) and the range its values can take (None where not known)."""
        from matching.model.matrices import matrix_title, value_range

        aligned = self.matcher.alignment(prepared)
        index, cfg = self.matcher.vocab.index, self.matcher.config
        aligned["unknown"] = {side: [self.marks_unknown and t != "<null>" and t not in index
                                     for t in aligned[f"{side}_tokens"]] for side in "ab"}  # fmt: skip
        aligned["about"] = {name: {"caption": matrix_title(name, cfg), "range": value_range(name, cfg)}
                            for name in aligned["matrices"]}  # fmt: skip
        aligned["matrices"] = {name: m.astype("float64").round(6).tolist() for name, m in aligned["matrices"].items()}
        return aligned


def _bug(err: Exception) -> Rejected:
    """A failure of our code on one job: a 500 that says so (its traceback is in the server's log)."""
    return Rejected(500, BUG.format(f"{type(err).__name__}: {err}"))


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

    async def ask(self, query: Query) -> tuple[int, bytes]:
        """The (HTTP status, JSON body) of `query`, once its batch has run."""
        assert self.queue is not None, "the batcher was not started"
        future = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((Job(next(self.ids), query, time.monotonic()), future))
        return await future

    async def _take(self) -> list:
        assert self.queue is not None
        batch = [await self.queue.get()]
        end = time.monotonic() + self.batch_timeout
        while len(batch) < self.max_batch_size:
            try:
                batch.append(self.queue.get_nowait())
            except asyncio.QueueEmpty:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
        return batch

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
                failed = _bug(err)
                answers = [(job.id, failed.status, error_body(failed.status, failed.message)) for job in jobs]
            for (_, future), (_, status, body) in zip(batch, answers, strict=True):
                if not future.done():
                    future.set_result((status, body))
