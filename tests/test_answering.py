"""matching.inference.answering: queries in, answers out, for Matcher, predict and the server alike (issue 103)."""

from __future__ import annotations

import numpy as np
import pytest

from matching.inference import load
from matching.inference.answering import answer_all
from matching.inference.queries import (
    AlignQuery,
    Classified,
    ClassifyQuery,
    Limits,
    Ranking,
    RankQuery,
    Refused,
    RerankQuery,
)
from matching.matcher import Matcher

QUERY = "how big is the moon"
CANDIDATES = ["the moon is about a quarter of the size of the earth", "paris is the capital of france",
              "the moon orbits the earth"]  # fmt: skip


@pytest.fixture(scope="module")
def ranking_model(wikiqa_run):
    return load(str(wikiqa_run[0]), backend="torch")


def test_one_pass_answers_each_query_as_alone(ranking_model):
    """A batch of queries of every kind gives each the answer it gets alone, in order and typed."""
    queries = [ClassifyQuery([(QUERY, c) for c in CANDIDATES]), RankQuery(QUERY, CANDIDATES, top_n=2),
               AlignQuery(QUERY, CANDIDATES[0]), RerankQuery(QUERY, CANDIDATES)]  # fmt: skip
    together = answer_all(ranking_model, queries)
    alone = [answer_all(ranking_model, [q])[0] for q in queries]
    assert [type(a) for a in together] == [Classified, Ranking, type(together[2]), Ranking]
    classified, ranked = together[0], together[1]
    scores = [s.score for s in classified.pairs]
    assert [r.index for r in ranked.ranked] == list(np.argsort(scores)[::-1][:2])
    for a, b in zip(together[0].pairs, alone[0].pairs, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-4) and a.p_match == pytest.approx(b.p_match, abs=1e-5)
    assert together[2].scored.score == pytest.approx(scores[0], abs=1e-4)
    assert set(together[2].about) == set(together[2].matrices) and all(
        "caption" in v for v in together[2].about.values()
    )
    assert [r.index for r in together[3].ranked] == [r.index for r in alone[3].ranked]


def test_a_refused_or_failing_query_answers_for_itself(ranking_model, monkeypatch):
    """Limits refuse an empty text or one too long, a bad top_n, a rank on no candidates is empty; a query whose pass
    fails is refused with its error, and the others of its batch are answered."""
    limits = Limits(max_text_tokens=8)
    long = " ".join(["moon"] * 12)
    answers = answer_all(ranking_model, [ClassifyQuery([(QUERY, "  ")]), ClassifyQuery([(QUERY, long)]),
                                         RankQuery(QUERY, CANDIDATES, top_n=0), RankQuery(QUERY, []),
                                         RankQuery(QUERY, CANDIDATES[1:])], limits)  # fmt: skip
    assert [a.why if isinstance(a, Refused) else None for a in answers[:3]] == ["invalid", "too_large", "invalid"]
    assert "pairs[0].b has 12 tokens" in answers[1].message
    assert answers[3].ranked == [] and len(answers[4].ranked) == 2

    logits_of = ranking_model.logits_of

    def poisoned(prepared, source):  # a pass over a pair with "poison" in it fails, as a bug of ours would
        if any("poison" in words for words in prepared.words_b):
            raise RuntimeError("poisoned")
        return logits_of(prepared, source)

    monkeypatch.setattr(ranking_model, "logits_of", poisoned)
    failing = answer_all(ranking_model, [ClassifyQuery([(QUERY, "poison")]), RankQuery(QUERY, CANDIDATES)])
    assert isinstance(failing[0], Refused) and failing[0].why == "failed" and failing[0].error is not None
    assert isinstance(failing[1], Ranking) and len(failing[1].ranked) == 3


def test_a_long_document_is_scored_by_its_best_chunk(ranking_model):
    """max_chunks: a document longer than its token limit is split into chunks of that limit (at most max_chunks),
    each scored with the query; its score is its best chunk's, which the answer names; the rest is cut."""
    limits = Limits(max_text_tokens=6)
    filler = "paris is the capital of france"  # 6 tokens: one chunk
    best = "the moon is about a quarter"
    document = f"{filler} {best} {filler}"
    (chunked,) = answer_all(ranking_model, [RerankQuery(QUERY, [CANDIDATES[1], document], max_chunks=3)], limits)
    alone = answer_all(ranking_model, [RerankQuery(QUERY, [filler, best])], limits)[0]
    by_index = {r.index: r for r in chunked.ranked}
    f, b = (r.score for r in sorted(alone.ranked, key=lambda r: r.index))
    assert by_index[1].chunk == (1 if b > f else 0) and by_index[1].score == pytest.approx(max(f, b), abs=1e-4)
    assert chunked.chunked == [1] and chunked.cut == []
    (first,) = answer_all(ranking_model, [RerankQuery(QUERY, [CANDIDATES[1], document])], limits)
    assert first.cut == [1] and {r.index: r for r in first.ranked}[1].score == pytest.approx(f, abs=1e-4)
    assert first.chunked is None and all(r.chunk is None for r in first.ranked)
    (two,) = answer_all(ranking_model, [RerankQuery(QUERY, [document], max_chunks=2)], limits)
    assert two.cut == [0] and two.ranked[0].chunk == (1 if b > f else 0)


def test_matcher_answers_through_answer_all(wikiqa_run):
    """Matcher's answers are answer_all's, and its description one frozen object whose fields it still answers."""
    matcher = Matcher.load(wikiqa_run[0])
    ranked = matcher.rank(QUERY, CANDIDATES)
    (answer,) = matcher.answer([RankQuery(QUERY, CANDIDATES)])
    assert [r["index"] for r in ranked] == [r.index for r in answer.ranked]
    assert matcher.kind == matcher.facts.kind == "rank" and matcher.labels == list(matcher.facts.labels)
    with pytest.raises(AttributeError):
        matcher.no_such_member  # noqa: B018
    with pytest.raises(Exception, match="top_k must be a positive whole number"):
        matcher.rank(QUERY, CANDIDATES, top_k=0)
