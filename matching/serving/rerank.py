"""The rerank wire protocol of Cohere's (v1, v2), Jina's and Infinity's APIs, in one place: the request as their
clients send it (`RerankRequest`), what of it the engine answers (`query_of`: a `RerankQuery` of
matching.inference.queries) and what only the wire needs (`Wire`: the documents to repeat, the model name to echo,
the score to report), and the answer in the shape their clients read (`answer_of`), built from the models GET
/openapi.json publishes (matching.serving.answers)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from matching.inference.queries import Ranking, RerankQuery
from matching.serving.answers import (
    BilledUnits,
    Refusal,
    RerankAnswer,
    RerankMeta,
    RerankResult,
    RerankUsage,
)

#: The paths Cohere's, Jina's and Infinity's clients post to.
PATHS = ("/rerank", "/v1/rerank", "/v2/rerank")
#: What /rerank expects, quoted by the error messages.
EXPECTED = '{"query": "a question", "documents": ["a passage", ...], "top_n": 3, "return_documents": false}'
#: What a document of /rerank may be, said once for a document that is neither (pydantic reports each alternative).
DOCUMENT = 'a document is a string or an object with a string "text" (or the fields rank_fields names)'


class RerankDocument(BaseModel):
    """A document given as an object (Cohere's and Jina's form): its `text`, or the fields `rank_fields` names; its
    other fields (`id`, `title`, ...) are kept and repeated by `return_documents`."""

    model_config = ConfigDict(extra="allow", strict=True)
    text: str | None = None


class RerankRequest(BaseModel):
    """The rerank request of Cohere's (v1, v2), Jina's and Infinity's APIs, every field their clients send (LangChain's
    and Haystack's Cohere rankers, LlamaIndex's, infinity_client): a query, its documents (texts, or objects), the
    best `top_n`, whether the answer repeats each document; `rank_fields` (the object fields read, in order, their
    values joined by a newline), `max_tokens_per_doc` (each document cut to that many tokens), Jina's `truncation`
    (false: a document over the server's limit is refused instead of cut), Infinity's `raw_scores` (the logit
    margin as `relevance_score`; a request that has the field is Infinity's, and its returned documents are texts, as
    Infinity gives them, not objects), Cohere's `priority` (accepted: requests are answered in the order they come) and
    Cohere v1's `max_chunks_per_doc` (a long document is split into chunks of the token limit, at most that many,
    and scored by its best chunk, which the answer's `chunk` names; without it, a long document is cut to its first
    chunk). `model` is accepted and echoed (a client names one); it selects nothing: `?run=` does."""

    model_config = ConfigDict(extra="forbid", strict=True)
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


@dataclass(frozen=True)
class Wire:
    """What a rerank answer says beyond the engine's ranking: what `return_documents` repeats of each document (None:
    not asked), the model name to echo, and whether `relevance_score` is the logit margin (Infinity's `raw_scores`)
    instead of P(match)."""

    shown: tuple[dict | str, ...] | None
    model: str
    raw_scores: bool


def query_of(body: RerankRequest, run_name: str) -> tuple[RerankQuery, Wire]:
    """The engine's query of a valid /rerank body, and what the answer repeats: each document's text (a string; an
    object's `text`, or the values of its `rank_fields` in their order, joined by a newline), what `return_documents`
    repeats (each object as given, a string as {"text": ...}; Infinity's: the texts), and the options checked."""
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
            texts.append(document)
            continue
        given = document.model_dump(exclude_none=True)
        missing = [f for f in fields if not isinstance(given.get(f), str)]
        if missing:
            raise Refusal(422, f"invalid request: documents[{i}] has no string {missing[0]!r} (its fields: "
                               f"{sorted(given)}); {DOCUMENT}")  # fmt: skip
        texts.append("\n".join(given[f] for f in fields))
    shown = None
    if body.return_documents and "raw_scores" in body.model_fields_set:  # Infinity's request: its answer's form
        shown = tuple(texts)
    elif body.return_documents:
        shown = tuple({"text": d} if isinstance(d, str) else d.model_dump(exclude_none=True) for d in body.documents)
    query = RerankQuery(body.query, tuple(texts), body.top_n, body.max_tokens_per_doc,
                        body.truncation is not False, body.max_chunks_per_doc or 1)  # fmt: skip
    return query, Wire(shown, body.model or run_name, body.raw_scores)


def answer_of(ranking: Ranking, wire: Wire) -> RerankAnswer:
    """The answer in the shape rerank clients read: Cohere's (`id`, `results`, `meta`, with the documents cut in
    `meta.warnings` and `meta.truncated`), with Jina's and Infinity's `model` and `usage` (the tokens the model read,
    the query counted with each document or chunk); a chunked document's result names its best `chunk`."""
    results, chunked = [], set(ranking.chunked or ())
    for r in ranking.ranked:
        extra = {} if wire.shown is None else {"document": wire.shown[r.index]}
        if r.index in chunked:
            extra["chunk"] = r.chunk
        score = r.score if wire.raw_scores else r.p_match
        results.append(RerankResult(index=r.index, relevance_score=score, **extra))
    said: dict = {}  # the documents cut, if any
    cut, limit = ranking.cut, ranking.limit
    if cut:
        many = len(cut) > 1
        chunks = " (after the chunks max_chunks_per_doc allows)" if ranking.chunked is not None else ""
        said = {"truncated": cut, "warnings": [
            f"{len(cut)} document{'s' if many else ''} (documents{cut}) had more than {limit} tokens and "
            f"{'were' if many else 'was'} cut to the first {limit}{chunks} before scoring (max_tokens_per_doc, or "
            "the server's limits.max_text_tokens)"]}  # fmt: skip
    meta = RerankMeta(billed_units=BilledUnits(search_units=1), **said)
    usage = RerankUsage(prompt_tokens=ranking.tokens, total_tokens=ranking.tokens)
    return RerankAnswer(id=str(uuid.uuid4()), model=wire.model, results=results, meta=meta, usage=usage)
