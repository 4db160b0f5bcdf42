"""`answer_all`: queries in, answers out (the queries and answers: matching.inference.queries), the one way
`Matcher`, `matching-predict` and the server answer.

It prepares each query once by the run's text preparation (matching.data.preparation), which gives both its checks
(a text without a token, a text over `limits.max_text_tokens`, counted by the run's own tokenizer) and the model's
inputs; scores the pairs of every query but the alignments in one pass (`Predictor.logits_of`, which cuts them into
model batches within the run's memory budget) and, if that pass fails, query by query, so that only a query that
causes a failure is refused; then splits the logits, ranks and cuts. A query answers for itself: one refused never
fails the others.

A rerank's document longer than its token limit is cut to its first `limit` tokens, or, with `max_chunks` > 1 (Cohere's
`max_chunks_per_doc`), split into chunks of `limit` tokens, at most that many, each scored with the query: the
document's score is its best chunk's, and its `Ranked.chunk` says which (as search engines score a long page by its
best passage). What is left after the last chunk is not read, and the answer lists the document as cut.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from matching.data.pairs import Pair
from matching.data.preparation import PreparedPairs
from matching.inference.predictor import Predictor, match_margin, softmax
from matching.inference.queries import (
    RANKING_TASKS,
    Alignment,
    AlignQuery,
    Answer,
    Classified,
    ClassifyQuery,
    Limits,
    Query,
    Ranked,
    Ranking,
    RankQuery,
    Refused,
    RerankQuery,
    Scored,
)


# -- answering --------------------------------------------------------------------------------------------------------
@dataclass
class _Work:
    prepared: PreparedPairs
    owners: list[int] | None = None  # each row's candidate, where a document is scored as chunks
    limit: int | None = None


def answer_all(predictor: Predictor, queries: Sequence[Query], limits: Limits | None = None,
               source: str = "request") -> list[Answer | Refused]:  # fmt: skip
    """Each query's answer or why it is refused, in their order (see the module docstring)."""
    work: list[_Work | Refused] = []
    for query in queries:
        try:
            work.append(_prepare(predictor, query, limits))
        except Exception as err:  # noqa: BLE001 - this query's alone
            work.append(Refused("failed", f"{type(err).__name__}: {err}", err))
    scored = [i for i, (q, w) in enumerate(zip(queries, work, strict=True))
              if isinstance(w, _Work) and not isinstance(q, AlignQuery)]  # fmt: skip
    logits = dict(zip(scored, _logits(predictor, [work[i].prepared for i in scored], source), strict=True))
    out: list[Answer | Refused] = []
    for i, (query, w) in enumerate(zip(queries, work, strict=True)):
        try:
            if not isinstance(w, _Work) or isinstance(logits.get(i), Refused):
                out.append(w if not isinstance(w, _Work) else logits[i])
            elif isinstance(query, AlignQuery):
                out.append(_alignment(predictor, w.prepared))
            elif isinstance(query, ClassifyQuery):
                out.append(Classified(_scored(predictor, logits[i])))
            else:
                out.append(_ranking(predictor, query, w, logits[i]))
        except Exception as err:  # noqa: BLE001 - this query's alone
            out.append(Refused("failed", f"{type(err).__name__}: {err}", err))
    return out


def _logits(predictor: Predictor, prepared: list[PreparedPairs], source: str) -> list[np.ndarray | Refused]:
    """Each prepared query's logits, from one pass over them all; if it fails, query by query."""
    if not prepared:
        return []
    if len(prepared) == 1:
        return [_alone(predictor, prepared[0], source)]
    try:
        logits = predictor.logits_of(PreparedPairs.join(prepared), source)
    except Exception:  # noqa: BLE001 - scored again one by one below, each failure its own query's
        return [_alone(predictor, p, source) for p in prepared]
    ends = itertools.accumulate(len(p) for p in prepared)
    return [logits[end - len(p) : end] for p, end in zip(prepared, ends, strict=True)]


def _alone(predictor: Predictor, prepared: PreparedPairs, source: str) -> np.ndarray | Refused:
    try:
        return predictor.logits_of(prepared, source)
    except Exception as err:  # noqa: BLE001 - this query's alone
        return Refused("failed", f"{type(err).__name__}: {err}", err)


def _prepare(predictor: Predictor, query: Query, limits: Limits | None) -> _Work | Refused | Ranking:
    """The query's pairs, prepared once for both its checks and the model, why it is refused, or its answer (no
    candidates: no ranking)."""
    if isinstance(query, ClassifyQuery):
        pairs = [p if isinstance(p, Pair) else Pair(p[0], p[1], "", None, i + 1) for i, p in enumerate(query.pairs)]
        fields = [f"{query.source}[{i}].{side}" for i in range(len(pairs)) for side in "ab"]
    elif isinstance(query, AlignQuery):
        if not predictor.backend.can_align:
            return Refused("unsupported", f"this model runs on {predictor.backend.name}, whose graph returns the "
                                          "logits only: alignments need the PyTorch model (backend=torch)")  # fmt: skip
        pairs, fields = [Pair(query.a, query.b, "", None, 1)], ["a", "b"]
    else:
        candidates = query.candidates if isinstance(query, RankQuery) else query.documents
        if predictor.kind != "rank":
            return Refused("unsupported", f"this model classifies pairs into {predictor.labels} (task "
                           f"{predictor.task}); it does not rank. Use predict(pairs), or load a model trained on a "
                           f"ranking task ({', '.join(RANKING_TASKS)})")  # fmt: skip
        if isinstance(candidates, str):
            return Refused("invalid", "candidates must be a list of texts, not one string; wrap it: [candidate]")
        if query.top_n is not None and (not isinstance(query.top_n, int) or query.top_n < 1):
            return Refused("invalid", f"top_k must be a positive whole number or None, got {query.top_n!r}")
        if not candidates:
            return Ranking([], 0, [])
        pairs = [Pair(query.query, c, "", None, i) for i, c in enumerate(candidates)]
        listed = "candidates" if isinstance(query, RankQuery) else "documents"
        fields = ["query", *(f"{listed}[{i}]" for i in range(len(pairs)))]
    prepared = predictor.prepare(pairs)
    if limits is None:
        return _Work(prepared)
    counts = prepared.tokens.ravel().tolist()  # a0, b0, a1, b1, ...
    if not isinstance(query, (ClassifyQuery, AlignQuery)):  # the query once, then each candidate
        counts = [counts[0], *counts[1::2]]
    rerank = isinstance(query, RerankQuery)
    cut_from = 1 if rerank and query.truncate else None
    for i, (field, count) in enumerate(zip(fields, counts, strict=True)):
        if count == 0:
            return Refused("invalid", f"{field} is empty (no tokens); give a text with at least one word")
        if count > limits.max_text_tokens and (cut_from is None or i < cut_from):
            return Refused("too_large", f"{field} has {count} tokens, over this server's limit of "
                           f"{limits.max_text_tokens} (limits.max_text_tokens); shorten the text")  # fmt: skip
    if not rerank:
        return _Work(prepared)
    limit = min(query.max_tokens or limits.max_text_tokens, limits.max_text_tokens)
    return _chunked(predictor, query, prepared, limit)


def _chunked(predictor: Predictor, query: RerankQuery, prepared: PreparedPairs, limit: int) -> _Work:
    """A rerank's rows: each document cut to `limit` tokens, or, with `max_chunks` > 1, each one longer split into
    chunks of `limit` tokens (at most `max_chunks`), a row each."""
    cut = prepared.with_second_cut(limit)
    long = set(cut.second_cut()) if query.max_chunks > 1 else set()
    if not long:
        return _Work(cut, None, limit)
    tokenizer, vocab = predictor.text.tokenizer, predictor.vocab
    width = min(limit, predictor.max_length or limit)
    rows: list[tuple[int, list[str], np.ndarray, int]] = []  # (document, words, ids, tokens before the cut)
    for i in range(len(prepared)):
        if i not in long:
            rows.append((i, cut.words_b[i], cut.b[i], int(cut.tokens[i, 1])))
            continue
        words = tokenizer(query.documents[i])
        chunks = [words[k : k + width] for k in range(0, len(words), width)][: query.max_chunks]
        left = len(words) - sum(map(len, chunks))  # not read: the last chunk stands for it
        rows += [(i, c, vocab.encode(c), len(c) + (left if k == len(chunks) - 1 else 0)) for k, c in enumerate(chunks)]
    first, ids_a, count_a = prepared.words_a[0], prepared.a[0], int(prepared.tokens[0, 0])
    tokens = np.array([(count_a, n) for _, _, _, n in rows], np.int64).reshape(len(rows), 2)
    joined = PreparedPairs([first] * len(rows), [w for _, w, _, _ in rows], [ids_a] * len(rows),
                           [ids for _, _, ids, _ in rows], tokens, 0, [i for i, *_ in rows])  # fmt: skip
    return _Work(joined, [i for i, *_ in rows], limit)


def _scored(predictor: Predictor, logits: np.ndarray) -> list[Scored]:
    labels, probs = predictor.labels, softmax(np.asarray(logits))
    best = probs.argmax(axis=1).tolist()
    rows = [dict(zip(labels, row, strict=True)) for row in probs.tolist()]
    if predictor.kind != "rank":
        return [Scored(labels[b], row) for b, row in zip(best, rows, strict=True)]
    margins, p_match = match_margin(logits).tolist(), probs[:, 1].tolist()
    return [Scored(labels[b], row, s, p) for b, row, s, p in zip(best, rows, margins, p_match, strict=True)]


def _ranking(predictor: Predictor, query: RankQuery | RerankQuery, work: _Work, logits: np.ndarray) -> Ranking:
    """The candidates best first (ties: in order), a chunked document by its best chunk, cut to `top_n`."""
    scored = _scored(predictor, logits)
    best: dict[int, Ranked] = {}
    first: dict[int, int] = {}  # each candidate's first row
    for row, (owner, s) in enumerate(zip(work.owners or range(len(scored)), scored, strict=True)):
        chunk = None if work.owners is None else row - first.setdefault(owner, row)
        if owner not in best or s.score > best[owner].score:
            best[owner] = Ranked(owner, s.score, s.p_match, chunk)
    many = work.owners is not None
    chunked = sorted(o for o, n in Counter(work.owners).items() if n > 1) if many else None
    ranked = sorted(best.values(), key=lambda r: (-r.score, r.index))
    if not many:
        ranked = [Ranked(r.index, r.score, r.p_match) for r in ranked]
    cut = sorted({work.owners[i] if many else i for i in work.prepared.second_cut()})
    tokens = int(work.prepared.sides().sum())
    return Ranking(ranked[: query.top_n], tokens, cut, work.limit, chunked)


def _alignment(predictor: Predictor, prepared: PreparedPairs) -> Alignment:
    from matching.data.vocab import NULL
    from matching.model.matrices import matrix_title, value_range

    out = predictor.alignment(prepared)
    a, b = prepared.words_a[0], prepared.words_b[0]
    if predictor.null_token:
        a, b = [NULL, *a], [NULL, *b]
    index, cfg, marks = predictor.vocab.index, predictor.config, not predictor.reads_every_word
    unknown = {side: [marks and t != NULL and t not in index for t in tokens] for side, tokens in (("a", a), ("b", b))}
    about = {name: {"caption": matrix_title(name, cfg), "range": value_range(name, cfg)} for name in out["matrices"]}
    return Alignment(a, b, unknown, out["matrices"], about, _scored(predictor, out["logits"])[0])
