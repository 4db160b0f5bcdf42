"""A pretrained Transformer encoder as part of the model: its last hidden states pooled per word (the mean of each
word's pieces), frozen or with its top layers fine-tuned. The embedding source (matching.model.contextual) builds it
from the encoder's files and gives it the word pieces of each text (matching.model.pretrained_encoder)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from matching.errors import UserError


class EncoderError(UserError, ValueError):
    """The encoder cannot be found or used; the message says what to install or which folder to point at."""


def pool_words(states: Tensor, word: Tensor, row: Tensor, texts: int, words: int) -> Tensor:
    """(texts, words, D): the mean of the piece states of each word. states (R, P, D) for R windows; word (R, P)
    the word of each piece (−1: none); row (R,) the text of each window. A word seen in several (overlapping)
    windows averages over all its pieces there; a word with no piece gets zeros."""
    d = states.shape[-1]
    valid = word >= 0  # (R, P)
    target = (row.unsqueeze(1) * words + word.clamp(min=0))[valid]  # (N,) flat (text, word) slots
    values = states[valid].float()  # (N, D)
    sums = torch.zeros(texts * words, d, device=states.device).index_add_(0, target, values)
    counts = torch.zeros(texts * words, device=states.device).index_add_(
        0, target, torch.ones_like(target, dtype=torch.float)
    )
    return (sums / counts.clamp(min=1).unsqueeze(1)).view(texts, words, d)


class WordEncoder(nn.Module):
    """The encoder with word pooling: window inputs from `WordPieces` -> (texts, words, D) word states.

    `trainable_layers`: 0 freezes everything; N trains the top N Transformer layers, at learning rate `lr` (None:
    the optimiser's, as the model's other weights). The embeddings and the lower
    layers stay frozen and always run in eval mode (no dropout), so that their output for a text never changes:
    it can then be computed once and cached (`lower_states`), and the top layers run from the cache (`forward`
    with `hidden`) give the model that running the whole encoder on every batch gives, to float rounding."""

    def __init__(self, encoder: nn.Module, trainable_layers: int = 0, lr: float | None = None):
        super().__init__()
        self.lr = lr  # the trained layers' learning rate (None: the optimiser's, as every other weight)
        self.encoder = encoder
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        layers = _layers(encoder)
        if trainable_layers > len(layers):
            raise EncoderError(
                f"embeddings.trainable_layers={trainable_layers}, but the encoder has {len(layers)} layers"
            )
        for layer in layers[len(layers) - trainable_layers :]:
            for p in layer.parameters():
                p.requires_grad_(True)
        self.trainable_layers = trainable_layers
        self.train()  # fine-tuned: dropout on in the trained layers; frozen ones always eval (see train)

    @property
    def layers(self) -> nn.ModuleList:
        """The encoder's Transformer layers (not a submodule of its own: the checkpoint names each weight once)."""
        return _layers(self.encoder)

    @property
    def frozen_layers(self) -> int:
        """The Transformer layers below the trained ones (all of them for a frozen encoder)."""
        return len(self.layers) - self.trainable_layers

    def train(self, mode: bool = True):
        """Only the trained top layers follow `mode`: the embeddings and frozen layers never run their dropout."""
        super().train(mode)
        self.encoder.eval()
        for layer in self.layers[self.frozen_layers :]:
            layer.train(mode)
        return self

    def forward(self, ids: Tensor | None = None, mask: Tensor | None = None, word: Tensor | None = None,
                row: Tensor | None = None, texts: int = 0, words: int = 0,
                hidden: Tensor | None = None) -> Tensor:  # fmt: skip
        """(texts, words, D) word states of the windows (R, P): from their piece ids, through the whole encoder; or,
        given `hidden` (R, P, D), the frozen layers' output (`lower_states`, cached), through the trained layers."""
        if hidden is None:
            states = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # (R, P, D)
        else:
            states = self.top_layers(hidden, mask)
        return pool_words(states, word, row, texts, words)  # (texts, words, D)

    @torch.no_grad()
    def lower_states(self, ids: Tensor, mask: Tensor) -> Tensor:
        """(R, P, D) the output of the frozen layers (the trained layers' input) for windows (R, P) of piece ids."""
        out = self.encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        return out.hidden_states[self.frozen_layers]

    def top_layers(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """The trained layers run on `hidden` (R, P, D), the frozen layers' output, with the windows' mask (R, P)."""
        layers = self.layers[self.frozen_layers :]
        hidden = hidden.to(next(layers[0].parameters()).dtype)  # the cache's float32 into bf16 weights (dtype=bf16)
        attention = _attention_mask(self.encoder, hidden, mask)
        for layer in layers:
            out = layer(hidden, attention)
            hidden = out[0] if isinstance(out, tuple) else out  # transformers 4 returns a tuple, 5 the tensor
        return hidden

    def runs_from_lower_states(self, ids: Tensor, mask: Tensor) -> float:
        """The largest difference between the whole encoder's last states and the trained layers run from
        `lower_states` (eval mode, no dropout) on windows (R, P): about 1e-6 when this encoder's layers can be run
        from cached states, large for one whose layers need more than the hidden states and the mask (a relative
        position bias, as MPNet's)."""
        training = self.training
        self.eval()
        try:
            with torch.no_grad():
                whole = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
                split = self.top_layers(self.lower_states(ids, mask), mask)
            real = mask.bool()
            return float((whole[real] - split[real]).abs().max())
        finally:
            self.train(training)


def _attention_mask(encoder: nn.Module, hidden: Tensor, mask: Tensor):
    """The attention mask that a Hugging Face encoder's layers take, from the (R, P) 1/0 mask of the pieces: made
    by transformers' own mask builder for the encoder's attention implementation (transformers 5), or the additive
    (R, 1, 1, P) mask of transformers 4."""
    try:
        from transformers.masking_utils import create_bidirectional_mask
    except ImportError:  # transformers 4
        return encoder.get_extended_attention_mask(mask, mask.shape, dtype=hidden.dtype)
    return create_bidirectional_mask(config=encoder.config, inputs_embeds=hidden, attention_mask=mask)


def _layers(encoder: nn.Module) -> nn.ModuleList:
    """The Transformer layers of a Hugging Face encoder (BERT, RoBERTa, MiniLM, ... : `encoder.layer`)."""
    for name in ("encoder.layer", "transformer.layer", "layers", "encoder.layers"):
        module = encoder
        for part in name.split("."):
            module = getattr(module, part, None)
            if module is None:
                break
        if isinstance(module, nn.ModuleList):
            return module
    raise EncoderError(f"cannot find the Transformer layers of {type(encoder).__name__} for trainable_layers")


class EncoderServingModel(nn.Module):
    """A model over an encoder's word states as one module for other runtimes: the encoder's word pieces in, class
    probabilities and logits out.

    Each side's words come as ids (any nonzero id per word, 0 = padding: they only mark the real words) and as the
    encoder's inputs of their texts in windows (matching.model.pretrained_encoder.WordPieces): `pieces` (R, P) piece ids
    framed by [CLS] and [SEP], `piece_mask` (R, P) 1 for real pieces, `piece_word` (R, P) the word of each piece
    (−1 for [CLS], [SEP] and padding) and `piece_row` (R,) the text of each window. The encoder's states are pooled
    per word as in training; a frozen encoder's states are rounded to float16 there, as `predict` rounds them."""

    def __init__(self, model: nn.Module, encoder: nn.Module, frozen: bool):
        super().__init__()
        self.model, self.encoder, self.frozen = model, encoder, frozen
        self.eval()

    def _states(self, ids: Tensor, pieces: Tensor, mask: Tensor, word: Tensor, row: Tensor) -> Tensor:
        states = self.encoder(pieces, mask, word, row, texts=ids.shape[0], words=ids.shape[1])  # (B, L, D)
        return states.half() if self.frozen else states

    def forward(self, a: Tensor, b: Tensor, a_pieces: Tensor, a_piece_mask: Tensor, a_piece_word: Tensor,
                a_piece_row: Tensor, b_pieces: Tensor, b_piece_mask: Tensor, b_piece_word: Tensor,
                b_piece_row: Tensor) -> tuple[Tensor, Tensor]:  # fmt: skip
        a_states = self._states(a, a_pieces, a_piece_mask, a_piece_word, a_piece_row)
        b_states = self._states(b, b_pieces, b_piece_mask, b_piece_word, b_piece_row)
        logits = self.model(a, b, a_states=a_states, b_states=b_states).logits  # a fine-tuned encoder: its own
        return torch.softmax(logits, dim=-1), logits
