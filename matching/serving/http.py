"""The HTTP front of `matching-serve` (see matching/serve.py): a FastAPI app, its request schemas, the JSON error
answers, the page at `/`, the rerank API the ecosystem calls, and the guards a server on localhost needs. Needs the
serve extra (fastapi, uvicorn); only their documented APIs are used.

The front parses and checks what it can without the model (the body's size while it is read, its media type, its JSON
and nesting, the schema, the number of pairs or candidates, every text's encoding), then hands the request to the
`Batcher` of the run it names (`?run=<name>`; the first run without it) and awaits the finished answer. What reaches
a browser is guarded: JSON only (a form post or `text/plain` cannot reach the API without a CORS preflight), a Host
allow-list (against DNS rebinding), no CORS unless configured, a Content-Security-Policy and frame headers.

Every body is validated into its typed request model (GET /openapi.json describes them), then made the typed query
the worker answers (matching.serving.batcher: `ClassifyQuery`, `RankQuery`, `RerankQuery`, `AlignQuery`); the worker
builds its answer from the answer models /openapi.json publishes (matching.serving.answers). A /classify
pair's texts are found by the rule a file of pairs is read by (matching.data.tables.pair_of_mapping, as `Matcher`
reads a dict). GET /info serves each run's description, computed once when the run was loaded (`Matcher.description`,
matching.inference.description), with its endpoints and the limits: nothing is read or hashed here per request."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from matching.data.tables import pair_of_mapping, text_names
from matching.errors import DataFormatError
from matching.matcher import RANKING_TASKS
from matching.serving.answers import ClassifyAnswer, RankAnswer, RerankAnswer
from matching.serving.batcher import (
    AlignQuery,
    Batcher,
    ClassifyQuery,
    Limits,
    Query,
    RankQuery,
    RerankQuery,
    error_body,
)

#: What each endpoint expects, quoted by the error messages.
EXPECTED = {
    "/classify": '{"pairs": [{"a": "first text", "b": "second text"}, ...]}',
    "/rank": '{"query": "a question", "candidates": ["an answer", "another answer", ...]}',
    "/align": '{"a": "first text", "b": "second text"}',
    "/rerank": '{"query": "a question", "documents": ["a passage", ...], "top_n": 3, "return_documents": false}',
}
for _alias in ("/v1/rerank", "/v2/rerank"):
    EXPECTED[_alias] = EXPECTED["/rerank"]

#: The deepest JSON nesting a request may have (a valid request nests 3 deep: an object, a list, an object).
MAX_JSON_DEPTH = 32
#: The localhost names a server bound to 127.0.0.1 or ::1 answers by default (`allowed_hosts=` adds others).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
#: The page's headers: scripts, styles and requests from the server itself only (and the blob: of its JSON download),
#: in no frame of another site.
PAGE_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data: blob:; connect-src 'self' blob:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
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


class RerankDocument(BaseModel):
    """A document given as an object (Cohere's and Jina's form): its `text`, or the fields `rank_fields` names; its
    other fields (`id`, `title`, ...) are kept and repeated by `return_documents`."""

    model_config = ConfigDict(extra="allow", strict=True)
    text: str | None = None


class RerankRequest(_Strict):
    """The rerank request of Cohere's (v1, v2), Jina's and Infinity's APIs, every field their clients send (LangChain's
    and Haystack's Cohere rankers, LlamaIndex's, infinity_client): a query, its documents (texts, or objects), the
    best `top_n`, whether the answer repeats each document; `rank_fields` (the object fields read, in order, their
    values joined by a newline), `max_tokens_per_doc` (each document cut to that many tokens), Jina's `truncation`
    (false: a document over the server's limit is refused instead of cut), Infinity's `raw_scores` (the logit
    margin as `relevance_score`; a request that has the field is Infinity's, and its returned documents are texts, as
    Infinity gives them, not objects), Cohere's `priority` (accepted: requests are answered in the order they come) and
    Cohere v1's `max_chunks_per_doc` (accepted: a long document is cut to its first chunk, never chunked further,
    and the answer says so).
    `model` is accepted and echoed (a client names one); it selects nothing: `?run=` does."""

    query: str
    documents: list[str | RerankDocument]
    top_n: int | None = None
    return_documents: bool = False
    model: str | None = None
    rank_fields: list[str] | None = None
    max_tokens_per_doc: int | None = None
    truncation: bool | None = None
    raw_scores: bool = False
    priority: int | None = None
    max_chunks_per_doc: int | None = None


class ErrorAnswer(BaseModel):
    """Every error's body: what was wrong and what to do, and the status."""

    error: str
    status: int


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


#: What a document of /rerank may be, said once for a document that is neither (pydantic reports each alternative).
_DOCUMENT = 'a document is a string or an object with a string "text" (or the fields rank_fields names)'


def validation_message(path: str, err: ValidationError) -> Refusal:
    """Pydantic's validation errors (missing or extra fields, a text that is not a string) as one 422 answer that
    names every problem once and shows what the endpoint expects."""
    problems: dict[str, str] = {}
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        if len(loc) >= 3 and loc[0] == "documents" and isinstance(loc[1], int):  # one document, two alternatives
            problems.setdefault(_location(loc[:2]), _DOCUMENT)
        else:
            problems.setdefault(_location(loc), str(e.get("msg")))
    listed = "; ".join(f"{where}: {what}" for where, what in problems.items())
    return Refusal(422, f"invalid request: {listed}; expected {EXPECTED[path]}")


def read_pair(index: int, pair: Any, columns: dict[str, str]) -> tuple[str, str]:
    """A /classify pair's two texts, by the rule a file of pairs is read by (matching.data.tables.pair_of_mapping):
    under the run's own column names, else "a"/"b" or one of the usual pairs (premise/hypothesis, question/answer,
    ...); other keys (an id, a label) are ignored; the key of one text without its partner's (`{"b": .., "text": ..}`,
    one of the run's own names alone), two usual pairs at once, or texts that cannot be told, are a 422 that names
    the missing key, lists the keys and says how to name the texts: never read by position, perhaps swapped."""
    where = f"pairs[{index}]"
    a, b = text_names(columns)
    example = json.dumps({a: "first text", b: "second text"})
    other = "" if (a, b) == ("a", "b") else ' or {"a": ..., "b": ...}'
    advice = (f"Give each pair as {example}{other}, or under one of the usual pairs of names (premise/hypothesis, "
              f"question/answer, ...); other keys are ignored (GET /info lists the model's own names under "
              f"\"columns\")")  # fmt: skip
    try:
        read = pair_of_mapping(pair, where, {"a": columns.get("a"), "b": columns.get("b")}, advice=advice)
    except DataFormatError as err:
        raise Refusal(422, f"invalid request: {err}") from None
    return checked_text(f"{where}.a", read.a), checked_text(f"{where}.b", read.b)


def rerank_query(body: RerankRequest, run_name: str) -> RerankQuery:
    """The worker's query of a valid /rerank body: each document's text (a string; an object's `text`, or the values
    of its `rank_fields` in their order, joined by a newline), what `return_documents` repeats (each object as
    given, a string as {"text": ...}), and the options checked."""
    for name in ("top_n", "max_tokens_per_doc", "max_chunks_per_doc"):
        value = getattr(body, name)
        if value is not None and value < 1:
            raise Refusal(422, f"invalid request: {name} must be a positive whole number, got {value}")
    fields = tuple(body.rank_fields or ("text",))
    if not fields or any(not isinstance(f, str) or not f for f in fields):
        raise Refusal(422, f"invalid request: rank_fields names the document fields to read, got {body.rank_fields}")
    texts = []
    for i, document in enumerate(body.documents):
        if isinstance(document, str):
            texts.append(checked_text(f"documents[{i}]", document))
            continue
        given = document.model_dump(exclude_none=True)
        missing = [f for f in fields if not isinstance(given.get(f), str)]
        if missing:
            raise Refusal(422, f"invalid request: documents[{i}] has no string {missing[0]!r} (its fields: "
                               f"{sorted(given)}); {_DOCUMENT}")  # fmt: skip
        texts.append(checked_text(f"documents[{i}]", "\n".join(given[f] for f in fields)))
    shown = None
    if body.return_documents and "raw_scores" in body.model_fields_set:  # Infinity's request: its answer's form
        shown = texts
    elif body.return_documents:
        shown = tuple({"text": d} if isinstance(d, str) else d.model_dump(exclude_none=True) for d in body.documents)
    return RerankQuery(checked_text("query", body.query), tuple(texts), shown, body.top_n, body.model or run_name,
                       body.max_tokens_per_doc, body.truncation is not False, body.raw_scores)  # fmt: skip


def checked_text(field_name: str, text: str) -> str:
    """A text of a request, refused (422, naming the field) when it cannot be encoded as UTF-8: a lone surrogate
    such as "\\ud800", which JSON's escapes allow and no text holds."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise Refusal(422, f"invalid request: {field_name} holds a lone surrogate (\\u{ord(text[err.start]):04x} at "
                           f"character {err.start}), which is not text; send valid Unicode") from None  # fmt: skip
    return text


def _count(field: str, n: int, limit: int, key: str) -> None:
    if n == 0:
        raise Refusal(422, f"{field} is empty; give at least one")
    if n > limit:
        raise Refusal(413, f"{field} has {n} entries, over this server's limit of {limit} ({key}); split the request")


@dataclass
class ServedRun:
    """A run the app serves: its name in `?run=` and on the page, what /info says about it (`served_info`), and its
    batcher."""

    name: str
    info: dict
    batcher: Batcher

    async def ask(self, query: Query) -> Response:
        status, body = await self.batcher.ask(query)
        return Response(body, status_code=status, media_type="application/json")


def served_info(description: dict, can_align: bool, limits: Limits) -> dict:
    """What GET /info says about a served run (and the page shows): the model's description, computed once when it
    was loaded (`Matcher.description`: task, labels, aligner, embeddings, weights, examples, ...), with the endpoints
    that answer for it and the server's limits."""
    endpoints = ["/classify", "/rank", "/rerank"] if description["kind"] == "rank" else ["/classify"]
    return {**description, "endpoints": endpoints + (["/align"] if can_align else []), "limits": asdict(limits)}


@dataclass(frozen=True)
class Guards:
    """What guards the server against browsers and oversized requests (conf/serve.yaml): the Host names it
    answers (empty: any), the origins allowed to call it from a page of theirs (CORS; empty: none), the bytes of
    headers a request may have."""

    allowed_hosts: tuple[str, ...] = LOCAL_HOSTS
    cors_origins: tuple[str, ...] = ()
    max_header_bytes: int = 16384
    extra_headers: dict = field(default_factory=lambda: dict(PAGE_HEADERS))


#: A JSON string, its escapes included: what the nesting count skips.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
#: Each byte's step in nesting depth, as int8: '[' and '{' +1, ']' and '}' −1 (255), every other byte 0.
_NESTING = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))


def _too_deep(text: bytes, limit: int) -> bool:
    """Whether JSON `text` nests deeper than `limit`, its strings left out: the running sum of the brackets' steps,
    in C (a regular expression, bytes.translate and NumPy), not byte by byte in Python on the event loop."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    steps = np.frombuffer(_JSON_STRING.sub(b"", text).translate(_NESTING), dtype=np.int8)
    return bool(steps.size) and int(np.cumsum(steps, dtype=np.int32).max()) > limit


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


async def _read(request: Request, schema: type[BaseModel], limits: Limits) -> Any:
    """The request's body, read within limits.max_request_bytes (a declared length over it is refused before
    reading; a chunked body as soon as it passes it), its media type application/json, its JSON nested at most
    MAX_JSON_DEPTH deep, validated against `schema`."""
    path = request.url.path
    too_large = ("Payload too large: the request body has {size} bytes, over this server's limit of "
                 f"{limits.max_request_bytes:,} (limits.max_request_bytes); split the request")  # fmt: skip
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_request_bytes:
        raise Refusal(413, too_large.format(size=f"{int(declared):,}"))
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        shown = request.headers.get("content-type") or "none"
        raise Refusal(415, f"the request body must be JSON sent with the header Content-Type: application/json "
                           f"(this request's Content-Type: {shown:.80}; with curl, add -H "
                           f"'Content-Type: application/json'); expected {EXPECTED[path]}")  # fmt: skip
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_request_bytes:
            raise Refusal(413, too_large.format(size=f"over {limits.max_request_bytes:,}"))
        chunks.append(chunk)
    body = b"".join(chunks)
    if _too_deep(body, MAX_JSON_DEPTH):
        raise Refusal(400, f"the request body nests deeper than {MAX_JSON_DEPTH} levels of arrays and objects; send "
                           f"{EXPECTED[path]}")  # fmt: skip
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # not JSON, not UTF-8, NaN/Infinity, a number of 4,300+ digits
        raise Refusal(400, f"the request body is not valid JSON ({str(err):.200}); send {EXPECTED[path]} with "
                           f"Content-Type: application/json") from None  # fmt: skip
    try:
        return schema.model_validate(data)
    except ValidationError as err:
        raise validation_message(path, err) from None


class GuardMiddleware:
    """ASGI middleware in front of the app: a request whose headers exceed `max_header_bytes` gets a 431 and one
    whose Host is not allowed a 400, both in the documented JSON shape, before any route runs; every answer carries
    the page's security headers. Pure ASGI (no per-request task of Starlette's BaseHTTPMiddleware)."""

    def __init__(self, app: Any, guards: Guards):
        self.app, self.guards = app, guards
        self.hosts = {h.lower() for h in guards.allowed_hosts}
        self.extra = [(k.encode(), v.encode()) for k, v in guards.extra_headers.items()]

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = scope.get("headers") or []
        size = sum(len(k) + len(v) + 4 for k, v in headers)
        refusal = None
        if size > self.guards.max_header_bytes:
            refusal = (431, f"the request's headers have {size:,} bytes, over this server's limit of "
                            f"{self.guards.max_header_bytes:,}; send fewer or shorter headers")  # fmt: skip
        elif self.hosts:
            host = next((v.decode("latin-1") for k, v in headers if k == b"host"), "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name.lower() not in self.hosts:
                refusal = (400, f"this server does not answer for the host {host[:100]!r}; it answers "
                                f"{sorted(self.hosts)} (allowed_hosts= at its start; a name a page of another "
                                "site resolves to this machine is refused on purpose)")  # fmt: skip
        if refusal is not None:
            status, message = refusal
            response = Response(error_body(status, message), status_code=status, media_type="application/json",
                                headers={"connection": "close"})  # fmt: skip
            return await response(scope, receive, send)

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.extra]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


def build_app(runs: list[ServedRun], limits: Limits, server: dict, guards: Guards | None = None) -> Any:
    """The app over the loaded runs, wrapped in its guards (`GuardMiddleware`; CORS for `guards.cors_origins`
    only). `server`: what /info says about the server's settings."""
    guards = guards or Guards()
    by_name = {r.name: r for r in runs}

    async def lifespan(app: FastAPI) -> Any:
        for run in runs:
            run.batcher.start()
        yield
        for run in runs:
            await run.batcher.stop()

    app = FastAPI(title="matching-serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/openapi.json")

    @app.exception_handler(Refusal)
    async def refused(request: Request, exc: Refusal) -> Response:
        response = error_response(exc.status, exc.message)
        if exc.status == 413:  # the rest of the body is not read: the connection closes instead of draining it
            response.headers["connection"] = "close"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:  # 404, 405 of the router
        if exc.status_code == 404:
            message = f"no endpoint {request.url.path[:100]!r}; the endpoints: {ENDPOINTS}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; the endpoints: {ENDPOINTS}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message)

    def run_of(request: Request) -> ServedRun:
        name = request.query_params.get("run")
        if name is None:
            return runs[0]
        if name not in by_name:
            raise Refusal(404, f"no run named {name[:100]!r} is served here; runs: {list(by_name)} (GET /info lists "
                               "them)")  # fmt: skip
        return by_name[name]

    def ranking_run(request: Request) -> ServedRun:
        run = run_of(request)
        info = run.info
        if info["kind"] != "rank":
            raise Refusal(400, f"this model classifies pairs into {info['labels']} (task {info['task']}); it does not "
                               f"rank. POST the pairs to /classify, or serve a model trained on a ranking task "
                               f"({', '.join(RANKING_TASKS)})")  # fmt: skip
        return run

    @app.post("/classify", **openapi_of_route(ClassifyRequest, ClassifyAnswer))
    async def classify(request: Request) -> Response:
        run = run_of(request)
        body = await _read(request, ClassifyRequest, limits)
        _count("pairs", len(body.pairs), limits.max_pairs, "limits.max_pairs")
        pairs = tuple(read_pair(i, p, run.info["columns"]) for i, p in enumerate(body.pairs))
        return await run.ask(ClassifyQuery(pairs))

    @app.post("/rank", **openapi_of_route(RankRequest, RankAnswer))
    async def rank(request: Request) -> Response:
        run = ranking_run(request)
        body = await _read(request, RankRequest, limits)
        _count("candidates", len(body.candidates), limits.max_candidates, "limits.max_candidates")
        candidates = tuple(checked_text(f"candidates[{i}]", c) for i, c in enumerate(body.candidates))
        return await run.ask(RankQuery(checked_text("query", body.query), candidates))

    async def rerank(request: Request) -> Response:
        run = ranking_run(request)
        body = await _read(request, RerankRequest, limits)
        _count("documents", len(body.documents), limits.max_candidates, "limits.max_candidates")
        return await run.ask(rerank_query(body, run.name))

    for path in ("/rerank", "/v1/rerank", "/v2/rerank"):  # the paths Cohere's, Jina's and Infinity's clients post to
        app.post(path, **openapi_of_route(RerankRequest, RerankAnswer))(rerank)

    @app.post("/align", **openapi_of_route(AlignRequest, None))
    async def align(request: Request) -> Response:
        run = run_of(request)
        body = await _read(request, AlignRequest, limits)
        return await run.ask(AlignQuery(checked_text("a", body.a), checked_text("b", body.b)))

    @app.get("/health")
    async def health() -> Response:
        stopped = [f"the batcher of run {r.name!r} stopped" for r in runs if not r.batcher.alive]
        return PlainTextResponse("ok") if not stopped else PlainTextResponse("; ".join(stopped), status_code=503)

    @app.get("/info")
    async def info() -> Response:
        listed = [{"name": r.name, **r.info} for r in runs]
        return JSONResponse({"model": runs[0].info, "runs": listed, "server": server})

    @app.get("/")
    async def page() -> Response:
        return HTMLResponse((PAGE / "index.html").read_text(encoding="utf-8"))

    @app.get("/page/{name}")
    async def page_file(name: str) -> Response:
        if name not in PAGE_TYPES:
            return error_response(404, f"no page file {name[:100]!r}; the page is at /")
        return Response((PAGE / name).read_bytes(), media_type=PAGE_TYPES[name])

    schemas = openapi_schemas()
    default_openapi = app.openapi

    def openapi() -> dict:  # FastAPI's schema of the routes, with the request and answer models they read by hand
        if app.openapi_schema is None:
            document = default_openapi()
            document.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    wrapped: Any = app
    if guards.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        wrapped = CORSMiddleware(wrapped, allow_origins=list(guards.cors_origins), allow_methods=["GET", "POST"],
                                 allow_headers=["content-type"])  # fmt: skip
    return GuardMiddleware(wrapped, guards)


#: The models /openapi.json describes (the routes read their bodies themselves, behind the guards of `_read`).
_MODELS = (ClassifyRequest, ClassifyAnswer, RankRequest, RankAnswer, AlignRequest, RerankRequest, RerankAnswer,
           ErrorAnswer)  # fmt: skip
_REF = "#/components/schemas/{model}"


def openapi_schemas() -> dict:
    """The JSON Schemas of the request and answer models, as OpenAPI components."""
    from pydantic.json_schema import models_json_schema

    _, top = models_json_schema([(m, "validation") for m in _MODELS], ref_template=_REF)
    return top.get("$defs", {})


def openapi_of_route(request: type[BaseModel], answer: type[BaseModel] | None) -> dict:
    """A route's OpenAPI description: its JSON body, its answer and the error answer every endpoint gives."""
    error = {"description": "what was wrong and what to do", "content": {"application/json": {
        "schema": {"$ref": _REF.format(model="ErrorAnswer")}}}}  # fmt: skip
    responses: dict = {code: error for code in (400, 413, 415, 422, 504)}
    if answer is not None:
        responses[200] = {"description": "the answer", "content": {"application/json": {
            "schema": {"$ref": _REF.format(model=answer.__name__)}}}}  # fmt: skip
    body = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model=request.__name__)}}},
    }
    return {"openapi_extra": {"requestBody": body}, "responses": responses}


#: The endpoints, for the 404 and 405 answers.
ENDPOINTS = "GET / /health /info /openapi.json; POST /classify /rank /rerank /align"
