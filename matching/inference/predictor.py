"""`Predictor`: a trained model ready to answer, whatever runs it.

It holds what answering needs and nothing of training: the text preparation (matching.data.preparation), a backend
that turns prepared pairs into logits (PyTorch eager, matching.inference.torch_backend, or ONNX Runtime,
matching.inference.onnx_backend), the labels, the kind of task, the run's own column names, the arithmetic and
where the model was loaded from. This module imports no torch, so that an ONNX Runtime predictor (and the server
over it) runs where torch is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from matching.data.pairs import Pair
from matching.data.preparation import PreparedPairs, TextPreparation
from matching.errors import RunError
from matching.inference.state_index import StaleIndexError, StateIndex


class Backend(Protocol):
    """What runs the model: (B, classes) float32 logits of the pairs `index` of `prepared`."""

    name: str  # "torch", "onnx" or "onnx-int8"
    threads: int  # intra-op threads of every call (0: chosen per call, matching.inference.threads)
    batch_pairs: int | None  # the most pairs a batch of a call holds (None: only the memory budget bounds it)
    device: str  # where it computes: "cpu", "cuda", "cuda:1", ...
    can_align: bool  # whether `alignment` answers (the PyTorch model keeps its matrices; an exported graph does not)
    text_states: Any  # what encodes new text outside the model (a contextual run's TextStates), or None

    def logits(self, prepared: PreparedPairs, index: np.ndarray) -> np.ndarray: ...

    def call(self, prepared: PreparedPairs) -> AbstractContextManager[None]:
        """The scope of one call over `prepared` (its batches run inside it)."""
        ...

    def threads_for(self, tokens: int) -> AbstractContextManager[None]:
        """Intra-op threads chosen for a piece of work of `tokens` tokens, set for the block."""
        ...

    def set_threads(self, threads: int, cap: int | None = None) -> None: ...

    def alignment(self, prepared: PreparedPairs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The first pair's logits (1, C) and every alignment matrix the model used (when `can_align`)."""
        ...


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (then float32), stable for any logit size."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def match_margin(logits: np.ndarray) -> np.ndarray:
    """Ranking score of a 2-class (no match, match) model: logit[match] − logit[no match] (matching.training.metrics's
    `match_margin`, on NumPy): it orders as P(match) but never saturates at 1.0."""
    logits = np.asarray(logits, np.float32)
    return logits[:, 1] - logits[:, 0]


def label_probabilities(logits: np.ndarray, labels: Sequence[str]) -> list[tuple[str, dict[str, float]]]:
    """Each row of (N, C) logits as its most probable label and every label's probability: the classification
    answer of `predict` and of the server."""
    answers = []
    for row in softmax(np.asarray(logits)).tolist():
        best = max(range(len(labels)), key=row.__getitem__)
        answers.append((labels[best], dict(zip(labels, row, strict=True))))
    return answers


def ranking(candidates: Sequence[str], answers: Sequence[dict]) -> list[dict]:
    """Ranking answers (`{"score", "p_match"}` per candidate) as `rank` returns them: best first, ties in order."""
    order = sorted(range(len(candidates)), key=lambda i: (-answers[i]["score"], i))
    return [{"index": i, "candidate": candidates[i], **answers[i]} for i in order]


@dataclass
class Predictor:
    """A trained model ready to answer (see the module docstring); built by matching.inference.load.

    `about` describes it for people (the server's /info, the page, `repr`): aligner, embeddings, what it was
    loaded from (a name, never a path of the machine), the checkpoint's sha256, the dtype it was trained in.
    `config` is the run's config when the model came with one (a run, a shared folder), else None."""

    text: TextPreparation
    backend: Backend
    labels: list[str]
    kind: str  # "classify" or "rank"
    task: str
    columns: dict[str, str | None]
    dtype: str  # what the arithmetic is: fp32, bf16, int8 (weights) ...
    origin: Path  # the folder or file it was loaded from
    about: dict[str, Any] = field(default_factory=dict)
    config: Any = None
    null_token: bool = False
    reads_every_word: bool = False  # an encoder reads every word; a table's unknown words hash to OOV buckets
    truncated: int = 0  # pairs cut to max_length by `logits_of`

    def __repr__(self) -> str:
        return f"Predictor({self.task}, {self.kind}, labels={self.labels}, {self.backend.name}, from {self.origin})"

    @property
    def vocab(self):
        return self.text.vocab

    @property
    def max_length(self) -> int | None:
        return self.text.max_length

    # -- answers -------------------------------------------------------------------------------------------------
    def prepare(self, pairs: Sequence[Pair]) -> PreparedPairs:
        return self.text.prepare(pairs)

    def logits(self, pairs: Sequence[Pair], source: str = "input") -> np.ndarray:
        """(N, C) float32 logits of new pairs, in their order (see `logits_of`)."""
        return self.logits_of(self.text.prepare(pairs), source)

    def logits_of(self, prepared: PreparedPairs, source: str = "input") -> np.ndarray:
        """(N, C) float32 logits of prepared pairs, in their order. The pairs are run in batches of similar length
        that fit the run's memory budget (`data.batch_cells`, `data.batch_tokens`), so one long text cannot inflate
        a batch; a pair too long to fit alone is an error naming its line, raised before anything runs.
        `truncated` counts the pairs cut to `max_length`."""
        self.truncated += prepared.cut
        self.text.check(prepared, source)
        out = np.empty((len(prepared), len(self.labels)), np.float32)
        with self.backend.call(prepared):
            for index in self.text.order(prepared, self.backend.batch_pairs):
                out[index] = self.backend.logits(prepared, index)
        return out

    def answers(self, logits: np.ndarray) -> list[dict]:
        """One answer per row of (N, classes) logits: `{"label", "probs"}` for a classification model, `{"score",
        "p_match"}` for a ranking model (score: the logit margin, see `match_margin`)."""
        if self.kind == "classify":
            return [{"label": label, "probs": probs} for label, probs in label_probabilities(logits, self.labels)]
        scores, p_match = match_margin(logits).tolist(), softmax(np.asarray(logits))[:, 1].tolist()
        return [{"score": s, "p_match": p} for s, p in zip(scores, p_match, strict=True)]

    # -- an index of known texts' states ------------------------------------------------------------------------
    def state_encoder(self):
        """The contextual encoder's new-text states (matching.model.text_states.TextStates) that an index keeps, or
        a RunError saying why this model has none."""
        encoder = self.backend.text_states
        if encoder is not None:
            return encoder
        if not self.reads_every_word:
            why = "it reads static word vectors: a text costs a table lookup, there is nothing to keep"
        else:
            why = (f"it runs on {self.backend.name}, whose graph encodes each pair's texts itself; load it with "
                   "backend=torch to rank against an index")  # fmt: skip
        raise RunError(f"an index keeps a contextual encoder's states of known texts; this model has none: {why}")

    def index_key(self) -> dict:
        """What an index's states depend on: the encoder (weights sha256, pooling, positions, stride) and the text
        pipeline that makes a text's words."""
        tokenizer = self.text.tokenizer
        text = {"lowercase": tokenizer.lowercase, "keep_tokens": list(tokenizer.keep_tokens),
                "max_length": self.text.max_length}  # fmt: skip
        return {**self.state_encoder().state_key(), "text": text}

    def index(self, texts: Sequence[str]) -> StateIndex:
        """A StateIndex of `texts` (each distinct text once), encoded as a pair's second text."""
        encoder, key = self.state_encoder(), self.index_key()
        words = list(dict.fromkeys(map(tuple, self.text.second_words(texts))))
        with self.backend.threads_for(sum(map(len, words))):
            states = encoder.encode(words)
        return StateIndex.of(key, words, states, encoder.state_dtype)

    def use_index(self, index: StateIndex | None) -> None:
        """Rank and predict with `index`'s states of the texts it holds (None: none); checked against the model."""
        encoder = self.state_encoder()
        if index is not None and index.key != self.index_key():
            raise StaleIndexError("this index was built with another encoder or text pipeline than this model's; "
                                  "build one with this model")  # fmt: skip
        encoder.use_index(index)

    def alignment(self, prepared: PreparedPairs) -> dict:
        """One prepared pair's alignment (`Matcher.align`); only a backend that keeps the matrices has it."""
        if not self.backend.can_align:
            raise RunError(
                f"this model runs on {self.backend.name}, whose exported graph returns the logits only: alignments "
                "need the PyTorch model. Load the run directory or shared folder with backend=torch to draw them"
            )
        if not prepared.tokens.all():
            raise RunError("both texts need at least one token to draw an alignment")
        self.text.check(prepared, "input")
        logits, matrices = self.backend.alignment(prepared)
        return {"logits": logits, "matrices": matrices}
