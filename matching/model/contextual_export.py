"""A contextual run for other runtimes (`matching-export format=onnx`, `backend=onnx`): the encoder, its word
pooling and the model as one module fed with each side's word pieces in windows, the encoder's own tokenizer beside
it, and what serving.json says a client must compute (matching.saved.onnx_folder). TorchScript is refused: it would
write the token-id model only, without the encoder (`ContextualEncoder.export_refusal`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from matching.data.preparation import PIECE_INPUTS, PIECE_KEYS
from matching.model.embeddings import ServingInputs, SourceExport
from matching.model.encoders import EncoderServingModel
from matching.model.pipeline import pad_batch
from matching.model.pretrained_encoder import EXAMPLE_TEXTS, PretrainedEncoder, WordPieces


class ContextualExport(SourceExport):
    """How a run over `encoder` is exported (see the module docstring)."""

    def __init__(self, encoder: PretrainedEncoder):
        self.encoder = encoder

    @property
    def pieces(self) -> WordPieces:
        """The word pieces, in windows, that the exported model is fed with (a runtime computes them as this does)."""
        return self.encoder.pieces

    def serving_model(self, model: nn.Module, text: Any) -> ServingInputs:
        """The encoder, word pooling and model as one module fed with each side's word pieces in windows."""
        frozen = not self.encoder.trainable_layers
        serving = EncoderServingModel(model, model.encoder or self.encoder.word_encoder(0), frozen)
        args = self.serving_inputs(text, EXAMPLE_TEXTS)
        names = ["a", "b", *(f"{side}_{n}" for side in "ab" for n in PIECE_INPUTS)]
        batch = torch.export.Dim("batch")
        shapes = {"a": {0: batch, 1: torch.export.Dim("len_a")}, "b": {0: batch, 1: torch.export.Dim("len_b")}}
        for side in "ab":
            rows = torch.export.Dim(f"{side}_windows")
            # a window: the encoder's positions
            width = torch.export.Dim(f"{side}_pieces", max=self.encoder.max_positions)
            shapes |= {f"{side}_{n}": ({0: rows} if n == "piece_row" else {0: rows, 1: width}) for n in PIECE_INPUTS}
        return ServingInputs(serving, tuple(args[n] for n in names), names, tuple(shapes[n] for n in names))

    def serving_inputs(self, text: Any, pairs: Sequence[tuple[str, str]]) -> dict[str, Tensor]:
        """The exported model's inputs for `pairs` (a TextPipeline `text` prepares them as `predict` does)."""
        from matching.data.pairs import Pair

        prepared = text.prepare([Pair(x, y, "") for x, y in pairs])
        batch = {"a": pad_batch(prepared.a), "b": pad_batch(prepared.b)}  # the ids; the pieces below, not states
        for side, words in (("a", prepared.words_a), ("b", prepared.words_b)):
            inputs = self.encoder.pieces(words)
            for name, key in zip(PIECE_INPUTS, PIECE_KEYS, strict=True):
                batch[f"{side}_{name}"] = inputs[key]
        return batch

    def write_serving_files(self, folder: Path) -> None:
        """The encoder's own tokenizer beside an exported model: its pieces are the model's input."""
        self.encoder.tokenizer.backend_tokenizer.save(str(folder / "encoder_tokenizer.json"))

    def serving_spec(self, fmt: str, reference: dict | None = None) -> dict[str, Any]:
        """serving.json's inputs of an ONNX model and the rule that makes them; with `reference` (a shared folder's),
        the encoder by hub id."""
        spec: dict[str, Any] = {}
        if fmt == "onnx":
            pieces = self.encoder.pieces
            spec["inputs"] = {
                "a": "int64 (batch, len_a): one nonzero id per word (tokenizer.json's ids will do), 0 = padding",
                "b": "int64 (batch, len_b)",
                "a_pieces": "int64 (windows_a, pieces_a): the encoder's piece ids of each window, [CLS] ... [SEP], "
                "padded",
                "a_piece_mask": "int64 (windows_a, pieces_a): 1 for [CLS], the pieces and [SEP], 0 for padding",
                "a_piece_word": "int64 (windows_a, pieces_a): the word (0-based, in its text) of each piece; -1 for "
                "[CLS], [SEP] and padding",
                "a_piece_row": "int64 (windows_a,): the text (0-based row of a) of each window",
                "b_pieces, b_piece_mask, b_piece_word, b_piece_row": "the same for b",
            }
            name = self.encoder.name
            spec["contextual"] = {
                "encoder": Path(name).name if Path(name).expanduser().exists() else name,
                "weights_sha256": self.encoder.weights,
                "words": "each text's words: tokenizer.json's normalizer, then its pre_tokenizer (the token strings, "
                "not ids), cut to max_length",
                "piece_tokenizer": "encoder_tokenizer.json",
                "pieces": "encode each text's words with encoder_tokenizer.json as pre-tokenized input, without "
                "special tokens; its word_ids give each piece's word",
                "window": pieces.width,
                "step": pieces.step,
                "cls_id": pieces.cls,
                "sep_id": pieces.sep,
                "pad_id": pieces.pad,
                "windows_rule": "a text of n pieces is one window when n <= window, else windows starting at every "
                "multiple of step below n - window, and at n - window; each window is [cls_id] + its pieces + "
                "[sep_id]",
            }
        if reference is not None:
            spec["encoder"] = {"hub_id": reference["hub_id"], "revision": reference["revision"],
                               "weights_sha256": self.encoder.weights}  # fmt: skip
        return spec
