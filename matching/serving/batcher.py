"""The model side of `matching-serve`: one worker process per served run, and its token-budget micro-batcher.

The HTTP front (matching/serving/http.py) puts each checked request on the worker's request queue as a `Job` and
awaits its answer. The worker sleeps on the queue until a job comes, then takes every job already queued (those
that arrived while its previous batch ran) and, for `batch_timeout` seconds, more, up to `max_batch_size` jobs.
Each job's pairs are prepared once by the run's text pipeline (matching.data.pipeline), which gives both the checks
(an empty text, a text over `limits.max_text_tokens`, counted by the run's own tokenizer) and the model's inputs.
The pairs of a batch's /classify and /rank jobs run through one `Predictor.logits_of` call (matching.inference),
which cuts them into model batches within the run's memory budget (`data.batch_tokens`, `data.batch_cells`), so one
large request cannot exhaust memory; /align jobs run one pair at a time. A refused job answers for itself and
never fails the others of its batch. Answers leave the worker as finished HTTP bodies (JSON bytes), one message
per batch on a pipe that the front reads in its event loop.

Only the standard library's multiprocessing (spawn: no state of the front is inherited) and our own code: the
worker ends on a `None` job (the clean stop) and also when the process that started it is gone (killed with
SIGKILL), so that no orphan lives on.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass
from queue import Empty
from typing import Any, NamedTuple

from matching.data.preparation import PreparedPairs
from matching.errors import RunError


@dataclass(frozen=True)
class Limits:
    """What one request may hold (conf/serve.yaml `limits`)."""

    max_pairs: int = 256  # pairs in one /classify request
    max_candidates: int = 1000  # candidates in one /rank request
    max_text_tokens: int = 512  # tokens in one text, counted by the run's tokenizer
    max_request_bytes: int = 4_000_000  # the request body

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise RunError(f"limits.{name} must be a positive whole number, got {value!r}")


class Job(NamedTuple):
    """One request, as the front hands it to the worker. `texts`: /classify ((a, b), ...); /rank (query,
    (candidate, ...)); /align (a, b). `received`: time.monotonic() when the front took it (the clock is the
    machine's, the same in every process)."""

    id: int
    kind: str  # "classify", "rank" or "align"
    texts: tuple
    received: float


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process needs to load its run and batch its requests (all picklable)."""

    ckpt: str
    config: dict  # the run's config, resolved (the saved one with the command line's overrides)
    limits: Limits
    threads: int  # intra-op threads of every forward pass (0: chosen per call, at most `cap`)
    cap: int  # threads a call may use at most: the cores shared among the workers
    max_batch_size: int  # jobs per batch
    batch_timeout: float  # seconds a batch waits for more jobs
    timeout: float  # seconds a job may wait in the queue before it is answered 504
    device: str  # cpu or cuda
    backend: str = "auto"  # torch | onnx | auto (matching.inference.load)
    quantize: str | None = None  # int8 (ONNX Runtime)
    index: str | None = None  # a folder of candidates' states (Matcher.index) that /rank and /classify read
    encoder_backend: str = "torch"  # onnx: a contextual model's frozen encoder on ONNX Runtime for new text


class Rejected(NamedTuple):
    """A job the worker refuses: it is answered with its own status while the rest of its batch runs."""

    status: int
    message: str


def error_body(status: int, message: str) -> bytes:
    """The JSON body of every error answer: `{"error": <what was wrong and what to do>, "status": <code>}`."""
    return json.dumps({"error": message, "status": status}, ensure_ascii=False).encode()


class Worker:
    """A loaded run answering jobs (in the worker process; tests may build one in-process)."""

    def __init__(self, spec: WorkerSpec):
        from matching.inference import load
        from matching.matcher import Matcher

        self.spec, self.limits = spec, spec.limits
        config = spec.config if "task" in spec.config else None  # an exported ONNX folder has none to apply
        if config is not None:
            from omegaconf import OmegaConf

            config = OmegaConf.create(config)
        predictor = load(spec.ckpt, backend=spec.backend, quantize=spec.quantize, device=spec.device, config=config,
                         encoder_backend=spec.encoder_backend)  # fmt: skip
        predictor.backend.set_threads(spec.threads, spec.cap)  # the worker's share of the cores
        self.matcher = Matcher(predictor)
        if spec.index:
            self.matcher.use_index(spec.index)
        self.predictor = predictor
        # A word outside the vocabulary has no trained vector: it hashes to one of the OOV buckets' random vectors
        # (unless the model reads every word, as an encoder does: then none is marked).
        self.marks_unknown = not predictor.reads_every_word

    # -- checks --------------------------------------------------------------------------------------------------
    def check_texts(self, fields: list[str], counts: list[int]) -> Rejected | None:
        """Each text (its field name, its token count by the run's own tokenizer) must have at least one token
        and at most limits.max_text_tokens."""
        for field, count in zip(fields, counts, strict=True):
            if count == 0:
                return Rejected(422, f"{field} is empty (no tokens); give a text with at least one word")
            if count > self.limits.max_text_tokens:
                return Rejected(
                    413,
                    f"{field} has {count} tokens, over this server's limit of {self.limits.max_text_tokens} "
                    f"(limits.max_text_tokens); shorten the text",
                )
        return None

    def prepare(self, job: Job) -> PreparedPairs | Rejected:
        """The job's pairs, prepared once (matching.data.pipeline) for both the checks and the model, or why the
        job is refused."""
        from matching.data.pairs import Pair

        if job.kind == "classify":
            pairs = [Pair(a, b, "", None, i + 1) for i, (a, b) in enumerate(job.texts)]
            fields = [f"pairs[{i}].{side}" for i in range(len(pairs)) for side in "ab"]
        elif job.kind == "rank":
            query, candidates = job.texts
            pairs = [Pair(query, c, "", None, i) for i, c in enumerate(candidates)]
            fields = ["query", *(f"candidates[{i}]" for i in range(len(pairs)))]
        else:
            if not hasattr(self.predictor.backend, "alignment"):
                return Rejected(501, f"this server runs the model on {self.predictor.backend.name}, whose graph "
                                     "returns the logits only: /align needs the PyTorch model (serve with "
                                     "backend=torch)")  # fmt: skip
            pairs, fields = [Pair(*job.texts, "", None, 1)], ["a", "b"]
        prepared = self.predictor.prepare(pairs)
        counts = prepared.tokens.ravel().tolist()  # a0, b0, a1, b1, ...
        if job.kind == "rank":  # the query once, then each candidate
            counts = [counts[0], *counts[1::2]]
        return self.check_texts(fields, counts) or prepared

    # -- answers -------------------------------------------------------------------------------------------------
    def answer(self, jobs: list[Job]) -> list[tuple[int, int, bytes]]:
        """(job id, HTTP status, JSON body) of each job, in their order."""
        from matching.matcher import ranking

        now = time.monotonic()
        work: list[list | Rejected] = []
        for job in jobs:
            waited = now - job.received
            if waited > self.spec.timeout:
                work.append(Rejected(504, f"the request waited {waited:.1f} s in the queue, over this server's "
                                          f"timeout of {self.spec.timeout:g} s (timeout=); the server is overloaded: "
                                          f"retry later, or serve with a larger timeout"))  # fmt: skip
            else:
                work.append(self.prepare(job))
        batched = [i for i, (job, w) in enumerate(zip(jobs, work, strict=True))
                   if job.kind != "align" and not isinstance(w, Rejected)]  # fmt: skip
        if batched:
            joined = PreparedPairs.join([work[i] for i in batched])
            answers = self.matcher.answers(self.predictor.logits_of(joined, "request"))
        else:
            answers = []
        ends = dict(zip(batched, itertools.accumulate(len(work[i]) for i in batched), strict=True))
        out = []
        for i, (job, w) in enumerate(zip(jobs, work, strict=True)):
            if isinstance(w, Rejected):
                out.append((job.id, w.status, error_body(w.status, w.message)))
                continue
            if job.kind == "align":
                body = self.align(w)
            else:
                mine = answers[ends[i] - len(w) : ends[i]]
                body = {"predictions": mine} if job.kind == "classify" else {"ranking": ranking(job.texts[1], mine)}
            out.append((job.id, 200, json.dumps(body, ensure_ascii=False).encode()))
        return out

    def align(self, prepared: PreparedPairs) -> dict:
        """`Matcher.align` as JSON, with what a reader of the matrices needs: which tokens are unknown words, what
        each matrix is (`describe`) and the range its values can take (None where not known)."""
        from matching.matrices import describe, value_range

        aligned = self.matcher.alignment(prepared)
        index, cfg = self.predictor.vocab.index, self.predictor.config
        aligned["unknown"] = {side: [self.marks_unknown and t != "<null>" and t not in index
                                     for t in aligned[f"{side}_tokens"]] for side in "ab"}  # fmt: skip
        aligned["about"] = {name: {"caption": describe(name, cfg), "range": value_range(name, cfg)}
                            for name in aligned["matrices"]}  # fmt: skip
        aligned["matrices"] = {name: m.astype("float64").round(6).tolist() for name, m in aligned["matrices"].items()}
        return aligned


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def watch_parent(parent: int) -> None:
    """End this process when `parent` is gone (a thread polls once a second)."""
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def take_batch(requests: Any, max_batch_size: int, batch_timeout: float) -> list[Job | None] | None:
    """The next batch of jobs: waits up to a second for one (None when nothing came), then takes every job already
    queued and, for `batch_timeout` seconds, more, up to `max_batch_size`."""
    try:
        jobs = [requests.get(timeout=1.0)]
    except Empty:
        return None
    end = time.monotonic() + batch_timeout
    while len(jobs) < max_batch_size and jobs[-1] is not None:
        try:
            jobs.append(requests.get_nowait())
        except Empty:
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            try:
                jobs.append(requests.get(timeout=remaining))
            except Empty:
                break
    return jobs


def work(spec: WorkerSpec, requests: Any, answers: Any) -> None:
    """The worker process: load the run, say "ready" (or the error that stopped it), then answer batches until a
    `None` job comes. `requests`: a multiprocessing Queue of Jobs; `answers`: the sending end of a Pipe. Ctrl+C in a
    terminal (SIGINT to the whole process group) and a SIGTERM sent to every process of the server (systemd's
    default) are the server's to handle: it answers the requests under way, then sends the stop job."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    watch_parent(os.getppid())
    try:
        worker = Worker(spec)
    except Exception as err:  # reported by the server as its own error; it exits with status 2
        answers.send(("error", f"{type(err).__name__}: {err}" if not isinstance(err, ValueError) else str(err)))
        return
    gc.collect()
    gc.freeze()  # the model, vocabulary and imports stay; full collections need not walk them on every request
    answers.send(("ready", None))
    while True:
        jobs = take_batch(requests, spec.max_batch_size, spec.batch_timeout)
        if jobs is None:
            continue
        stop = jobs[-1] is None
        jobs = [j for j in jobs if j is not None]
        if jobs:
            try:
                answers.send(("answers", worker.answer(jobs)))
            except Exception as err:  # a bug of ours, not the request's: answer 500 and go on serving
                message = f"the model failed on this batch ({type(err).__name__}: {err}); please report it"
                answers.send(("answers", [(j.id, 500, error_body(500, message)) for j in jobs]))
        if stop:
            answers.close()
            return
