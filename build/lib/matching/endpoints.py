"""The HTTP endpoints of `matching-serve` (see matching/serve.py): LitServe APIs over a trained run, their request
schemas, and the JSON error answers. Needs the serve extra (litserve, which brings fastapi and pydantic).

No `from __future__ import annotations` here: LitServe hands decode_request's annotation to FastAPI as the
request body's type, which must be the class itself, not its name."""

import asyncio
import contextlib
import functools
import gc
import itertools
import json
import multiprocessing
import os
import threading
import time
import warnings
from abc import abstractmethod
from dataclasses import asdict, dataclass
from multiprocessing.managers import SyncManager
from queue import Empty, Queue
from typing import Any, NamedTuple

import litserve
import torch
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from litserve.loops.base import _SENTINEL_VALUE, _StopLoopError
from litserve.loops.simple_loops import BatchedLoop
from litserve.transport.base import MessageTransport
from litserve.utils import LitAPIStatus, LoopResponseType
from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict

from matching.data.readers import Pair
from matching.matcher import Matcher, ranking
from matching.report import option_name
from matching.runs import RunError, TrainedRun, load_trained

#: What each endpoint expects, quoted by the error messages.
EXPECTED = {
    "/classify": '{"pairs": [{"a": "first text", "b": "second text"}, ...]}',
    "/rank": '{"query": "a question", "candidates": ["an answer", "another answer", ...]}',
    "/align": '{"a": "first text", "b": "second text"}',
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPair(_Strict):
    a: str
    b: str


class ClassifyRequest(_Strict):
    pairs: list[TextPair]


class RankRequest(_Strict):
    query: str
    candidates: list[str]


class AlignRequest(_Strict):
    a: str
    b: str


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


class Rejected(NamedTuple):
    """A request the model worker refuses: it is answered with its own status while the rest of its batch runs."""

    status: int
    message: str


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status)


def _location(loc: tuple) -> str:
    parts = [p for p in loc if p != "body"]
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    return text or "the body"


async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's validation errors (not JSON, missing or extra fields, a text that is not a string) as one 400 or
    422 answer that names every problem and shows what the endpoint expects."""
    expected = EXPECTED.get(request.url.path, "a JSON object")
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type:
        return error_response(
            415,
            f"the request body must be JSON sent with the header Content-Type: application/json (this request's "
            f"Content-Type: {content_type or 'none'}; with curl, add -H 'Content-Type: application/json'); "
            f"expected {expected}",
        )
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        reason = next(str(e.get("ctx", {}).get("error", "")) for e in errors if e.get("type") == "json_invalid")
        return error_response(
            400, f"the request body is not valid JSON ({reason}); send {expected} with Content-Type: application/json"
        )
    problems = "; ".join(f"{_location(tuple(e.get('loc', ())))}: {e.get('msg')}" for e in errors)
    return error_response(422, f"invalid request: {problems}; expected {expected}")


class WaitingBatchLoop(BatchedLoop):
    """LitServe's batched loop (0.2.x) polls its request queue every millisecond, idle or not, which keeps one core
    busy per endpoint: on a 2-core machine the three endpoints' workers took the cores the HTTP front and the model
    need. This loop sleeps on the queue until a request comes, then takes every request already queued (those that
    arrived while the previous batch ran) and, for `batch_timeout` seconds, more, up to `max_batch_size`."""

    def get_batch_requests(self, lit_api: litserve.LitAPI, request_queue: Queue, transport: Any) -> tuple[list, list]:
        try:
            items = [request_queue.get(timeout=1.0)]
        except Empty:
            return [], []
        end = time.monotonic() + lit_api.batch_timeout
        while len(items) < lit_api.max_batch_size:
            try:
                items.append(request_queue.get_nowait())
            except Empty:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    items.append(request_queue.get(timeout=remaining))
                except Empty:
                    break
        payloads, timed_out = [], []
        for item in items:
            if item == _SENTINEL_VALUE:
                raise _StopLoopError()
            response_queue_id, uid, timestamp, x_enc = item
            self.put_response(transport, response_queue_id, uid, (), LitAPIStatus.START, LoopResponseType.REGULAR)
            if lit_api.request_timeout not in (-1, False) and time.monotonic() - timestamp > lit_api.request_timeout:
                timed_out.append((response_queue_id, uid))
            else:
                payloads.append((response_queue_id, uid, x_enc))
        return payloads, timed_out


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class PipeTransport(MessageTransport):
    """Answers from the model workers to the HTTP front over plain multiprocessing queues (pipes). The front reads
    them in its event loop when the pipe is readable, where LitServe's MPQueueTransport hands every get to a thread
    (a thread hop per answer)."""

    def __init__(self, queues: list):
        self.queues = queues

    def send(self, item: Any, consumer_id: int) -> None:
        self.queues[consumer_id].put(item)

    async def areceive(self, consumer_id: int, timeout: float | None = None, block: bool = True) -> Any:
        queue = self.queues[consumer_id]
        while True:
            try:
                return queue.get_nowait()
            except Empty:
                pass
            loop, fd = asyncio.get_running_loop(), queue._reader.fileno()
            readable = loop.create_future()
            loop.add_reader(fd, _resolve, readable)
            try:
                await asyncio.wait_for(readable, 1.0)
            except TimeoutError:
                return None  # LitServe's consumer loop asks again
            finally:
                loop.remove_reader(fd)

    def close(self, send_sentinel: bool = True) -> None:
        if send_sentinel:
            for queue in self.queues:
                with contextlib.suppress(Exception):
                    queue.put(None, block=False)


class PipeQueueServer(litserve.LitServer):
    """A LitServer whose queues are plain multiprocessing queues (pipes), requests and answers alike. LitServe
    0.2.x makes them Manager queues, which cost a round trip to the manager process for every put and every get
    (the HTTP front makes its put inside its event loop), and its `fast_queue` (ZeroMQ) option is not applied
    (TransportConfig gets `transport_config=` for `transport_type=`): under load those round trips were most of the
    server's time."""

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> Any:
        """Each HTTP process also ends with the server that forked it: killed with SIGKILL, the server would leave
        them answering /health "ok" on its port, with no model behind them."""
        _watch_parent(os.getppid())
        async with super().lifespan(app):
            yield

    def _init_manager(self, num_api_servers: int) -> Any:
        """LitServer._init_manager of litserve 0.2.x with pipe queues, and a manager process that ends with the server
        (it inherits the listening socket: left alive, it would hold the port with nobody answering)."""
        manager = SyncManager()
        manager.start(_watch_parent, (os.getpid(),))
        self.transport_config.manager = manager
        self.transport_config.num_consumers = num_api_servers
        self.workers_setup_status = manager.dict()
        self._shutdown_event = manager.Event()
        context = multiprocessing.get_context("spawn")  # what LitServe starts the model workers with
        for lit_api in self.litapi_connector:
            self.litapi_request_queues[lit_api.api_path] = context.Queue()
        self._logger_connector.run(self)
        self._transport = PipeTransport([context.Queue() for _ in range(num_api_servers)])
        return manager


def _exit_with_parent(parent: int) -> None:
    """A model worker ends when the server that started it is gone (killed with SIGKILL, say), instead of living on
    as an orphan."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _watch_parent(parent: int) -> None:
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


class RecentTexts:
    """The run's tokenizer, remembering the tokens of the last texts it saw: a request's texts are tokenised to check
    them (decode_request) and then again by TrainedRun.logits, a tenth of the worker's time without this."""

    def __init__(self, tokenizer: Any, size: int = 4096):
        self.tokenizer = tokenizer
        self.tokens = functools.lru_cache(maxsize=size)(lambda text: tuple(tokenizer(text)))

    def __call__(self, text: str) -> list[str]:
        return list(self.tokens(text))

    def __getattr__(self, name: str) -> Any:  # lowercase, keep_tokens, ...: the tokenizer's own
        return getattr(self.tokenizer, name)


class _ModelAPI(litserve.LitAPI):
    """One endpoint over a trained run, loaded in the LitServe worker process (`setup`). Requests are checked there,
    with the run's own tokenizer; a refused request answers for itself and never fails the batch it came in."""

    path = ""

    def __init__(
        self, ckpt: str, config: dict, limits: Limits, threads: int, max_batch_size: int, batch_timeout: float
    ):
        with warnings.catch_warnings():  # batch/unbatch are ours also when max_batch_size is 1; LitServe warns
            warnings.simplefilter("ignore", UserWarning)
            super().__init__(
                max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path=self.path, loop=WaitingBatchLoop()
            )
        self.ckpt, self.config, self.limits, self.threads = ckpt, config, limits, threads
        self.matcher: Matcher | None = None
        self.run: TrainedRun | None = None

    async def authorize(self) -> None:
        """No authentication (put the server behind your gateway for that). LitServe's default is a plain function,
        which FastAPI runs in a thread pool: a thread hop for every request."""

    def setup(self, device: str) -> None:
        _watch_parent(os.getppid())
        if self.threads:
            torch.set_num_threads(self.threads)
        self.matcher = Matcher(load_trained(self.ckpt, OmegaConf.create(self.config)))
        self.run = self.matcher.run
        self.run.data.tokenizer = RecentTexts(self.run.data.tokenizer)
        gc.collect()
        gc.freeze()  # the model, vocabulary and imports stay; full collections need not walk them on every request
        if device != "cpu":
            self.run.system.to(device)

    # -- checks --------------------------------------------------------------------------------------------------
    def _check_texts(self, texts: list[tuple[str, str]]) -> Rejected | None:
        """Each (field name, text) must give at least one token and at most limits.max_text_tokens."""
        tokenizer = self.run.data.tokenizer
        for field, text in texts:
            count = len(tokenizer(text))
            if count == 0:
                return Rejected(422, f"{field} is empty (no tokens); give a text with at least one word")
            if count > self.limits.max_text_tokens:
                return Rejected(
                    413,
                    f"{field} has {count} tokens, over this server's limit of {self.limits.max_text_tokens} "
                    f"(limits.max_text_tokens); shorten the text",
                )
        return None

    def _count(self, field: str, n: int, limit: int, key: str) -> Rejected | None:
        if n == 0:
            return Rejected(422, f"{field} is empty; give at least one")
        if n > limit:
            return Rejected(
                413, f"{field} has {n} entries, over this server's limit of {limit} ({key}); split the request"
            )
        return None

    # -- batching: a batch is the list of decoded requests; their pairs run through one TrainedRun.logits call --
    def batch(self, inputs: list) -> list:
        return list(inputs)

    def unbatch(self, output: list) -> list:
        return output

    def predict(self, requests: list) -> list:
        accepted = iter(self.answer([r for r in requests if not isinstance(r, Rejected)]))
        return [r if isinstance(r, Rejected) else next(accepted) for r in requests]

    @abstractmethod
    def answer(self, requests: list[list[Pair]]) -> list[dict]:
        """The answers of the accepted requests of a batch (each a list of pairs), in their order."""

    def answers_per_request(self, requests: list[list[Pair]]) -> list[list[dict]]:
        """`Matcher.predict`'s answers to each request's pairs, all of a batch's pairs run through one call."""
        if not requests:
            return []
        answers = self.matcher.predict([p for r in requests for p in r], "request")
        ends = list(itertools.accumulate(len(r) for r in requests))
        return [answers[end - len(r) : end] for r, end in zip(requests, ends, strict=True)]

    def encode_response(self, output: dict | Rejected) -> Response:
        """The finished HTTP answer, JSON encoded here in the worker: the front passes a Response through as it is
        (a dict it would encode again with FastAPI's jsonable_encoder, in the one process that all requests share)."""
        if isinstance(output, Rejected):
            return error_response(output.status, output.message)
        return Response(json.dumps(output, ensure_ascii=False).encode(), media_type="application/json")


class ClassifyAPI(_ModelAPI):
    path = "/classify"

    def decode_request(self, request: ClassifyRequest) -> list[Pair] | Rejected:
        refused = self._count("pairs", len(request.pairs), self.limits.max_pairs, "limits.max_pairs")
        refused = refused or self._check_texts(
            [(f"pairs[{i}].{side}", getattr(p, side)) for i, p in enumerate(request.pairs) for side in "ab"]
        )
        return refused or [Pair(p.a, p.b, "", None, i + 1) for i, p in enumerate(request.pairs)]

    def answer(self, requests: list[list[Pair]]) -> list[dict]:
        return [{"predictions": answers} for answers in self.answers_per_request(requests)]


class RankAPI(_ModelAPI):
    path = "/rank"

    def decode_request(self, request: RankRequest) -> list[Pair] | Rejected:
        if self.run.kind != "rank":
            return Rejected(
                400,
                f"this model classifies pairs into {self.run.labels} (task {self.run.task.name}); it does not rank. "
                f"POST the pairs to /classify, or serve a model trained on a ranking task (wikiqa, trecqa, ubuntu)",
            )
        refused = self._count(
            "candidates", len(request.candidates), self.limits.max_candidates, "limits.max_candidates"
        )
        refused = refused or self._check_texts(
            [("query", request.query), *((f"candidates[{i}]", c) for i, c in enumerate(request.candidates))]
        )
        return refused or [Pair(request.query, c, "", None, i) for i, c in enumerate(request.candidates)]

    def answer(self, requests: list[list[Pair]]) -> list[dict]:
        answers = zip(requests, self.answers_per_request(requests), strict=True)
        return [{"ranking": ranking([p.b for p in pairs], scores)} for pairs, scores in answers]


class AlignAPI(_ModelAPI):
    """One pair's alignment matrices; one request at a time (the matrices are per pair)."""

    path = "/align"

    def decode_request(self, request: AlignRequest) -> list[Pair] | Rejected:
        refused = self._check_texts([("a", request.a), ("b", request.b)])
        return refused or [Pair(request.a, request.b, "", None, 1)]

    def answer(self, requests: list[list[Pair]]) -> list[dict]:
        """`Matcher.align`: one forward pass per pair gives both the prediction and the matrices."""
        answers = []
        for (pair,) in requests:  # decode_request makes one pair per request
            aligned = self.matcher.align(pair.a, pair.b)
            aligned["matrices"] = {name: m.round(6).tolist() for name, m in aligned["matrices"].items()}
            answers.append(aligned)
        return answers


def model_info(run: TrainedRun, limits: Limits) -> dict:
    """What GET /info says about the model."""
    cfg = run.cfg
    return {
        "task": run.task.name,
        "kind": run.kind,
        "labels": run.labels,
        "aligner": option_name(cfg, "aligner"),
        "intra": option_name(cfg, "intra") if cfg.get("intra") is not None else None,
        "embeddings": option_name(cfg, "embeddings"),
        "checkpoint": str(run.checkpoint),
        "run_dir": str(run.run_dir),
        "vocabulary_size": len(run.vocab),
        "max_length": run.data.max_length,
        "endpoints": ["/classify", "/rank", "/align"] if run.kind == "rank" else ["/classify", "/align"],
        "limits": asdict(limits),
    }
