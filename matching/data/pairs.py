"""A pair of texts (`Pair`): what every reader gives (matching.data.readers, matching.data.tables)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Pair:
    """One example: two texts and the corpus's label string.

    Attributes:
        a: The first text (a premise, a question, a context).
        b: The second text (a hypothesis, a candidate answer, a response).
        label: The label as the corpus writes it (`""` for a new pair, which has none).
        group: The question or context a candidate belongs to in a ranking corpus; NLI readers leave it None.
        line: The 1-based line of the example in its file (0: unknown), for error messages; provenance, not
            content, so it takes no part in equality.
    """

    a: str
    b: str
    label: str
    group: str | None = None
    line: int = field(default=0, compare=False)
