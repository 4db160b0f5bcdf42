"""One text pipeline for training and inference: a pair's texts -> tokens (the tokenizer, then the task's trim of
the first text) -> the model's words (cut to `max_length`) -> ids (the vocabulary) -> batches within one memory
`Budget`, with what the embedding source adds to a batch.

The data module reads and prepares whole splits through it (`tokenize`, then matching.data.encoding); a trained
run (`TrainedRun`, `Matcher`, the server) prepares new pairs through it (`prepare`, `batches`), so that a new pair
is prepared exactly as the training data was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from matching.data.batching import Budget
from matching.data.embeddings import EmbeddingSource
from matching.data.encoding import model_words, pair_sides
from matching.data.pairs import Pair
from matching.data.tasks import Task
from matching.data.vocab import Tokenizer, Vocabulary

log = logging.getLogger(__name__)


def pad_batch(seqs: Sequence[np.ndarray]) -> torch.Tensor:
    """(B, max length) int64 ids, 0-padded on the right."""
    out = np.zeros((len(seqs), max(len(s) for s in seqs)), dtype=np.int64)
    for row, s in zip(out, seqs, strict=True):
        row[: len(s)] = s
    return torch.from_numpy(out)


@dataclass
class PreparedPairs:
    """New pairs as the model sees them: each side's words (cut to `max_length`; an empty side is one unknown
    token), their ids, each pair's token counts before the cut (`tokens`, (N, 2): 0 for a side without a token),
    how many pairs were cut, and each pair's line in its input (0: none)."""

    words_a: list[list[str]]
    words_b: list[list[str]]
    a: list[np.ndarray]
    b: list[np.ndarray]
    tokens: np.ndarray
    cut: int
    lines: list[int]

    def __len__(self) -> int:
        return len(self.a)

    def sides(self) -> np.ndarray:
        """(N, 2) the model's token counts of both texts."""
        return pair_sides(self.a, self.b)

    @classmethod
    def join(cls, parts: Sequence[PreparedPairs]) -> PreparedPairs:
        """The pairs of `parts`, one after another (e.g. the requests of one server batch)."""
        return cls(
            [w for p in parts for w in p.words_a],
            [w for p in parts for w in p.words_b],
            [x for p in parts for x in p.a],
            [x for p in parts for x in p.b],
            np.concatenate([p.tokens for p in parts]),
            sum(p.cut for p in parts),
            [line for p in parts for line in p.lines],
        )


class TextPipeline:
    """Tokenise, trim, cut, encode and batch pairs as a run does. `vocab` is None until the data module has built
    it from the training split; `source` is the run's embedding source (what a batch carries besides ids)."""

    def __init__(self, task: Task, tokenizer: Tokenizer, max_length: int | None, budget: Budget,
                 source: EmbeddingSource | None = None, vocab: Vocabulary | None = None):  # fmt: skip
        self.task, self.tokenizer, self.max_length, self.budget = task, tokenizer, max_length, budget
        self.source, self.vocab = source, vocab

    def tokenize(self, name: str, pairs: Sequence[Pair], quiet: bool = False) -> list[tuple[list[str], list[str]]]:
        """Both texts' tokens, the first one trimmed by the task (e.g. a dialogue's most recent turns)."""
        tok = self.tokenizer
        bar = tqdm(
            pairs, desc=f"tokenising {self.task.name} {name}", unit=" pairs", disable=quiet or len(pairs) < 50_000
        )
        tokens = [(tok(p.a), tok(p.b)) for p in bar]
        trim = self.task.trim_a
        if trim is not None:
            cut = 0
            for i, (ta, tb) in enumerate(tokens):
                kept = trim(ta)
                if len(kept) < len(ta):
                    tokens[i] = (kept, tb)
                    cut += 1
            if not quiet:
                log.info("%s %s: %d first texts trimmed by task.trim_a", self.task.name, name, cut)
        return tokens

    def prepare(self, pairs: Sequence[Pair]) -> PreparedPairs:
        """New pairs, prepared exactly as the training data was (needs the vocabulary)."""
        if self.vocab is None:
            raise RuntimeError("preparing new pairs needs the run's vocabulary: set up the training split first")
        tokens = self.tokenize("input", pairs, quiet=True)
        counts = np.array([(len(ta), len(tb)) for ta, tb in tokens], np.int64).reshape(len(tokens), 2)
        words_a, words_b, cut = model_words(tokens, self.max_length)
        a, b = [self.vocab.encode(t) for t in words_a], [self.vocab.encode(t) for t in words_b]
        return PreparedPairs(words_a, words_b, a, b, counts, cut, [p.line for p in pairs])

    def check(self, prepared: PreparedPairs, source: str) -> None:
        """BatchTooLargeError naming the line of a pair that does not fit the budget even alone."""
        self.budget.check(prepared.sides(), source, prepared.lines)

    def batch(self, prepared: PreparedPairs, index: np.ndarray | None = None) -> dict[str, Any]:
        """A model batch of the pairs `index` (all by default) of `prepared`."""
        index = np.arange(len(prepared)) if index is None else index
        batch = {"a": pad_batch([prepared.a[i] for i in index]), "b": pad_batch([prepared.b[i] for i in index])}
        if self.source is not None:
            words_a, words_b = [prepared.words_a[i] for i in index], [prepared.words_b[i] for i in index]
            batch |= self.source.new_inputs(words_a, words_b)
        return batch

    def batches(self, prepared: PreparedPairs) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        """(indices, batch) over all pairs, in batches of similar length that fit the budget, so that one long
        text cannot inflate a batch (a pair too long to fit alone: `check` first)."""
        sides = prepared.sides()
        order = np.argsort(sides.sum(1), kind="stable")
        for index in self.budget.batches(order, sides, len(prepared)) if self.budget else [order]:
            yield index, self.batch(prepared, index)
