"""`Matcher`: a trained model for Python code, and the inference path of `predict`, `visualize` and `serve`.

    from matching import Matcher
    matcher = Matcher.load("outputs/runs/wikiqa/coda/<time>")   # a run directory, a checkpoint, a shared folder,
    matcher = Matcher.load(".../<time>", backend="onnx", quantize="int8")   # ONNX Runtime, int8 weights
    matcher.predict([("how big is the moon", "Its diameter is 3,474 km.")])   # or a hub repository "user/name"
    matcher.rank("how big is the moon", ["Paris is in France.", "Its diameter is 3,474 km."], top_k=1)
    matcher.align("how big is the moon", "Its diameter is 3,474 km.")

Pairs go in as tuples `(a, b)`, dicts (keyed by the run's own column names, e.g. `{"text_left": ..., "text_right":
...}` for a run trained with `task.columns.a=text_left`, or by the usual names `predict` reads: `a`/`b`,
`premise`/`hypothesis`, `question`/`answer`, ...) or `Pair`s; answers come out as plain Python (lists, dicts, floats)
and NumPy arrays. Every call runs the pairs in batches of similar length within the run's memory budget
(`data.batch_tokens`, `data.batch_cells`; see `Predictor.logits_of`), so long inputs and big lists are safe.
The reference, with every option and answer, is docs/reference/python-api.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from matching.data.pairs import Pair
from matching.data.preparation import PreparedPairs
from matching.data.tables import pair_of_mapping
from matching.data.vocab import NULL
from matching.errors import DataFormatError, RunError
from matching.inference import Predictor, load
from matching.inference.description import run_description
from matching.inference.predictor import label_probabilities, ranking
from matching.inference.state_index import StateIndex

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


#: The tasks whose models rank (the rest classify), as the messages that send a user to one name them.
RANKING_TASKS = ("wikiqa", "trecqa", "ubuntu", "pairs_rank", "pairs_positives")


class Matcher:
    """A trained model, ready to score new pairs (see the module docstring). Build one with `Matcher.load(path)`,
    or around a `Predictor` (matching.inference) a command has loaded: `Matcher(predictor)`."""

    def __init__(self, predictor: Predictor):
        self._predictor = predictor  # the engine (matching.inference): reached through this object's members only

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        backend: str = "auto",
        quantize: str | None = None,
        device: str = "cpu",
        batch_tokens: int | None = None,
        batch_cells: int | None = None,
        dtype: str | None = None,
        threads: int = 0,
        revision: str | None = None,
        overrides: dict[str, Any] | None = None,
        encoder_backend: str = "torch",
    ) -> Matcher:
        """The model at `path`: a run directory (its checkpoints/best.ckpt), its checkpoints/ folder, a checkpoint
        file, a shared model folder (`matching-export format=hub`), a Hugging Face hub repository id `owner/name` of
        such a folder (downloaded at `revision`, once, into the hub's cache) or an exported ONNX folder
        (`matching-export format=onnx`).
        `backend`: torch (PyTorch eager), onnx (ONNX Runtime on the CPU; a run or shared folder is exported once
        into a cache) or auto (onnx for an exported ONNX folder, else torch); `quantize="int8"`: ONNX Runtime with
        int8 weights. `device`: cpu, cuda (or cuda:N) or auto (torch only). `batch_tokens`, `batch_cells`: the
        memory budget of a batch (default: the run's `data.batch_tokens`, `data.batch_cells`). `dtype`: the
        arithmetic of the torch backend, "fp32", "bf16" (faster on CPUs with AMX or AVX512-BF16; logits within
        about 1 % of fp32's) or "auto"; default: the run's own `dtype` (see matching.model.precision). `threads`:
        intra-op threads of every call (default 0: one for a small call, more for a big one while cores are free).
        `overrides`: other keys of the run's config, e.g. `{"data.max_length": 128}`. `encoder_backend="onnx"`: a
        contextual model's encoder (frozen or fine-tuned) runs new text on ONNX Runtime (2.3x as fast on a short
        query), the model on PyTorch (the `export` extra; exported once into the ONNX cache). Offline, a shared folder
        or a run directory needs nothing else; a shared folder is read from safetensors and YAML only, never
        unpickled."""
        settings = dict(overrides or {})
        for key, value in (("data.batch_tokens", batch_tokens), ("data.batch_cells", batch_cells)):
            if value is not None:
                settings[key] = value
        predictor = load(path, backend=backend, quantize=quantize, device=device, dtype=dtype, revision=revision,
                         overrides=settings, threads=threads, encoder_backend=encoder_backend)  # fmt: skip
        return cls(predictor)

    # -- what the model is ---------------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        """ "classify" or "rank" (a pointwise ranking model: labels no-match, match)."""
        return self._predictor.kind

    @property
    def labels(self) -> list[str]:
        return list(self._predictor.labels)

    @property
    def backend(self) -> str:
        """torch, onnx or onnx-int8."""
        return self._predictor.backend.name

    @property
    def device(self) -> str:
        return self._predictor.backend.device

    @property
    def task(self) -> str:
        return self._predictor.task

    @property
    def dtype(self) -> str:
        """What the arithmetic is: fp32, bf16, int8 (weights)."""
        return self._predictor.dtype

    @property
    def columns(self) -> dict[str, str | None]:
        """The run's own column names (`task.columns`: a, b, label, group), which dicts of pairs may be keyed by."""
        return self._predictor.columns

    @property
    def config(self):
        """The run's config (a run, a shared folder), or None (an exported ONNX folder has none)."""
        return self._predictor.config

    @property
    def about(self) -> dict:
        """What the model is, for people: aligner, embeddings, its run folder, the checkpoint's sha256, ..."""
        return self._predictor.about

    @cached_property
    def description(self) -> dict[str, Any]:
        """What the model is, as the server's GET /info and its page say it (matching.inference.description): its
        task, labels, aligner, embeddings, training data, weights by name and sha256, backend, arithmetic and example
        inputs. Computed once, on first use (it hashes the weights), and kept."""
        return run_description(self._predictor)

    @property
    def origin(self) -> Path:
        """The folder or file it was loaded from."""
        return self._predictor.origin

    @property
    def vocab(self):
        return self._predictor.vocab

    @property
    def max_length(self) -> int | None:
        return self._predictor.max_length

    @property
    def null_token(self) -> bool:
        return self._predictor.null_token

    @property
    def reads_every_word(self) -> bool:
        """An encoder reads every word; a table's unknown words hash to OOV buckets."""
        return self._predictor.reads_every_word

    @property
    def can_align(self) -> bool:
        """Whether `align` answers (the PyTorch backend; an exported graph returns the logits only)."""
        return self._predictor.backend.can_align

    @property
    def truncated(self) -> int:
        """How many pairs had a text cut to `max_length` so far."""
        return self._predictor.truncated

    def set_threads(self, threads: int, cap: int | None = None) -> None:
        """Intra-op threads of every call (0: chosen per call), at most `cap`."""
        self._predictor.backend.set_threads(threads, cap)

    def __repr__(self) -> str:
        p = self._predictor
        return f"Matcher({p.task}, {self.kind}, labels={self.labels}, {self.backend}, from {p.origin})"

    # -- answers -------------------------------------------------------------------------------------------------
    def as_pairs(self, items: Iterable[PairLike], source: str = "pairs") -> list[Pair]:
        """`as_pairs` with this run's own column names (`task.columns`) for dicts."""
        return as_pairs(items, source, self._predictor.columns)

    def logits(self, pairs: Iterable[PairLike], source: str = "pairs") -> np.ndarray:
        """(N, classes) float32 logits of the pairs, in their order. `source` names the input in error messages."""
        return self._predictor.logits(self.as_pairs(pairs, source), source)

    def predict(self, pairs: Iterable[PairLike] | tuple[str, str], source: str = "pairs") -> list[dict] | dict:
        """One answer per pair, in their order: `{"label", "probs": {label: p}}` for a classification model,
        `{"score", "p_match"}` for a ranking model (score: logit[match] − logit[no match], which orders as P(match)
        but never saturates at 1.0). One pair `(a, b)` gives one answer."""
        if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(t, str) for t in pairs):
            return self.predict([pairs], source)[0]
        return self.answers(self._predictor.logits(self.as_pairs(pairs, source), source))

    def prepare(self, pairs: Sequence[Pair]) -> PreparedPairs:
        """Pairs prepared by the run's text pipeline (tokens, words, ids), to check or to score with `logits_of`."""
        return self._predictor.prepare(pairs)

    def logits_of(self, prepared: PreparedPairs, source: str = "pairs") -> np.ndarray:
        """(N, classes) float32 logits of prepared pairs, in their order."""
        return self._predictor.logits_of(prepared, source)

    def answers(self, logits: np.ndarray) -> list[dict]:
        """`predict`'s answers from (N, classes) logits."""
        return self._predictor.answers(np.asarray(logits, np.float32))

    def rank(self, query: str, candidates: Sequence[str], top_k: int | None = None) -> list[dict]:
        """The candidates best first (ties: in the order given), each `{"index", "candidate", "score", "p_match"}`
        (`index`: its position in `candidates`); the first `top_k` only when given. Ranking models only."""
        if self.kind != "rank":
            raise RunError(
                f"this model classifies pairs into {self.labels} (task {self._predictor.task}); it does not rank. Use "
                f"predict(pairs), or load a model trained on a ranking task ({', '.join(RANKING_TASKS)})"
            )
        if isinstance(candidates, str):
            raise DataFormatError("candidates must be a list of texts, not one string; wrap it: [candidate]")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise DataFormatError(f"top_k must be a positive whole number or None, got {top_k!r}")
        if not candidates:
            return []
        answers = self.predict([(query, c) for c in candidates], "candidates")
        return ranking(candidates, answers)[:top_k]

    def index(self, candidates: Iterable[str], save_to: str | Path | None = None) -> StateIndex:
        """Encode `candidates` once and rank against them from now on: a contextual model (its encoder frozen or
        fine-tuned) then runs its encoder on each query alone, the candidates' states read from the index (float16
        for a frozen encoder, float32 for a fine-tuned one, as the model reads every state: the answers are the same
        as without it). Replaces an index used before; `save_to`: also
        write it into that folder, for `use_index` (or `matching-predict index=`) in another process. A text not
        in the index is still encoded, each distinct one once per call. See docs/how-to/ranking.md."""
        if isinstance(candidates, str):
            raise DataFormatError("candidates must be a list of texts, not one string; wrap it: [candidate]")
        index = self._predictor.index(list(candidates))
        if save_to is not None:
            index.save(save_to)
        self._predictor.use_index(index)
        return index

    def use_index(self, index: StateIndex | str | Path | None) -> StateIndex | None:
        """Rank against an index (a StateIndex, or the folder `index(..., save_to=)` wrote; None: no index). An
        index of another encoder or text pipeline than this model's is refused (StaleIndexError)."""
        if isinstance(index, (str, Path)):
            index = StateIndex.load(index, self._predictor.index_key())
        self._predictor.use_index(index)
        return index

    def align(self, a: str, b: str) -> dict:
        """One pair's alignment: `{"a_tokens", "b_tokens", "matrices": {name: (len a, len b) array}, "label",
        "probs"}`: both sides' tokens as the model sees them ("<null>" first when it uses the NULL token), every
        matrix the aligner used (intra-sentence ones named "intra_a/..." and "intra_b/...", square), and the
        prediction (a ranking model's also with its `score` and `p_match`, as `predict` gives them). What
        `visualize` draws and the server's /align returns (PyTorch backend only)."""
        return self.alignment(self._predictor.prepare(self.as_pairs([(a, b)], "align")))

    def alignment(self, prepared: PreparedPairs) -> dict:
        """`align` of one pair already prepared by the run's text pipeline (the server checks it first)."""
        out = self._predictor.alignment(prepared)
        tokens_a, tokens_b = prepared.words_a[0], prepared.words_b[0]
        if self._predictor.null_token:
            tokens_a, tokens_b = [NULL, *tokens_a], [NULL, *tokens_b]
        ((label, probs),) = label_probabilities(out["logits"], self.labels)
        answer = {"a_tokens": tokens_a, "b_tokens": tokens_b, "matrices": out["matrices"], "label": label,
                  "probs": probs}  # fmt: skip
        if self.kind == "rank":
            answer.update(self.answers(out["logits"])[0])
        return answer
