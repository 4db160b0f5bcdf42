"""What a loaded model is asked and what it answers, typed: the queries that are not HTTP's (`ClassifyQuery`,
`RankQuery`, `RerankQuery`, `AlignQuery`), the `Limits` a query may not pass, and the answers (`Classified`,
`Ranking`, `Alignment`) or why a query is refused (`Refused`). matching.inference.answering answers them;
`Matcher`, `matching-predict` and the server ask them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from matching.data.pairs import Pair
from matching.data.tables import pair_of_mapping, text_names
from matching.errors import DataFormatError, RunError


@dataclass(frozen=True)
class Limits:
    """What one query may hold (the server's conf/serve.yaml `limits`; None to `answer_all`: no limit)."""

    max_pairs: int = 256  # pairs in one classify query
    max_candidates: int = 1000  # candidates of one rank or rerank query
    max_text_tokens: int = 512  # tokens in one text, counted by the run's tokenizer
    max_request_bytes: int = 4_000_000  # an HTTP request's body (checked by the server while it is read)
    max_header_bytes: int = 16_384  # an HTTP request's headers (the server's)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value < 1:
                raise RunError(f"limits.{name} must be a positive whole number, got {value!r}")


#: The tasks whose models rank (the rest classify), as the messages that send a user to one name them.
RANKING_TASKS = ("wikiqa", "trecqa", "ubuntu", "pairs_rank", "pairs_positives")

PairLike = tuple | list | dict | Pair


def as_pairs(
    items: Iterable[PairLike], source: str = "pairs", columns: dict[str, str | None] | None = None
) -> list[Pair]:
    """New pairs from tuples `(a, b[, group])`, dicts (keyed by the run's own `columns` or the usual names, see
    matching.data.tables.pair_of_mapping) or `Pair`s; an item of another shape, a text that is not a string or an
    empty text is a DataFormatError naming the item (`pairs[i]`). A Pair keeps its line number (the commands' input
    files); the others have none, and later errors count pairs from 1."""
    pairs = []
    for index, item in enumerate(items):
        where = f"{source}[{index}]"
        if isinstance(item, Pair):
            pair = item
        elif isinstance(item, dict):
            pair = pair_of_mapping(item, where, columns)
        elif isinstance(item, (tuple, list)) and len(item) in (2, 3) and all(isinstance(t, str) for t in item[:2]):
            pair = Pair(item[0], item[1], "", None if len(item) == 2 else str(item[2]))
        else:
            raise DataFormatError(
                f"{where}: expected a pair of texts, as a tuple (a, b), a dict {{'a': ..., 'b': ...}} or a Pair; "
                f"got {item!r:.80}"
            )
        if not pair.a.strip() or not pair.b.strip():
            side = "first" if not pair.a.strip() else "second"
            raise DataFormatError(f"{where}: the {side} text is empty; give both texts of the pair")
        pairs.append(pair)
    return pairs


def pair_texts(where: str, item: object, columns: dict[str, str | None]) -> tuple[str, str]:
    """A pair given as an object (a /classify row)'s two texts, by the rule a file of pairs is read by
    (matching.data.tables.pair_of_mapping): under the run's own column names, else "a"/"b" or one of the usual pairs
    (premise/hypothesis, question/answer, ...); other keys (an id, a label) are ignored; the key of one text without
    its partner's (`{"b": .., "text": ..}`, one of the run's own names alone), two usual pairs at once, or texts that
    cannot be told, are a DataFormatError that names the missing key, lists the keys and says how to name the texts:
    never read by position, perhaps swapped."""
    a, b = text_names(columns)
    whole = bool(columns.get("a")) == bool(columns.get("b"))  # both of the run's own names, or neither ("a", "b")
    if whole and isinstance(item, dict) and len(item) == 2 and all(isinstance(item.get(k), str) for k in (a, b)):
        return item[a], item[b]  # exactly the two names: nothing else to tell apart
    example = json.dumps({a: "first text", b: "second text"})
    other = "" if (a, b) == ("a", "b") else ' or {"a": ..., "b": ...}'
    advice = (f"Give each pair as {example}{other}, or under one of the usual pairs of names (premise/hypothesis, "
              f"question/answer, ...); other keys are ignored (GET /info lists the model's own names under "
              f"\"columns\")")  # fmt: skip
    read = pair_of_mapping(item, where, {"a": columns.get("a"), "b": columns.get("b")}, advice=advice)
    return read.a, read.b


# -- queries ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassifyQuery:
    """Pairs to answer one by one: `(a, b)` texts or `Pair`s (whose lines the messages name); `source` names them."""

    pairs: Sequence[tuple[str, str] | Pair]
    source: str = "pairs"


@dataclass(frozen=True)
class RankQuery:
    """A query and its candidates (second texts), to rank best first; only the best `top_n` (None: all)."""

    query: str
    candidates: Sequence[str]
    top_n: int | None = None


@dataclass(frozen=True)
class RerankQuery:
    """A rerank's engine fields: the query, its documents' texts, the best `top_n`, the tokens a document is cut to
    (`max_tokens`, at most limits.max_text_tokens; None: that limit), whether a longer one is cut (else refused)
    and how many chunks of that length a long document is scored as (`max_chunks`; see the module docstring)."""

    query: str
    documents: Sequence[str]
    top_n: int | None = None
    max_tokens: int | None = None
    truncate: bool = True
    max_chunks: int = 1


@dataclass(frozen=True)
class AlignQuery:
    """One pair whose alignment matrices are asked for."""

    a: str
    b: str


Query = ClassifyQuery | RankQuery | RerankQuery | AlignQuery


# -- answers ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Refused:
    """A query not answered: `why` is "invalid" (a text without a token), "too_large" (over a limit), "unsupported"
    (this model or runtime cannot) or "failed" (an error while answering it: `error`)."""

    why: str
    message: str
    error: Exception | None = None


@dataclass(frozen=True)
class Scored:
    """One pair's answer: the most probable label and every label's probability; a ranking model's also its `score`
    (logit[match] − logit[no match]: it orders as P(match) but never saturates at 1.0) and `p_match`."""

    label: str
    probs: dict[str, float]
    score: float | None = None
    p_match: float | None = None

    def as_dict(self) -> dict:
        """`Matcher.predict`'s answer: `{"score", "p_match"}` of a ranking model, else `{"label", "probs"}`."""
        if self.score is not None:
            return {"score": self.score, "p_match": self.p_match}
        return {"label": self.label, "probs": self.probs}


@dataclass(frozen=True)
class Ranked:
    """A candidate in a ranking: its position in the query, `score` and `p_match` as `Scored`'s, and for a document
    scored as chunks the chunk that scored best (0: the first)."""

    index: int
    score: float
    p_match: float
    chunk: int | None = None


@dataclass(frozen=True)
class Classified:
    """A classify query's answers, one per pair in their order."""

    pairs: list[Scored]


@dataclass(frozen=True)
class Ranking:
    """A rank or rerank query's answer: the candidates best first (ties in order), at most `top_n`; the tokens the
    model read (the query counted with each candidate or chunk); the candidates not read whole (by index) and the
    tokens a document was cut to (a rerank's `limit`); the documents scored as several chunks."""

    ranked: list[Ranked]
    tokens: int
    cut: list[int]
    limit: int | None = None
    chunked: list[int] | None = None


@dataclass(frozen=True)
class Alignment:
    """An align query's answer: both sides' tokens as the model sees them ("<null>" first when it uses the NULL
    token), which are unknown words (a table's, hashed to an OOV vector; never for an encoder), every matrix the
    aligner used by name ((len a, len b) each), each matrix's caption and the range of its values as the aligner
    declares them (None where not known), and the pair's answer."""

    a_tokens: list[str]
    b_tokens: list[str]
    unknown: dict[str, list[bool]]
    matrices: dict[str, np.ndarray]
    about: dict[str, dict[str, Any]]
    scored: Scored


Answer = Classified | Ranking | Alignment


def ranked(scored: Sequence[Scored]) -> list[Ranked]:
    """Pairs' answers of a ranking model as a ranking: best first, ties in order."""
    order = sorted(range(len(scored)), key=lambda i: (-scored[i].score, i))
    return [Ranked(i, scored[i].score, scored[i].p_match) for i in order]
