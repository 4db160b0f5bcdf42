"""The answers of `matching-serve`, as pydantic models: GET /openapi.json publishes their schemas
(matching.serving.http) and the worker builds every /classify, /rank and /rerank answer from them
(matching.serving.batcher), so what is published and what is sent are one shape, written once.

An answer is serialised with `exclude_unset`: a field the worker does not set (a result's `document` when
`return_documents` was not asked, `meta.warnings` when no document was cut) is left out, not sent as null."""

from __future__ import annotations

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
