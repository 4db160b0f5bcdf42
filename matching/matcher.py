"""`Matcher`: a trained model for Python code, the public face of the engine (matching.inference): queries in,
answers out (matching.inference.answering), for `predict`, `visualize` and `serve` alike. Its docstrings are the
reference that docs/reference/python-api.md renders, with what `load` reads from each form of a model."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from matching.errors import DataFormatError, RunError
from matching.inference import Predictor, load
from matching.inference import queries as asked
from matching.inference.answering import answer_all
from matching.inference.description import ModelFacts, run_description
from matching.inference.queries import RANKING_TASKS, PairLike, as_pairs
from matching.inference.state_index import StateIndex

__all__ = ["RANKING_TASKS", "Matcher", "PairLike", "as_pairs"]


class Matcher:
    """A trained model, ready to score new pairs; `predict`, `visualize` and `serve` answer through it.

    Build one with [`Matcher.load(path)`][matching.matcher.Matcher.load], or around the `Predictor` a command has
    loaded: `Matcher(predictor)` (the engine, private once wrapped). What the model is: `facts`
    ([`ModelFacts`][matching.inference.description.ModelFacts]), whose fields are also this object's
    (`matcher.kind`, `labels`, `columns`, `backend`, `device`, `dtype`, `can_align`, `vocab`, `config`, ...).

    Pairs go in as tuples `(a, b)` or `(a, b, group)`, dicts (under the run's own column names, `columns`, or the
    usual ones) or [`Pair`][matching.data.pairs.Pair]s (docs/reference/python-api.md); a bad item or an empty text
    is a `DataFormatError` (a `ValueError`) naming its position: `pairs[3]: the second text is empty ...`. Answers
    come out as plain Python and NumPy arrays; every call runs the pairs in batches of similar length within the
    run's memory budget (`data.batch_tokens`, `data.batch_cells`), so long inputs and big lists are safe.
    """

    def __init__(self, predictor: Predictor):
        self._predictor = predictor  # the engine (matching.inference): reached through this object's members only
        self.facts = ModelFacts.of(predictor)

    def __getattr__(self, name: str) -> Any:  # the facts' fields: matcher.kind, matcher.labels, ...
        if name in ModelFacts.__dataclass_fields__ and name != "facts":
            return getattr(self.__dict__["facts"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def load(cls, path: str | os.PathLike, *, backend: str = "auto", quantize: str | None = None, device: str = "cpu",
             batch_tokens: int | None = None, batch_cells: int | None = None, dtype: str | None = None,
             threads: int = 0, revision: str | None = None, overrides: dict[str, Any] | None = None,
             encoder_backend: str = "torch") -> Matcher:  # fmt: skip
        """The model at `path` (a run directory, its `checkpoints/`, a checkpoint file, a shared folder, a hub id
        `owner/name`, an exported ONNX folder: docs/reference/python-api.md says what each gives), ready for new
        pairs. Loading needs nothing but the folder: no corpus, no vectors file.

        Args:
            path: A run directory, its `checkpoints/` folder, a checkpoint file, a shared folder, a hub id
                `owner/name` of one, or an exported ONNX folder.
            backend: What runs the model: `"torch"` (PyTorch eager, in the run's `dtype`, on `device`; `align` needs
                it), `"onnx"` (ONNX Runtime on the CPU, float32; a run is exported once into a cache folder; the
                logits agree with torch's within 1e-4) or `"auto"` (onnx for an exported ONNX folder, else torch).
            quantize: `"int8"`: ONNX Runtime with int8 weights (dynamic quantization); implies `backend="onnx"`.
            device: `"cpu"`, `"cuda"`, `"cuda:N"`, `"mps"` or `"auto"` (the GPU when there is one); torch only.
            batch_tokens: The memory budget of one batch in padded tokens, B·(La+Lb) (default: `data.batch_tokens`).
            batch_cells: The same budget in alignment cells, B·La·Lb (default: the run's `data.batch_cells`).
            dtype: The torch backend's arithmetic: `"fp32"`, `"bf16"` or `"auto"` (default: the run's own `dtype`).
            threads: Intra-op threads of each call; 0 picks per call, by its size and the cores free.
            revision: The hub revision (a commit or tag) of an `owner/name` path.
            overrides: Any other key of the run's config, dotted: `{"data.max_length": 128}`.
            encoder_backend: `"onnx"`: a contextual model's encoder runs new text on ONNX Runtime (2.3x as fast on
                a short query), the model on PyTorch (the `export` extra).

        Returns:
            The model, ready for `predict`, `rank`, `align`.

        Raises:
            RunError: The path holds no model, or not one that can be used this way (the message says what to
                give instead).
        """
        budget = {"data.batch_tokens": batch_tokens, "data.batch_cells": batch_cells}
        settings = {**(overrides or {}), **{k: v for k, v in budget.items() if v is not None}}
        predictor = load(path, backend=backend, quantize=quantize, device=device, dtype=dtype, revision=revision,
                         overrides=settings, threads=threads, encoder_backend=encoder_backend)  # fmt: skip
        return cls(predictor)

    @property
    def truncated(self) -> int:
        """How many pairs had a text cut to `max_length` so far."""
        return self._predictor.truncated

    @cached_property
    def description(self) -> dict[str, Any]:
        """What the model is, as GET /info says it (no path of the machine), computed on first use and kept."""
        return run_description(self._predictor)

    def set_threads(self, threads: int, cap: int | None = None) -> None:
        """Intra-op threads of every call (0: chosen per call), at most `cap`."""
        self._predictor.backend.set_threads(threads, cap)

    def __repr__(self) -> str:
        return f"Matcher({self.task}, {self.kind}, labels={self.labels}, {self.backend}, from {self.origin})"

    # -- answers -------------------------------------------------------------------------------------------------
    def answer(self, queries: Sequence[asked.Query], limits: asked.Limits | None = None) -> list:  # fmt: skip
        """Typed queries' typed answers, or why each was refused, in their order (matching.inference.answering:
        what the server and `matching-predict` ask); `limits`: what a query may hold (None: no limit)."""
        return answer_all(self._predictor, queries, limits)

    def _one(self, query: asked.Query) -> Any:
        (answer,) = self.answer([query])
        if isinstance(answer, asked.Refused):
            raise answer.error or (RunError if answer.why == "unsupported" else DataFormatError)(answer.message)
        return answer

    def logits(self, pairs: Iterable[PairLike], source: str = "pairs") -> np.ndarray:
        """The (N, classes) float32 logits of the pairs (tuples, dicts or `Pair`s), in their order."""
        return self._predictor.logits(as_pairs(pairs, source, self.facts.columns), source)

    def predict(self, pairs: Iterable[PairLike] | tuple[str, str], source: str = "pairs") -> list[dict] | dict:
        """The model's answer for each pair (tuples, dicts or `Pair`s; or one pair `(a, b)`: one answer), in their
        order: a classification model's `{"label": ..., "probs": {label: p, ...}}`, a ranking model's `{"score": ...,
        "p_match": ...}`, where `score` = logit[match] − logit[no match], which orders as P(match) but never
        saturates at 1.0. `source`: what the input is called in error messages (`pairs[3]: ...`)."""
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(t, str) for t in pairs):
            return self.predict([pairs], source)[0]
        classified = self._one(asked.ClassifyQuery(as_pairs(pairs, source, self.facts.columns), source))
        return [s.as_dict() for s in classified.pairs]

    def rank(self, query: str, candidates: Sequence[str], top_k: int | None = None) -> list[dict]:
        """The candidates (a list of second texts) for `query`, best first (ties: in the order given), the first
        `top_k` (None: all): `[{"index", "candidate", "score", "p_match"}, ...]`, `index` the candidate's position,
        `score` and `p_match` as `predict` gives them. Ranking models only (else a RunError)."""
        if not isinstance(candidates, str):
            as_pairs([(query, c) for c in candidates], "candidates")  # the texts checked
        ranking = self._one(asked.RankQuery(query, candidates, top_k))
        return [{"index": r.index, "candidate": candidates[r.index], "score": r.score, "p_match": r.p_match}
                for r in ranking.ranked]  # fmt: skip

    def align(self, a: str, b: str) -> dict:
        """One pair's alignment: what `matching-visualize` draws and the server's `/align` returns (the PyTorch
        backend only, see `can_align`): `{"a_tokens", "b_tokens", "matrices", "label", "probs"}`, both sides' tokens
        as the model sees them (`"<null>"` first when it uses the NULL token), every matrix the aligner used by name,
        a (len a, len b) array each (intra-sentence ones named `intra_a/...` and `intra_b/...`, square), and the
        prediction (a ranking model's also with its `score` and `p_match`, as `predict` gives them)."""
        as_pairs([(a, b)], "align")
        aligned = self._one(asked.AlignQuery(a, b))
        s = aligned.scored
        return {"a_tokens": aligned.a_tokens, "b_tokens": aligned.b_tokens, "matrices": aligned.matrices,
                "label": s.label, "probs": s.probs, **({} if s.score is None else s.as_dict())}  # fmt: skip

    def index(self, candidates: Iterable[str], save_to: str | Path | None = None) -> StateIndex:
        """Encode `candidates` once and rank against them from now on (replacing an index used before; also into
        `save_to`, for `use_index` in another process): a contextual model's encoder then runs on each query alone,
        with the same answers (any other model says why it has none; docs/how-to/ranking.md)."""
        if isinstance(candidates, str):
            raise DataFormatError("candidates must be a list of texts, not one string; wrap it: [candidate]")
        index = self._predictor.index(list(candidates))
        if save_to is not None:
            index.save(save_to)
        self._predictor.use_index(index)
        return index

    def use_index(self, index: StateIndex | str | Path | None) -> StateIndex | None:
        """Rank against `index`, a `StateIndex` or the folder `index(..., save_to=)` wrote (read memory-mapped); None:
        none. An index built by another encoder or text pipeline is a StaleIndexError naming what differs."""
        if isinstance(index, (str, Path)):
            index = StateIndex.load(index, self._predictor.index_key())
        self._predictor.use_index(index)
        return index
