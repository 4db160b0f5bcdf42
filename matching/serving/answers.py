"""The answers of `matching-serve`, as pydantic models: GET /openapi.json publishes their schemas
(matching.serving.http) and the handlers render every /classify, /rank and /rerank answer through them
(matching.serving.http, matching.serving.rerank), so what is published and what is sent are one shape, written once;
and its refusals: the error body, the status of each reason a query is refused.

An answer is serialised with `exclude_unset`: a field the worker does not set (a result's `document` when
`return_documents` was not asked, `meta.warnings` when no document was cut) is left out, not sent as null."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def body(self) -> bytes:
        """The answer's JSON body, as sent."""
        return self.model_dump_json(exclude_unset=True).encode()


class ClassifyAnswer(_Answer):
    predictions: list[dict[str, Any]]


class RankAnswer(_Answer):
    ranking: list[dict[str, Any]]


class RerankResult(_Answer):
    index: int
    relevance_score: float
    document: dict[str, Any] | str | None = None  # an object as given (Cohere, Jina); a text for Infinity
    chunk: int | None = None  # the chunk of a long document that scored best (max_chunks_per_doc; 0: the first)


class BilledUnits(_Answer):
    search_units: int


class RerankMeta(_Answer):
    """Cohere's `meta`: its billed units, and the documents cut to the token limit (`warnings` says so in words,
    `truncated` lists their indices); both left out when none was cut."""

    billed_units: BilledUnits
    warnings: list[str] | None = None
    truncated: list[int] | None = None


class RerankUsage(_Answer):
    """Jina's and Infinity's `usage`: the tokens the model read, the query counted with each document."""

    prompt_tokens: int
    total_tokens: int


class RerankAnswer(_Answer):
    """What /rerank answers: Cohere's shape (`id`, `results`, `meta`) with Jina's and Infinity's `model` and
    `usage`."""

    id: str
    model: str
    results: list[RerankResult]
    meta: RerankMeta
    usage: RerankUsage


class ErrorAnswer(BaseModel):
    """Every error's body: what was wrong and what to do, and the status."""

    error: str
    status: int


def error_body(status: int, message: str) -> bytes:
    """The JSON body of every error answer: `{"error": <what was wrong and what to do>, "status": <code>}`."""
    return json.dumps({"error": message, "status": status}, ensure_ascii=False).encode()


class Refusal(Exception):
    """A request the front answers itself with a 4xx JSON error."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


#: The HTTP status of each reason the engine refuses a query for (matching.inference.queries.Refused), and of a job
#: that waited in the queue past the server's timeout.
STATUS = {"invalid": 422, "too_large": 413, "unsupported": 501, "failed": 500, "timeout": 504}

#: What a client is told when our code fails on its request (the traceback goes to the server's log).
BUG = "the model failed on this request ({}); this is a bug in matching: please report it with the server's log"
