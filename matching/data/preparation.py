"""A pair's texts as a model reads them, without torch: tokens (the tokenizer, then the task's trim of the first
text), the model's words (cut to `max_length`), ids (the vocabulary) and batches of similar length within one
memory `Budget`.

`TextPreparation` is the part of the text pipeline that every backend shares: training's data module and PyTorch
inference extend it with tensors (matching.model.pipeline.TextPipeline); an ONNX Runtime model is fed from it alone
(matching.inference), which is why nothing here imports torch.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from matching.data.pairs import Pair
from matching.data.tasks import Task
from matching.data.vocab import Tokenizer, Vocabulary
from matching.errors import UserError

log = logging.getLogger(__name__)


class BadExampleError(UserError, ValueError):
    """A pair that cannot be used; the message names its file and line and what to do."""


class BatchTooLargeError(BadExampleError):
    """A pair that alone exceeds the batch budget; the message names it and the settings that fix it."""


#: The memory budget of a batch when a config does not say (conf/train.yaml's `data.batch_cells`, `batch_tokens`).
BATCH_CELLS, BATCH_TOKENS = 16_777_216, 65_536


@dataclass(frozen=True)
class Budget:
    """What one batch may hold, whatever the input: at most `cells` alignment cells (B · La · Lb, the size of the
    (B, La, Lb) matrices) and at most `tokens` padded tokens (B · (La + Lb), what every activation scales with).
    None leaves a limit out. Batches are cut by these and by a pair count, so one long text cannot inflate its
    batch; a pair that does not fit even alone is an error raised before anything is allocated."""

    cells: int | None = None
    tokens: int | None = None

    def __bool__(self) -> bool:
        return bool(self.cells or self.tokens)

    def fits(self, pairs: int, la: int, lb: int) -> bool:
        return (not self.cells or pairs * la * lb <= self.cells) and (
            not self.tokens or pairs * (la + lb) <= self.tokens
        )

    def long_side(self, batch_size: int) -> int:
        """The longest side with which any `batch_size` pairs fit together."""
        limits = [math.isqrt(self.cells // batch_size)] if self.cells else []
        limits += [self.tokens // (2 * batch_size)] if self.tokens else []
        return min(limits) if limits else sys.maxsize

    def batches(self, order: np.ndarray, sides: np.ndarray, max_pairs: int) -> list[np.ndarray]:
        """Consecutive runs of `order` with at most `max_pairs` pairs that fit. `sides`: (N, 2) lengths."""
        batches, start, top_a, top_b = [], 0, 0, 0
        for k, i in enumerate(order.tolist()):
            la, lb = max(top_a, int(sides[i, 0])), max(top_b, int(sides[i, 1]))
            if k > start and (k - start + 1 > max_pairs or not self.fits(k - start + 1, la, lb)):
                batches.append(order[start:k])
                start, la, lb = k, int(sides[i, 0]), int(sides[i, 1])
            top_a, top_b = la, lb
        if start < len(order):
            batches.append(order[start:])
        return batches

    def check(self, sides: np.ndarray, where: str, lines: Sequence[int] | None = None) -> None:
        """BatchTooLargeError naming the worst pair when a pair alone does not fit."""
        if not self or not len(sides):
            return
        cells = sides[:, 0] * sides[:, 1]
        too_big = np.zeros(len(sides), bool)  # the same test as fits(1, La, Lb), for every pair at once
        if self.cells:
            too_big |= cells > self.cells
        if self.tokens:
            too_big |= sides.sum(1) > self.tokens
        over = np.flatnonzero(too_big)
        if len(over):
            worst = int(over[np.argmax(cells[over])])
            la, lb = int(sides[worst, 0]), int(sides[worst, 1])
            which = f"line {lines[worst]}" if lines is not None and lines[worst] else f"pair {worst + 1}"
            raise BatchTooLargeError(
                f"{where}: {len(over)} pair(s) are too long to align even alone: {which} has {la} x {lb} tokens "
                f"({la * lb:,} alignment cells), over data.batch_cells={self.cells} / data.batch_tokens="
                f"{self.tokens}. Truncate long texts with data.max_length=<tokens>, or raise the budget if memory "
                "allows."
            )


def pair_sides(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> np.ndarray:
    """(N, 2) int64 token counts of the two texts of N pairs."""
    out = np.empty((len(a), 2), np.int64)
    out[:, 0] = np.fromiter(map(len, a), np.int64, len(a))
    out[:, 1] = np.fromiter(map(len, b), np.int64, len(b))
    return out


def model_words(
    tokens: Sequence[tuple[list[str], list[str]]], max_length: int | None
) -> tuple[list[list[str]], list[list[str]], int]:
    """The words of both sides as the model sees them (cut to `max_length`), and how many pairs were cut."""
    a, b, truncated = [], [], 0
    for ta, tb in tokens:
        if max_length and (len(ta) > max_length or len(tb) > max_length):
            truncated += 1
            ta, tb = ta[:max_length], tb[:max_length]
        # An empty side would make the sentence all padding; an OOV word keeps it a (meaningless) one-token text.
        a.append(ta or ["<empty>"])
        b.append(tb or ["<empty>"])
    return a, b, truncated


def pad_ids(seqs: Sequence[np.ndarray]) -> np.ndarray:
    """(B, max length) int64 ids, 0-padded on the right."""
    out = np.zeros((len(seqs), max(len(s) for s in seqs)), dtype=np.int64)
    for row, s in zip(out, seqs, strict=True):
        row[: len(s)] = s
    return out


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
    _sides: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.a)

    def sides(self) -> np.ndarray:
        """(N, 2) the model's token counts of both texts, counted once (the budget's check, the batches' order and
        each batch's thread count all read them)."""
        if self._sides is None:
            self._sides = pair_sides(self.a, self.b)
        return self._sides

    def with_second_cut(self, n: int) -> PreparedPairs:
        """These pairs with each second text cut to its first `n` words (a reranked document: `second_cut` then
        lists the ones cut)."""
        if all(len(b) <= n for b in self.b):
            return self
        earlier = self.tokens > self.sides()  # (N, 2): a side already cut to max_length
        newly = sum(len(b) > n and not earlier[i].any() for i, b in enumerate(self.b))
        return PreparedPairs(self.words_a, [w[:n] for w in self.words_b], self.a, [b[:n] for b in self.b],
                             self.tokens, self.cut + newly, self.lines)  # fmt: skip

    def second_cut(self) -> list[int]:
        """The pairs whose second text the model saw shorter than it is (cut to `max_length`, or by
        `with_second_cut`), by index."""
        return [i for i, b in enumerate(self.b) if self.tokens[i, 1] > len(b)]

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


class TextPreparation:
    """Tokenise, trim, cut and encode pairs as a run does, and order them into batches within its `budget`.
    `vocab` is None until a training run's data module has built it from the training split."""

    def __init__(self, task: Task, tokenizer: Tokenizer, max_length: int | None, budget: Budget,
                 vocab: Vocabulary | None = None):  # fmt: skip
        self.task, self.tokenizer, self.max_length, self.budget, self.vocab = task, tokenizer, max_length, budget, vocab

    def adopt_vocabulary(self, vocab: Vocabulary) -> None:
        """The vocabulary a training run's data module has built (or read from its cache), once."""
        if self.vocab is not None:
            raise RuntimeError("this text preparation has a vocabulary already; a run builds one once")
        self.vocab = vocab

    def tokenize(self, name: str, pairs: Sequence[Pair], quiet: bool = False) -> list[tuple[list[str], list[str]]]:
        """Both texts' tokens, the first one trimmed by the task (e.g. a dialogue's most recent turns)."""
        tok = self.tokenizer
        if quiet or len(pairs) < 50_000:
            tokens = [(tok(p.a), tok(p.b)) for p in pairs]
        else:
            from tqdm.auto import tqdm

            tokens = [(tok(p.a), tok(p.b)) for p in tqdm(pairs, desc=f"tokenising {self.task.name} {name}",
                                                         unit=" pairs")]  # fmt: skip
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

    def second_words(self, texts: Sequence[str]) -> list[list[str]]:
        """Texts' words as the model sees them when each is a pair's second text (what `prepare` gives it)."""
        return model_words([([], self.tokenizer(t)) for t in texts], self.max_length)[1]

    def check(self, prepared: PreparedPairs, source: str) -> None:
        """BatchTooLargeError naming the line of a pair that does not fit the budget even alone."""
        self.budget.check(prepared.sides(), source, prepared.lines)

    def order(self, prepared: PreparedPairs, max_pairs: int | None = None) -> Iterator[np.ndarray]:
        """The pairs' indices in batches of similar length that fit the budget, so that one long text cannot
        inflate a batch (a pair too long to fit alone: `check` first), of at most `max_pairs` pairs when given."""
        sides = prepared.sides()
        order = np.argsort(sides.sum(1), kind="stable")
        if not self.budget:
            yield from (np.array_split(order, -(-len(order) // max_pairs)) if max_pairs and len(order) else [order])
            return
        yield from self.budget.batches(order, sides, max_pairs or len(prepared))

    def ids(self, prepared: PreparedPairs, index: np.ndarray) -> dict[str, np.ndarray]:
        """The token ids of the pairs `index` of `prepared`: `a` and `b`, (B, longest) int64, 0-padded."""
        return {"a": pad_ids([prepared.a[i] for i in index]), "b": pad_ids([prepared.b[i] for i in index])}


#: The inputs an encoder's word pieces give an exported contextual model, per side (`a_pieces`, ...), and the keys of
#: `piece_windows` they are.
#: Pairs per batch of a call on the CPU (PyTorch or ONNX Runtime). The memory budget alone let one call of WikiQA's
#: 2,733 dev pairs run as 3 batches of up to 1,341 pairs, whose (pairs, len a, len b, hidden) tensors outgrow the
#: caches: 339 pairs/s, against 813 at 128 pairs, 852 at 64, 863 at 32 and 748 at 16 (static CoDA, 1 thread, one
#: sitting). On a GPU, only the budget bounds a batch.
CPU_BATCH_PAIRS = 64

PIECE_INPUTS = ("pieces", "piece_mask", "piece_word", "piece_row")
PIECE_KEYS = ("ids", "mask", "word", "row")


def window_starts(pieces: int, width: int, step: int) -> list[int]:
    """Where the windows of a text of `pieces` word pieces start: one window when it fits in `width`, else one every
    `step` pieces and one ending at its last piece."""
    if pieces <= width:
        return [0]
    return sorted({*range(0, pieces - width, step), pieces - width})


def piece_windows(pieces: Sequence[tuple[Sequence[int], Sequence[int]]], width: int, step: int, cls: int, sep: int,
                  pad: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Texts' word pieces (each text's piece ids and the word of each piece) in windows of at most `width` pieces,
    each framed by `cls` and `sep`: a text longer than a window gets windows starting every `step` pieces and one
    ending at its last piece. (rows, longest) int64 arrays `ids` (padded with `pad`), `mask`, `word` (−1 for the
    frame and padding) and `row` (the text of each window)."""
    rows = []
    for t, (ids, words) in enumerate(pieces):
        starts = window_starts(len(ids), width, step)
        rows += [(t, list(ids[s : s + width]), list(words[s : s + width])) for s in starts]
    length = max(len(ids) for _, ids, _ in rows) + 2
    out = {"ids": np.full((len(rows), length), pad, np.int64), "mask": np.zeros((len(rows), length), np.int64),
           "word": np.full((len(rows), length), -1, np.int64)}  # fmt: skip
    for r, (_, ids, words) in enumerate(rows):
        n = len(ids)
        out["ids"][r, : n + 2] = [cls, *ids, sep]
        out["word"][r, 1 : n + 1] = words
        out["mask"][r, : n + 2] = 1
    out["row"] = np.array([t for t, _, _ in rows], np.int64)
    return out
