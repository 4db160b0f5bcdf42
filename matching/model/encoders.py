"""A pretrained Transformer encoder as part of the model: its last hidden states pooled per word (the mean of each
word's pieces), frozen or with its top layers fine-tuned. The embedding source (matching.model.contextual) builds it
from the encoder's files and gives it the word pieces of each text."""

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

    `trainable_layers`: 0 freezes everything; N trains the top N Transformer layers (embeddings and lower layers
    stay frozen)."""

    def __init__(self, encoder: nn.Module, trainable_layers: int = 0):
        super().__init__()
        self.encoder = encoder
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        if trainable_layers:
            layers = _layers(encoder)
            if trainable_layers > len(layers):
                raise EncoderError(
                    f"embeddings.trainable_layers={trainable_layers}, but the encoder has {len(layers)} layers"
                )
            for layer in layers[len(layers) - trainable_layers :]:
                for p in layer.parameters():
                    p.requires_grad_(True)
        self.trainable_layers = trainable_layers
        self.train()  # fine-tuned: dropout on, as in training any layer; frozen: always eval (see train)

    def train(self, mode: bool = True):  # a frozen encoder never runs its dropout
        super().train(mode)
        if not self.trainable_layers:
            self.encoder.eval()
        return self

    def forward(self, ids: Tensor, mask: Tensor, word: Tensor, row: Tensor, texts: int, words: int) -> Tensor:
        states = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state  # (R, P, D)
        return pool_words(states, word, row, texts, words)  # (texts, words, D)


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
    encoder's inputs of their texts in windows (matching.model.contextual.WordPieces): `pieces` (R, P) piece ids
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
