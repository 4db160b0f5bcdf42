"""A pretrained Transformer encoder as the embedding source: its last hidden states, pooled per word.

`ContextualEncoder` (`conf/embeddings/minilm_contextual.yaml`, `embeddings.model=<hub name or local folder>`) puts
the encoder's contextual token states where the static word vectors were, before the model's trained projection.
Our tokenizer's words stay the unit of everything downstream (aligners, NULL token, heat-maps): each word's state
is the mean of the last hidden states of its word pieces. A text longer than the encoder's positions is encoded
in overlapping windows (every piece's state is the mean over the windows that hold it), and counted in a warning.

Frozen (the default), a text's states never change, so every distinct text of a split is encoded once and kept in
a cache; with `embeddings.trainable_layers=N` the top N layers are fine-tuned with the model, which runs them on
every batch, and the frozen lower layers' output is what the cache keeps (`cache_frozen_layers`). New text
(predict, visualize, serve) is encoded on the fly, by the frozen or the run's fine-tuned encoder.

The source is made of parts, one per role, each over the one `PretrainedEncoder` (the encoder's files, tokenizer,
word pieces and module, matching.model.pretrained_encoder):

- what the model computes: `matching.model.encoders.WordEncoder` (an nn.Module), which `model_arguments` hands the
  model when it fine-tunes layers;
- the training cache: `StatesCache` (matching.model.contextual_states), behind `caches_with_corpus`, `attach` and
  `collate`;
- new text's states: `TextStates` (matching.model.text_states), behind `new_inputs` and `text_states`, where the
  inference side attaches an index of known texts (matching.inference.state_index) or another runtime
  (matching.inference.onnx_encoder);
- export: `ContextualExport` (matching.model.contextual_export); sharing: `ContextualSharing`
  (matching.model.contextual_sharing).

This class keeps the `embeddings` node's settings and the EmbeddingSource interface; its name is the `_target_`
that saved runs' configs carry.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from matching.data.encoding import EncodedSplit
from matching.model.contextual_export import ContextualExport
from matching.model.contextual_sharing import ContextualSharing
from matching.model.contextual_states import StatesCache
from matching.model.embeddings import EmbeddingSource
from matching.model.pretrained_encoder import MINILM, PretrainedEncoder
from matching.model.text_states import TextStates


class ContextualEncoder(EmbeddingSource):
    """The contextual embedding source (`embeddings=minilm_contextual`); see the module docstring.

    Args:
        model: a Hugging Face model name or a local folder (default all-MiniLM-L6-v2).
        revision: the hub revision (a tag or commit) when `model` is a hub name.
        dim: the encoder's hidden size; null reads it from the encoder (a value that differs is an error).
        max_positions: positions per window, [CLS] and [SEP] included; null: the encoder's own (512 for BERT).
        stride: pieces shared by consecutive windows of a longer text (at most half a window).
        batch_size: texts encoded together while the cache is built or new text is encoded.
        trainable_layers: 0 keeps the encoder frozen (states cached); N fine-tunes its top N layers.
        cache_frozen_layers: with trainable layers, run the frozen lower layers once per text (cached) rather than
            on every batch.
        encoder_lr: the trainable layers' learning rate (null: the optimiser's `optim.lr`, as the model's).
        freeze, normalize: as for word vectors; `normalize` scales each word state to unit L2 norm.
        device: where the cache is built ("auto": the GPU when there is one).
    """

    reads_every_word = True  # every word reaches the model with its own state: none is "unknown"

    def __init__(self, model: str = MINILM[0], revision: str | None = None, dim: int | None = None,
                 max_positions: int | None = None, stride: int = 128, batch_size: int = 128,
                 trainable_layers: int = 0, freeze: bool = True, normalize: bool = True,
                 device: str = "auto", cache_frozen_layers: bool = True,
                 encoder_lr: float | None = None):  # fmt: skip
        self.pretrained = PretrainedEncoder(model, revision, dim, max_positions, stride, trainable_layers, encoder_lr)
        self.dim, self.freeze, self.normalize = self.pretrained.dim, freeze, normalize
        device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        self.text_states = TextStates(self.pretrained, batch_size, device)
        self.cache = StatesCache(self.text_states, cache_frozen_layers)
        self.export = ContextualExport(self.pretrained)
        self.sharing = ContextualSharing(self.pretrained)

    # -- the vocabulary and the table (EmbeddingSource) ------------------------------------------------------------
    def identity(self) -> dict:
        """What the states depend on (cache keys, and the check that a run is used with its own encoder)."""
        return self.pretrained.identity()

    def table_rows(self, vocab) -> int:
        return 2  # padding and NULL: ids only mark real tokens, the states carry the meaning

    def matrix(self, vocab, seed: int, cache_dir: str | os.PathLike | None = None) -> torch.Tensor:
        """The model's (2, dim) table: padding (zeros) and the NULL token (N(0, 1), then normalised like a state)."""
        rows = torch.from_numpy(np.random.default_rng(seed).standard_normal((2, self.dim), dtype=np.float32))
        rows[0] = 0.0
        return rows

    # -- the model (EmbeddingSource) -------------------------------------------------------------------------------
    def model_arguments(self) -> dict[str, Any]:
        """The model takes each word's state with the batch; with trainable layers it owns the encoder."""
        trainable = self.pretrained.trainable_layers
        return {"word_states": True, "encoder": self.pretrained.word_encoder() if trainable else None}

    def checkpoint_record(self) -> dict:
        return self.identity()

    def check_trained(self, checkpoint: Path, record: dict | None, rows: int, vocab) -> str | None:
        """A run is used with the encoder it was trained with (the same weights), or not at all."""
        if record is None:
            return f"checkpoint {checkpoint} was not trained with a contextual embedder, but its config says so"
        encoder = self.pretrained
        if record.get("weights_sha256") != encoder.weights:
            return (
                f"checkpoint {checkpoint} was trained with the encoder at {record.get('encoder')} (weights sha256 "
                f"{str(record.get('weights_sha256'))[:12]}...), but embeddings.model={encoder.name} gives "
                f"{encoder.path} (sha256 {encoder.weights[:12]}...); point embeddings.model at the encoder the run "
                "was trained with"
            )
        return None

    def use_trained(self, model: nn.Module) -> None:
        """A trained run with a fine-tuned encoder: new text is encoded by that encoder (TextStates.use_trained)."""
        encoder = getattr(model, "encoder", None)
        if self.pretrained.trainable_layers and encoder is not None:
            self.text_states.use_trained(encoder)

    # -- the data (EmbeddingSource): the training cache ------------------------------------------------------------
    def caches_with_corpus(self, keys: Mapping[str, dict], cache_dir: Path) -> bool:
        """When the splits' states (frozen) or lower layers' output (fine-tuned, cached) are cached too (building
        them needs the words); fine-tuned without that cache: never."""
        return self.cache.holds(keys, cache_dir)

    def attach(self, splits: Mapping[str, EncodedSplit], keys: Mapping[str, dict], cache_dir: Path) -> None:
        self.cache.attach(splits, keys, cache_dir)

    def collate(self, split: EncodedSplit, indices: Sequence[int], host: np.ndarray, batch: dict[str, Any]) -> None:
        self.cache.collate(split, indices, host, batch)

    # -- new text (EmbeddingSource) ----------------------------------------------------------------------------------
    def new_inputs(self, words_a: Sequence[Sequence[str]], words_b: Sequence[Sequence[str]]) -> dict[str, Any]:
        """New text's states, encoded on the fly (frozen, or by a trained run's fine-tuned encoder); a fine-tuned
        encoder not yet trained (no `use_trained`) is given the pieces, and the model runs it."""
        states, pieces = self.text_states, self.pretrained.pieces
        if self.pretrained.trainable_layers and not states.fine_tuned:  # the model runs the encoder itself
            inputs = {"a_pieces": pieces(words_a), "b_pieces": pieces(words_b)}
        else:
            inputs = {"a_states": states.batch_states(words_a), "b_states": states.batch_states(words_b)}
        pieces.report("input")
        return inputs

    def on_device(self, device: str) -> None:
        self.text_states.on_device(device)

    # -- export (EmbeddingSource; the rest is `export`) ------------------------------------------------------------
    @classmethod
    def export_refusal(cls, fmt: str, checkpoint: str) -> str | None:
        if fmt != "torchscript":
            return None
        return (
            f"{checkpoint} is a contextual run (embeddings=minilm_contextual): format=torchscript writes only the "
            "token-id model, without the encoder and its word pooling. Export it with format=onnx (the encoder and "
            "the model in one file, fed with the encoder's word pieces; see serving.json) or format=hub (a shared "
            "folder for Matcher.load)."
        )
