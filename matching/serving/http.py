"""The HTTP front of `matching-serve` (see matching/serve.py): a FastAPI app, its request schemas, the JSON error
answers, the page at `/`, and its handle on each model worker (matching/serving/batcher.py). Needs the serve extra
(fastapi, uvicorn); only their documented APIs are used.

The front parses and checks what it can without the model (the body's size, its Content-Type, its JSON against
the schema, the number of pairs or candidates), then hands the request to the worker of the run it names
(`?run=<name>`; the first run without it) and awaits the finished answer. It never runs the model and never
encodes an answer: both happen in the worker, on another core."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError

from matching.data.tables import pair_of_mapping, text_names
from matching.errors import DataFormatError
from matching.files import file_sha256
from matching.inference import Predictor
from matching.serving.batcher import Job, Limits, error_body
from matching.serving.examples import page_examples

#: What each endpoint expects, quoted by the error messages.
EXPECTED = {
    "/classify": '{"pairs": [{"a": "first text", "b": "second text"}, ...]}',
    "/rank": '{"query": "a question", "candidates": ["an answer", "another answer", ...]}',
    "/align": '{"a": "first text", "b": "second text"}',
}

#: The page's files (HTML, JS, CSS), shipped inside the package: nothing is fetched from elsewhere.
PAGE = resources.files("matching.serving") / "page"
PAGE_TYPES = {"index.html": "text/html", "page.js": "text/javascript", "page.css": "text/css"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ClassifyRequest(_Strict):
    # Each pair an object with its two texts under the run's own column names (task.columns) or the usual ones
    # ("a"/"b", "premise"/"hypothesis", ...): matching.data.tables.pair_of_mapping reads it, as Matcher does.
    pairs: list[dict[str, Any]]


class RankRequest(_Strict):
    query: str
    candidates: list[str]


class AlignRequest(_Strict):
    a: str
    b: str


class Refusal(Exception):
    """A request the front answers itself with a 4xx JSON error."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def error_response(status: int, message: str) -> Response:
    return Response(error_body(status, message), status_code=status, media_type="application/json")


def _location(loc: tuple) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return text or "the body"


def validation_message(path: str, err: ValidationError) -> Refusal:
    """Pydantic's validation errors (missing or extra fields, a text that is not a string) as one 422 answer that
    names every problem and shows what the endpoint expects."""
    problems = "; ".join(f"{_location(tuple(e.get('loc', ())))}: {e.get('msg')}" for e in err.errors())
    return Refusal(422, f"invalid request: {problems}; expected {EXPECTED[path]}")


def pair_refusal(index: int, pair: Any, columns: dict[str, str], err: DataFormatError) -> str:
    """What an HTTP client is told when a pair of its /classify request has no two texts the model can find: the
    keys it may use (the model's own column names, else a and b, or the usual pairs), in its own terms (a pair whose
    texts are found but are not strings: `err` says so)."""
    if "must be strings" in str(err):
        return f"invalid request: {err}"
    a, b = text_names(columns)
    example = json.dumps({a: "first text", b: "second text"})
    got = f"the keys {sorted(pair)}" if isinstance(pair, dict) else f"{pair!r:.60}"
    other = "" if (a, b) == ("a", "b") else ' or {"a": ..., "b": ...}'
    return (
        f"invalid request: pairs[{index}] has {got}, and no two texts under the names this model reads; give each "
        f"pair as {example}{other} (also premise/hypothesis, question/answer, sentence1/sentence2, ...; GET /info "
        'lists the model\'s own names under "columns")'
    )


def _count(field: str, n: int, limit: int, key: str) -> None:
    if n == 0:
        raise Refusal(422, f"{field} is empty; give at least one")
    if n > limit:
        raise Refusal(413, f"{field} has {n} entries, over this server's limit of {limit} ({key}); split the request")


class ModelClient:
    """The front's handle on one model worker: its request queue, the pipe its answers come back on, and the
    requests awaiting an answer. `name` is the run's name in `?run=` and on the page; `info` is what /info says
    about it."""

    def __init__(self, name: str, info: dict, process: Any, requests: Any, answers: Any):
        self.name, self.info, self.process = name, info, process
        self.requests, self.answers = requests, answers
        self.pending: dict[int, asyncio.Future] = {}
        self.ids = itertools.count()
        self.stopped: str | None = None  # why the worker no longer answers

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read answers in `loop` whenever the pipe is readable (no thread, no polling)."""
        loop.add_reader(self.answers.fileno(), self._readable, loop)

    def _readable(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while self.answers.poll():
                kind, batch = self.answers.recv()
                for job_id, status, body in batch if kind == "answers" else ():
                    future = self.pending.pop(job_id, None)
                    if future is not None and not future.done():
                        future.set_result((status, body))
        except (EOFError, OSError):  # the worker is gone: its requests cannot be answered any more
            loop.remove_reader(self.answers.fileno())
            self.stopped = f"the model worker of run {self.name!r} stopped (exit code {self.process.exitcode})"
            for future in self.pending.values():
                if not future.done():
                    future.set_result((503, error_body(503, f"{self.stopped}; restart the server")))
            self.pending.clear()

    async def ask(self, kind: str, texts: tuple) -> Response:
        if self.stopped:
            return error_response(503, f"{self.stopped}; restart the server")
        job_id = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.pending[job_id] = future
        self.requests.put(Job(job_id, kind, texts, time.monotonic()))
        status, body = await future
        return Response(body, status_code=status, media_type="application/json")


async def _read(request: Request, schema: type[BaseModel], limits: Limits) -> Any:
    """The request's body, checked for size and Content-Type and validated against `schema`."""
    path = request.url.path
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_request_bytes:
        size = int(declared)
    else:
        body = await request.body()
        size = len(body)
    if size > limits.max_request_bytes:
        raise Refusal(413, f"Payload too large: the request body has {size:,} bytes, over this server's limit of "
                           f"{limits.max_request_bytes:,} (limits.max_request_bytes); split the request")  # fmt: skip
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type:
        raise Refusal(415, f"the request body must be JSON sent with the header Content-Type: application/json "
                           f"(this request's Content-Type: {content_type or 'none'}; with curl, add -H "
                           f"'Content-Type: application/json'); expected {EXPECTED[path]}")  # fmt: skip
    try:
        data = json.loads(body)
    except ValueError as err:  # not JSON, or not UTF-8
        raise Refusal(400, f"the request body is not valid JSON ({err}); send {EXPECTED[path]} with Content-Type: "
                           f"application/json") from None  # fmt: skip
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise validation_message(path, err) from None


def build_app(clients: list[ModelClient], limits: Limits, server: dict) -> FastAPI:
    """The app over the started workers. `server`: what /info says about the server's settings."""
    by_name = {c.name: c for c in clients}

    async def lifespan(app: FastAPI) -> Any:
        loop = asyncio.get_running_loop()
        for client in clients:
            client.attach(loop)
        yield

    app = FastAPI(title="matching-serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(Refusal)
    async def refused(request: Request, exc: Refusal) -> Response:
        return error_response(exc.status, exc.message)

    def client_of(request: Request) -> ModelClient:
        name = request.query_params.get("run")
        if name is None:
            return clients[0]
        if name not in by_name:
            raise Refusal(404, f"no run named {name!r} is served here; runs: {list(by_name)} (GET /info lists them)")
        return by_name[name]

    @app.post("/classify")
    async def classify(request: Request) -> Response:
        client = client_of(request)
        body = await _read(request, ClassifyRequest, limits)
        _count("pairs", len(body.pairs), limits.max_pairs, "limits.max_pairs")
        pairs = []
        for i, p in enumerate(body.pairs):
            try:
                pairs.append(pair_of_mapping(p, f"pairs[{i}]", client.info["columns"]))
            except DataFormatError as err:
                raise Refusal(422, pair_refusal(i, p, client.info["columns"], err)) from None
        return await client.ask("classify", tuple((p.a, p.b) for p in pairs))

    @app.post("/rank")
    async def rank(request: Request) -> Response:
        client = client_of(request)
        body = await _read(request, RankRequest, limits)
        info = client.info
        if info["kind"] != "rank":
            raise Refusal(400, f"this model classifies pairs into {info['labels']} (task {info['task']}); it does not "
                               f"rank. POST the pairs to /classify, or serve a model trained on a ranking task "
                               f"(wikiqa, trecqa, ubuntu, or a table of your own: pairs_rank, "
                               f"pairs_positives)")  # fmt: skip
        _count("candidates", len(body.candidates), limits.max_candidates, "limits.max_candidates")
        return await client.ask("rank", (body.query, tuple(body.candidates)))

    @app.post("/align")
    async def align(request: Request) -> Response:
        client = client_of(request)
        body = await _read(request, AlignRequest, limits)
        return await client.ask("align", (body.a, body.b))

    @app.get("/health")
    async def health() -> Response:
        stopped = [c.stopped for c in clients if c.stopped]
        return PlainTextResponse("ok") if not stopped else PlainTextResponse("; ".join(stopped), status_code=503)

    @app.get("/info")
    async def info() -> Response:
        runs = [{"name": c.name, **c.info} for c in clients]
        return JSONResponse({"model": clients[0].info, "runs": runs, "server": server})

    @app.get("/")
    async def page() -> Response:
        return HTMLResponse((PAGE / "index.html").read_text(encoding="utf-8"))

    @app.get("/page/{name}")
    async def page_file(name: str) -> Response:
        if name not in PAGE_TYPES:
            return error_response(404, f"no page file {name!r}; the page is at /")
        return Response((PAGE / name).read_bytes(), media_type=PAGE_TYPES[name])

    return app


def model_info(predictor: Predictor, limits: Limits, examples: list | None = None) -> dict:
    """What GET /info says about a served model (and the page shows): its task, labels, aligner, embeddings, the
    data it was trained on, its weights, backend and arithmetic, the limits and example inputs (`examples`: see
    `page_examples`). It names no path of the machine: files by name and sha256 (provenance.json, hashed at
    training; the weights, hashed here, once per server start), the run by `run_label`."""
    cfg, about = predictor.config, predictor.about
    if cfg is None:  # an exported ONNX folder: what its serving.json recorded at export
        exported = about.get("exported") or {}
        folder = predictor.origin
        info = {"aligner": exported.get("aligner"), "intra": exported.get("intra"),
                "embeddings": exported.get("embeddings"), "data": {}, "provenance": {},
                "checkpoint": f"{run_label(folder)}/{Path(about.get('graph') or 'model.onnx').name}",
                "exported_from": about.get("checkpoint"),
                "checkpoint_sha256": about.get("checkpoint_sha256"), "run_dir": run_label(folder)}  # fmt: skip
        run_dir = folder
    else:  # a run or a shared folder (torch is here: what reads its provenance and options may use it)
        from matching.provenance import embeddings_name, read_provenance
        from matching.results.discovery import option_name

        run_dir = Path(about["run_dir"])
        provenance = read_provenance(run_dir)
        data = provenance.get("data") or {}
        weights = Path(about["weights"])
        info = {
            "aligner": option_name(cfg, "aligner"),
            "intra": option_name(cfg, "intra") if cfg.get("intra") is not None else None,
            "embeddings": embeddings_name(cfg, provenance),
            "data": {split: record.get("file") or record.get("hub") for split, record in data.items()},
            "provenance": provenance,
            "checkpoint": weights_label(run_dir, weights),
            "checkpoint_sha256": file_sha256(weights),
            "run_dir": run_label(run_dir),
        }
    info = {
        "task": predictor.task,
        "kind": predictor.kind,
        "labels": predictor.labels,
        "columns": {k: v for k, v in predictor.columns.items() if k in ("a", "b") and v},  # /classify's names
        **info,
        "backend": predictor.backend.name,
        "dtype": predictor.dtype,
        "null_token": predictor.null_token,
        "vocabulary_size": len(predictor.vocab),
        "max_length": predictor.max_length,
        "endpoints": (["/classify", "/rank"] if predictor.kind == "rank" else ["/classify"])
        + (["/align"] if hasattr(predictor.backend, "alignment") else []),
        "limits": asdict(limits),
    }
    if examples is None:
        info["examples"], info["examples_from"] = page_examples(cfg, run_dir, predictor.task, predictor.kind)
    else:
        info["examples"], info["examples_from"] = examples, "given"
    return info


def weights_label(run_dir: Path, weights: Path) -> str:
    """The weights' file as /info names it: under its run's label (`<run>/checkpoints/best.ckpt`, a shared
    folder's `<folder>/model.safetensors`)."""
    try:
        inside = weights.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        inside = weights.name
    return f"{run_label(run_dir)}/{inside}"


def run_label(folder: Path) -> str:
    """A run directory as /info and the page name it: relative to the working directory when it lies under it
    (`outputs/runs/claims/coda/<time>`), else its last three parts (`claims/coda/<time>`; a shared folder: its
    name), never a path from the root of the machine."""
    resolved = folder.resolve()
    if resolved.is_relative_to(Path.cwd()) and resolved != Path.cwd():
        return resolved.relative_to(Path.cwd()).as_posix()
    parts = resolved.parts[1:]
    return "/".join(parts[-3:] if (folder / "checkpoints").is_dir() else parts[-1:])
