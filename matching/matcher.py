"""`Matcher`: a trained model for Python code, and the inference path of `predict`, `visualize` and `serve`.

    from matching import Matcher
    matcher = Matcher.load("outputs/runs/wikiqa/coda/<time>")   # a run directory, a checkpoint, a shared folder,
    matcher = Matcher.load(".../<time>", backend="onnx", quantize="int8")   # ONNX Runtime, int8 weights
    matcher.predict([("how big is the moon", "Its diameter is 3,474 km.")])   # or a hub repository "user/name"
    matcher.rank("how big is the moon", ["Paris is in France.", "Its diameter is 3,474 km."], top_k=1)
    matcher.align("how big is the moon", "Its diameter is 3,474 km.")

Pairs go in as tuples, dicts or `Pair`s and answers come out as plain Python and NumPy arrays (see `Matcher`).
The docstrings here are the reference: docs/reference/python-api.md renders them (mkdocstrings, Google style).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from matching.data.vocab import Vocabulary

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
    """A trained model, ready to score new pairs; `predict`, `visualize` and `serve` answer through it.

    Build one with [`Matcher.load(path)`][matching.matcher.Matcher.load], or around the `Predictor` a command has
    loaded: `Matcher(predictor)`.

    Pairs go in as tuples `(a, b)` or `(a, b, group)`; as dicts with the two texts under the run's own column names
    (its `task.columns`, see [`columns`][matching.matcher.Matcher.columns]: `{"text_left": ..., "text_right": ...}` for
    a run trained with `task.columns.a=text_left`) or under the usual names (`a`/`b`, `sentence1`/`sentence2`,
    `premise`/`hypothesis`, `question`/`answer`, `context`/`response`, ...: docs/how-to/data.md); or as
    [`Pair`][matching.data.pairs.Pair]s. To read a file as `matching-predict` does:
    `matching.data.tables.read_new_pairs(path, preferred=matcher.columns)`. A bad item or an empty text is a
    `DataFormatError` (a `ValueError`) naming its position: `pairs[3]: the second text is empty ...`.

    Answers come out as plain Python (lists, dicts, floats) and NumPy arrays. Every call runs the pairs in batches of
    similar length within the run's memory budget (`data.batch_tokens`, `data.batch_cells`), so long inputs and big
    lists are safe.

    Args:
        predictor: The inference object of every command, what `matching.inference.load(path, ...)` returns (with
            the arguments of `load`): the text preparation, the backend, the labels, the kind of task, the run's
            column names and its dtype, and nothing of training (no Lightning). Private once wrapped: this object's
            members are the way to it.
    """

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
        """The model at `path`, ready for new pairs.

        `path` is one of:

        - a run directory (`outputs/runs/<task>/<aligner>/<time>`): its `checkpoints/best.ckpt`;
        - its `checkpoints/` folder: the same `best.ckpt`;
        - a checkpoint file (`.../checkpoints/last.ckpt`): that checkpoint, with its run's `config.yaml` and
          `vocab.txt`;
        - a shared folder (`matching-export format=hub out=DIR`): `DIR`, from safetensors and YAML only;
        - `owner/name` (no such path here): that shared folder on the Hugging Face hub, at `revision`, downloaded
          once into the hub's cache (`huggingface_hub.snapshot_download`; offline, the cached copy);
        - an exported ONNX folder (`matching-export format=onnx out=DIR`), or its `model.onnx`: `DIR` on ONNX
          Runtime, with neither torch nor Hydra imported (a contextual run's export too: its encoder's word pieces
          come from `encoder_tokenizer.json` through the `tokenizers` library).

        Every command's `ckpt=` (`predict`, `evaluate`, `serve`, `visualize`, `export`) takes the same forms;
        `evaluate`, `export` and the histograms of `visualize` read the run's splits, so they need a run directory,
        its `checkpoints/` or a `.ckpt`.

        Loading needs nothing but the folder: no corpus, no vectors file (the vectors table is in the weights). A
        contextual run needs its encoder (the `minilm` package, the hub cache, or the local folder its config names);
        its weights are checked against the sha256 recorded at training.

        A shared folder cannot run code: `config.yaml`, `vocab.txt` and `model.safetensors` are read with YAML, text
        and safetensors readers, and nothing is unpickled (`tests/test_hub.py` makes `pickle` and `torch.load` fail
        while it loads one). Hydra builds the model from the config's `_target_` nodes, so the loader first refuses
        a config whose targets are not matching's own model and text components (task, data settings, vector
        sources, the contextual encoder, the model, aligners, readers) or that holds an interpolation (`${...}`). A
        model you trust that uses your own aligner: load its run directory instead.

        Args:
            path: A run directory, its `checkpoints/` folder, a checkpoint file, a shared folder, a hub id
                `owner/name` of one, or an exported ONNX folder (the list above).
            backend: What runs the model. `"torch"`: PyTorch eager, in the run's `dtype`, on `device`; alignments
                (`align`) need it. `"onnx"`: ONNX Runtime on the CPU, float32; a run or shared folder is exported
                once into a cache folder named by its weights' sha256 (`$MATCHING_ONNX_CACHE`, default
                `~/.cache/matching/onnx/`; a warning names it the first time). `"auto"`: onnx for an exported ONNX
                folder, else torch. The answers agree with torch's within 1e-4 (logits; measured in
                docs/results/performance.md, "Inference backends").
            quantize: `"int8"`: ONNX Runtime with int8 weights (dynamic quantization: the weights made int8 once,
                the activations per call); implies `backend="onnx"`. On an x86-64 CPU without VNNI instructions it
                quantizes the weights to 7 bits (`reduce_range`, as ONNX Runtime's documentation advises there;
                `matching.inference.load(..., reduce_range=)` fixes it). Smaller and faster; what it costs on dev
                metrics is in docs/results/performance.md (measure your own with
                `matching-evaluate ckpt=... backend=onnx quantize=int8`).
            device: `"cpu"`, `"cuda"`, `"cuda:N"`, `"mps"` or `"auto"` (the GPU when there is one); the torch
                backend only. A contextual run's encoder runs there too.
            batch_tokens: The memory budget of one batch in padded tokens, B·(La+Lb) (default: the run's
                `data.batch_tokens`). Pairs are run in batches of similar length within it, so that a long text
                cannot inflate its batch; a pair too long to fit alone is an error naming it (raise the budget, or
                cut texts with `overrides={"data.max_length": 256}`).
            batch_cells: The same budget in alignment cells, B·La·Lb (default: the run's `data.batch_cells`).
            dtype: The arithmetic of the torch backend: `"fp32"`, `"bf16"` or `"auto"` (bf16 where the CPU has AMX
                or AVX512-BF16). Default: the run's own `dtype` (`auto` for a run trained with the default, resolved
                on the machine that loads it; fp32 for a run saved before the key existed). bf16 keeps float32
                weights and returns float32 logits, within about 1 % of fp32's; faster on a CPU with bf16
                arithmetic (docs/results/training-speed.md, "bfloat16 on a CPU"), slower on one without it.
            threads: Intra-op threads of each call. 0 picks per call: one for a small call (a 10-candidate `rank`,
                one pair), more for a big one while cores are free (the machine's idle time, re-measured every
                half second); more threads than free cores stall small calls in the thread pool.
            revision: The hub revision (a commit or tag) of an `owner/name` path.
            overrides: Any other key of the run's config, dotted: `{"data.max_length": 128}`. A key the config does
                not have is an error.
            encoder_backend: `"onnx"`: a contextual model's encoder (frozen or fine-tuned) runs new text on ONNX
                Runtime (2.3x as fast on a short query), the model on PyTorch (the `export` extra; the encoder is
                exported once into the ONNX cache).

        Returns:
            The model, ready for `predict`, `rank`, `align`.

        Raises:
            RunError: The path holds no model, or not one that can be used this way (the message says what to
                give instead).
        """
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
        """`"classify"` or `"rank"` (a pointwise ranking model: its labels are no match, match)."""
        return self._predictor.kind

    @property
    def labels(self) -> list[str]:
        """The label names, in the order of the logits' columns."""
        return list(self._predictor.labels)

    @property
    def backend(self) -> str:
        """What runs the model: `torch`, `onnx` or `onnx-int8`."""
        return self._predictor.backend.name

    @property
    def device(self) -> str:
        """Where the model runs: `cpu`, `cuda:N`, `mps` (ONNX Runtime: `cpu`)."""
        return self._predictor.backend.device

    @property
    def task(self) -> str:
        """The task's name (`snli`, `wikiqa`, ..., or the name of your own pairs)."""
        return self._predictor.task

    @property
    def dtype(self) -> str:
        """The arithmetic: `fp32`, `bf16`, or `int8` (weights)."""
        return self._predictor.dtype

    @property
    def columns(self) -> dict[str, str | None]:
        """The run's own column names (`task.columns`: a, b, label, group), which dicts of pairs may be keyed by."""
        return self._predictor.columns

    @property
    def config(self) -> DictConfig | None:
        """The run's config when the model came with one (a run, a shared folder); None for an exported ONNX folder."""
        return self._predictor.config

    @property
    def about(self) -> dict:
        """What the model is, for people: its aligner, embeddings, run folder, the checkpoint's sha256, ..."""
        return self._predictor.about

    @cached_property
    def description(self) -> dict[str, Any]:
        """What the model is, as the server's GET /info and its page say it (matching.inference.description): its
        task, labels, aligner, embeddings, the data it was trained on, its weights by name and sha256, backend,
        arithmetic and the page's example inputs; no path of the machine. Computed once, on first use (it hashes
        the weights), and kept."""
        return run_description(self._predictor)

    @property
    def origin(self) -> Path:
        """The folder or file it was loaded from."""
        return self._predictor.origin

    @property
    def vocab(self) -> Vocabulary:
        """The run's vocabulary (`matching.data.vocab.Vocabulary`; saved beside the weights as `vocab.txt`)."""
        return self._predictor.vocab

    @property
    def max_length(self) -> int | None:
        """The most tokens of a text the model reads (`data.max_length`; longer ones are cut, see `truncated`);
        None: no limit."""
        return self._predictor.max_length

    @property
    def null_token(self) -> bool:
        """Whether the model puts a NULL token (`"<null>"`) first on both sides (`model.null_token`)."""
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
        """The logits of the pairs, in their order.

        Args:
            pairs: Tuples, dicts or `Pair`s (see the class).
            source: What the input is called in error messages (`pairs[3]: ...`).

        Returns:
            An (N, classes) float32 NumPy array.
        """
        return self._predictor.logits(self.as_pairs(pairs, source), source)

    def predict(self, pairs: Iterable[PairLike] | tuple[str, str], source: str = "pairs") -> list[dict] | dict:
        """The model's answer for each pair.

        Args:
            pairs: Tuples, dicts or `Pair`s (see the class); or one pair `(a, b)`.
            source: What the input is called in error messages (`pairs[3]: ...`).

        Returns:
            One dict per pair, in their order (one pair `(a, b)`: one dict). A classification model's:
                `{"label": ..., "probs": {label: p, ...}}`. A ranking model's: `{"score": ..., "p_match": ...}`,
                where `score` = logit[match] − logit[no match], which orders as P(match) but never saturates at 1.0.
        """
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
        """The candidates for `query`, best first (ties: in the order given). Ranking models only.

        Args:
            query: The first text of every pair (a question, a context).
            candidates: The second texts, a list (one string is refused).
            top_k: Only the first `top_k` answers; None: all.

        Returns:
            `[{"index", "candidate", "score", "p_match"}, ...]`, best first; `index` is the candidate's position in
                `candidates`, `score` and `p_match` as `predict` gives them.

        Raises:
            RunError: The model classifies pairs (it does not rank).
        """
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
        """Encode `candidates` once and rank against them from now on.

        A contextual model (its encoder frozen or fine-tuned) then runs its encoder on each query alone, the
        candidates' word states read from the index (float16 for a frozen encoder, float32 for a fine-tuned one, as
        the model reads every state: the answers are the same as without it). It replaces an index used before. A
        text not in the index is still encoded, each distinct one once per call. Any other model says why it has
        none. See docs/how-to/ranking.md ("Rank against an index").

        Args:
            candidates: The texts (second texts of pairs) to encode.
            save_to: Also write the index into this folder, for `use_index` (or `matching-predict index=`) in
                another process.

        Returns:
            The index, used by every later call.
        """
        if isinstance(candidates, str):
            raise DataFormatError("candidates must be a list of texts, not one string; wrap it: [candidate]")
        index = self._predictor.index(list(candidates))
        if save_to is not None:
            index.save(save_to)
        self._predictor.use_index(index)
        return index

    def use_index(self, index: StateIndex | str | Path | None) -> StateIndex | None:
        """Rank against a saved index.

        Args:
            index: A `StateIndex`, or the folder `index(..., save_to=)` wrote (read memory-mapped); None: no index.

        Returns:
            The index now used.

        Raises:
            StaleIndexError: The index was built by another encoder or text pipeline than this model's (the message
                names what differs).
        """
        if isinstance(index, (str, Path)):
            index = StateIndex.load(index, self._predictor.index_key())
        self._predictor.use_index(index)
        return index

    def align(self, a: str, b: str) -> dict:
        """One pair's alignment: what `matching-visualize` draws and the server's `/align` returns (the PyTorch
        backend only, see `can_align`).

        Args:
            a: The first text.
            b: The second text.

        Returns:
            `{"a_tokens", "b_tokens", "matrices", "label", "probs"}`: both sides' tokens as the model sees them
                (`"<null>"` first when it uses the NULL token); every matrix the aligner used, by name, a (len a,
                len b) array each (intra-sentence ones named `intra_a/...` and `intra_b/...`, square); and the
                prediction (a ranking model's also with its `score` and `p_match`, as `predict` gives them).
        """
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
