"""A pair of texts (`Pair`): what every reader gives (matching.data.readers, matching.data.tables)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
