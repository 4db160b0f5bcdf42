"""A pair of texts (`Pair`), and a pair from a mapping with the usual field names, as new pairs and tables of
one's own spell them."""

from __future__ import annotations

from dataclasses import dataclass, field

from matching.errors import DataFormatError

FIELD_ALIASES = [("a", "b"), ("sentence1", "sentence2"), ("premise", "hypothesis"), ("question", "answer"),
                 ("context", "response")]  # fmt: skip
GROUP_ALIASES = ("group", "qid", "question_id", "id")


@dataclass(frozen=True, slots=True)
class Pair:
    """One example: two texts and the corpus's label string.

    ``group`` identifies the question/context a candidate belongs to in ranking corpora; NLI readers
    leave it ``None``.
    """

    a: str
    b: str
    label: str
    group: str | None = None
    # 1-based line of the example in its file (0: unknown), for error messages; provenance, not content, so it
    # takes no part in equality.
    line: int = field(default=0, compare=False)


def pair_from_mapping(obj: object, where: str, line: int = 0) -> Pair:
    """A new pair (no label) from a JSON object or dict: its two texts under one of FIELD_ALIASES, and an optional
    group id under one of GROUP_ALIASES; DataFormatError naming `where` otherwise."""
    if not isinstance(obj, dict):
        raise DataFormatError(f"{where}: expected a JSON object with the two texts, got {obj!r:.60}")
    for ka, kb in FIELD_ALIASES:
        if ka in obj and kb in obj:
            if not isinstance(obj[ka], str) or not isinstance(obj[kb], str):
                raise DataFormatError(
                    f"{where}: {ka!r} and {kb!r} must be strings, got {obj[ka]!r:.40}, {obj[kb]!r:.40}"
                )
            group = next((obj[k] for k in GROUP_ALIASES if obj.get(k) is not None), None)
            return Pair(obj[ka], obj[kb], "", None if group is None else str(group), line)
    raise DataFormatError(
        f"{where}: no pair of text fields among {[list(p) for p in FIELD_ALIASES]}; found keys {sorted(obj)}"
    )
