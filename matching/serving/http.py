"""The HTTP front of `matching-serve` (see matching/serve.py): a FastAPI app, its handlers (one module-level function
per endpoint, reading the runs, limits and settings from the app's state), its request schemas, the JSON error
answers, the page at `/`, and the guards a server on localhost needs. Needs the serve extra (fastapi, uvicorn); only
their documented APIs are used.

A handler reads its body (matching.serving.reading: its size while it is read, media type, JSON and nesting, every
text's encoding, the schema), checks what it can without the model (the number of pairs or candidates), makes it the
engine's typed query (matching.inference.queries; a rerank's through its wire protocol, matching.serving.rerank) and
hands it to the `Batcher` of the run it names (`?run=<name>`; the first run without it); the typed answer it gets back
is rendered through the answer models GET /openapi.json publishes (matching.serving.answers), or its refusal as an
error answer. What reaches a browser is guarded: JSON only (a form post or `text/plain` cannot reach the API without a
CORS preflight), a Host allow-list (against DNS rebinding), no CORS unless configured, a Content-Security-Policy and
frame headers. GET /info serves each run's description, computed once when the run was loaded (`Matcher.description`),
with its endpoints and the limits: nothing is read or hashed here per request."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from matching.errors import DataFormatError
from matching.inference import queries as asked
from matching.serving import answers as said
from matching.serving import rerank as rerank_wire
from matching.serving.answers import ClassifyAnswer, ErrorAnswer, RankAnswer, Refusal, RerankAnswer
from matching.serving.batcher import Batcher
from matching.serving.reading import read_body

log = logging.getLogger(__name__)

#: What each endpoint expects, quoted by the error messages.
EXPECTED = {
    "/classify": '{"pairs": [{"a": "first text", "b": "second text"}, ...]}',
    "/rank": '{"query": "a question", "candidates": ["an answer", "another answer", ...]}',
    "/align": '{"a": "first text", "b": "second text"}',
    **dict.fromkeys(rerank_wire.PATHS, rerank_wire.EXPECTED),
}

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


def error_response(status: int, message: str) -> Response:
    return Response(said.error_body(status, message), status_code=status, media_type="application/json")


def read_pair(index: int, pair: Any, columns: dict[str, str]) -> tuple[str, str]:
    """A /classify pair's two texts, read as a file's row is (matching.inference.queries.pair_texts), or a 422 that
    names the missing key, lists the keys and says how to name the texts: never read by position."""
    where = f"pairs[{index}]"
    try:
        a, b = asked.pair_texts(where, pair, columns)
    except DataFormatError as err:
        raise Refusal(422, f"invalid request: {err}") from None
    return a, b


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

    async def ask(self, query: asked.Query, render: Callable[[Any], BaseModel | bytes]) -> Response:
        """The answer of `query` rendered by `render` (an answer model of /openapi.json, or JSON bytes), or its
        refusal as an error answer."""
        answer = await self.batcher.ask(query)
        if not isinstance(answer, asked.Refused):
            try:
                body = render(answer)
                body = body if isinstance(body, bytes) else body.model_dump_json(exclude_unset=True).encode()
                return Response(body, media_type="application/json")
            except Exception as err:  # noqa: BLE001 - ours, and this request's alone
                log.exception("rendering a %s answer failed", type(query).__name__)
                answer = asked.Refused("failed", f"{type(err).__name__}: {err}", err)
        message = said.BUG.format(answer.message) if answer.why == "failed" else answer.message
        return error_response(said.STATUS[answer.why], message)


def served_info(description: dict, can_align: bool, limits: asked.Limits) -> dict:
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
            response = Response(said.error_body(status, message), status_code=status, media_type="application/json",
                                headers={"connection": "close"})  # fmt: skip
            return await response(scope, receive, send)

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.extra]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


async def refused(request: Request, exc: Refusal) -> Response:
    response = error_response(exc.status, exc.message)
    if exc.status == 413:  # the rest of the body is not read: the connection closes instead of draining it
        response.headers["connection"] = "close"
    return response


async def http_error(request: Request, exc: StarletteHTTPException) -> Response:  # 404, 405 of the router
    if exc.status_code == 404:
        message = f"no endpoint {request.url.path[:100]!r}; the endpoints: {ENDPOINTS}"
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}; the endpoints: {ENDPOINTS}"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, message)


def run_of(request: Request, ranking: bool = False) -> ServedRun:
    """The run `?run=` names (the first without it); a ranking endpoint's must rank."""
    runs: list[ServedRun] = request.app.state.runs
    name = request.query_params.get("run")
    run = runs[0] if name is None else next((r for r in runs if r.name == name), None)
    if run is None:
        raise Refusal(404, f"no run named {name[:100]!r} is served here; runs: {[r.name for r in runs]} (GET /info "
                           "lists them)")  # fmt: skip
    info = run.info
    if ranking and info["kind"] != "rank":
        raise Refusal(400, f"this model classifies pairs into {info['labels']} (task {info['task']}); it does not "
                           f"rank. POST the pairs to /classify, or serve a model trained on a ranking task "
                           f"({', '.join(asked.RANKING_TASKS)})")  # fmt: skip
    return run


async def classify(request: Request) -> Response:
    run, limits = run_of(request), request.app.state.limits
    body = await read_body(request, ClassifyRequest, limits, EXPECTED["/classify"])
    _count("pairs", len(body.pairs), limits.max_pairs, "limits.max_pairs")
    pairs = tuple(read_pair(i, p, run.info["columns"]) for i, p in enumerate(body.pairs))

    def render(answer: asked.Classified) -> ClassifyAnswer:
        return ClassifyAnswer(predictions=[s.as_dict() for s in answer.pairs])

    return await run.ask(asked.ClassifyQuery(pairs), render)


async def rank(request: Request) -> Response:
    run, limits = run_of(request, ranking=True), request.app.state.limits
    body = await read_body(request, RankRequest, limits, EXPECTED["/rank"])
    _count("candidates", len(body.candidates), limits.max_candidates, "limits.max_candidates")
    candidates = tuple(body.candidates)

    def render(answer: Any) -> RankAnswer:
        return RankAnswer(ranking=[{"index": r.index, "candidate": candidates[r.index], "score": r.score,
                                    "p_match": r.p_match} for r in answer.ranked])  # fmt: skip

    return await run.ask(asked.RankQuery(body.query, candidates), render)


async def rerank(request: Request) -> Response:
    run, limits = run_of(request, ranking=True), request.app.state.limits
    body = await read_body(request, rerank_wire.RerankRequest, limits, rerank_wire.EXPECTED)
    _count("documents", len(body.documents), limits.max_candidates, "limits.max_candidates")
    query, wire = rerank_wire.query_of(body, run.name)
    return await run.ask(query, lambda ranking: rerank_wire.answer_of(ranking, wire))


async def align(request: Request) -> Response:
    run = run_of(request)
    body = await read_body(request, AlignRequest, request.app.state.limits, EXPECTED["/align"])
    return await run.ask(asked.AlignQuery(body.a, body.b), aligned_json)


def aligned_json(aligned: asked.Alignment) -> bytes:
    """An /align answer: `Matcher.align`'s, with which tokens are unknown words and what each matrix is (its caption)
    and the range its values can take (None where not known), its matrices as lists."""
    matrices = {name: m.astype("float64").round(6).tolist() for name, m in aligned.matrices.items()}
    s = aligned.scored
    out = {"a_tokens": aligned.a_tokens, "b_tokens": aligned.b_tokens, "matrices": matrices, "label": s.label,
           "probs": s.probs, **({} if s.score is None else s.as_dict()), "unknown": aligned.unknown,
           "about": aligned.about}  # fmt: skip
    return json.dumps(out, ensure_ascii=False).encode()


async def health(request: Request) -> Response:
    stopped = [f"the batcher of run {r.name!r} stopped" for r in request.app.state.runs if not r.batcher.alive]
    return PlainTextResponse("ok") if not stopped else PlainTextResponse("; ".join(stopped), status_code=503)


async def info(request: Request) -> Response:
    runs = request.app.state.runs
    listed = [{"name": r.name, **r.info} for r in runs]
    return JSONResponse({"model": runs[0].info, "runs": listed, "server": request.app.state.server})


async def page(request: Request) -> Response:
    return HTMLResponse((PAGE / "index.html").read_text(encoding="utf-8"))


async def page_file(name: str) -> Response:
    if name not in PAGE_TYPES:
        return error_response(404, f"no page file {name[:100]!r}; the page is at /")
    return Response((PAGE / name).read_bytes(), media_type=PAGE_TYPES[name])


#: The POST endpoints: each path's handler, the request model it reads and the answer model it renders (None: JSON
#: of its own). They are plain Starlette routes: each handler reads its own body (`read_body`), so FastAPI's
#: per-request step of solving a route's parameters only handed the `Request` on, at a tenth of the front's CPU per
#: request (a py-spy profile of benchmarks/bench_serve.py at 32 clients); `build_app`'s openapi() describes them.
POSTS: dict[str, tuple[Callable, type[BaseModel], type[BaseModel] | None]] = {
    "/classify": (classify, ClassifyRequest, ClassifyAnswer),
    "/rank": (rank, RankRequest, RankAnswer),
    **dict.fromkeys(rerank_wire.PATHS, (rerank, rerank_wire.RerankRequest, RerankAnswer)),
    "/align": (align, AlignRequest, None),
}


def build_app(runs: list[ServedRun], limits: asked.Limits, server: dict, guards: Guards | None = None) -> Any:
    """The app over the loaded runs, wrapped in its guards (`GuardMiddleware`; CORS for `guards.cors_origins`
    only). `server`: what /info says about the server's settings. The handlers above read the runs, the limits and
    the server's settings from the app's state."""
    guards = guards or Guards()

    async def lifespan(app: FastAPI) -> Any:
        for run in runs:
            run.batcher.start()
        yield
        for run in runs:
            await run.batcher.stop()

    app = FastAPI(title="matching-serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    app.state.runs, app.state.limits, app.state.server = runs, limits, server
    app.add_exception_handler(Refusal, refused)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    for path, (handler, _, _) in POSTS.items():  # plain routes: see POSTS
        app.router.add_route(path, handler, methods=["POST"], include_in_schema=False)
    app.get("/health")(health)
    app.get("/info")(info)
    app.get("/")(page)
    app.get("/page/{name}")(page_file)
    schemas = openapi_schemas()
    default_openapi = app.openapi

    def openapi() -> dict:  # FastAPI's schema of its routes, with the POST endpoints and the models they read by hand
        if app.openapi_schema is None:
            document = default_openapi()
            posts = {path: {"post": operation(path, *endpoint)} for path, endpoint in POSTS.items()}
            document["paths"] = {**posts, **document.get("paths", {})}
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


_REF = "#/components/schemas/{model}"


def openapi_schemas() -> dict:
    """The JSON Schemas of the request and answer models (POSTS) and of the error answer, as OpenAPI components."""
    from pydantic.json_schema import models_json_schema

    models = dict.fromkeys(m for _, request, answer in POSTS.values() for m in (request, answer, ErrorAnswer) if m)
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    return top.get("$defs", {})


def operation(path: str, handler: Callable, request: type[BaseModel], answer: type[BaseModel] | None) -> dict:
    """A POST endpoint's OpenAPI operation, named as FastAPI names its own: its JSON body, its answer and the error
    answer every endpoint gives."""
    responses = dict.fromkeys(("400", "413", "415", "422", "504"),
                              _json("ErrorAnswer", description="what was wrong and what to do"))  # fmt: skip
    responses["200"] = _json(answer and answer.__name__, description="the answer")
    name = handler.__name__
    return {"summary": name.capitalize(), "operationId": f"{name}_{path.strip('/').replace('/', '_')}_post",
            "requestBody": _json(request.__name__, required=True),
            "responses": dict(sorted(responses.items()))}  # fmt: skip


def _json(model: str | None, **fields: Any) -> dict:
    """JSON of the model named (None: a JSON object of its own shape)."""
    schema = {"$ref": _REF.format(model=model)} if model else {"type": "object"}
    return {**fields, "content": {"application/json": {"schema": schema}}}


#: The endpoints, for the 404 and 405 answers.
ENDPOINTS = "GET / /health /info /openapi.json; POST /classify /rank /rerank /align"
