"""Decomposable Attention (Parikh et al. 2016) with a pluggable aligner.

embed    frozen unit-norm word vectors -> linear projection to `hidden`      (optional NULL token first)
         (or, word states: an encoder's states pooled per word, given with the batch or computed here)
intra    optional self-alignment with distance biases: a_i -> [a_i; a'_i]    (Parikh §3.1 "intra")
attend   the aligner: β_i (what of b aligns to a_i), α_j (what of a aligns to b_j)
compare  v1_i = G([a_i; β_i]),  v2_j = G([b_j; α_j])
aggregate v1 = Σ_i v1_i, v2 = Σ_j v2_j over real tokens;  logits = W·H([v1; v2])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from matching.data.vocab import NULL_ID, PAD_ID
from matching.errors import ConfigError
from matching.model.aligners import Aligner
from matching.model.layers import FeedForward, split_sides
from matching.model.precision import forward_in

AlignerFactory = Callable[..., Aligner]  # called as factory(dim=...)

#: The batch keys a model takes besides the ids "a" and "b" (word states or an encoder's inputs), when a batch has them.
CONTEXT_INPUTS = ("a_states", "b_states", "a_pieces", "b_pieces")


class MatchOutput(NamedTuple):
    logits: Tensor  # (B, num_classes)
    matrices: dict[str, Tensor]  # cross alignment (B, La, Lb); intra ones prefixed "intra_a/", "intra_b/"
    mask_a: Tensor  # (B, La) bool: the real tokens the matrices' rows stand for (NULL first when the model uses it)
    mask_b: Tensor  # (B, Lb) bool


def run_batch(model: nn.Module, batch: Mapping[str, Any], dtype: torch.dtype) -> MatchOutput:
    """The model on a batch (ids `a`, `b` and whatever CONTEXT_INPUTS it carries), computed in `dtype` (see
    matching.model.precision.forward_in): the one forward pass of training, evaluation and PyTorch inference."""
    context = {k: batch[k] for k in CONTEXT_INPUTS if k in batch}
    return forward_in(dtype, model, batch["a"], batch["b"], **context)


class IntraAttention(nn.Module):
    """Self-alignment of one sentence with Parikh's distance-sensitive biases d(i−j).

    Signed distances with |i−j| > `max_distance` share one bucket per sign. The aligner (softmax or CoDA,
    the CoDA paper's eq. 10 self-attention) receives the biases as `score_bias`.
    """

    def __init__(self, dim: int, aligner: AlignerFactory, max_distance: int = 10):
        super().__init__()
        self.max_distance = max_distance
        self.aligner = aligner(dim=dim)
        if self.aligner.copies != 1:
            raise ConfigError("the intra-sentence aligner must return one aligned vector per token (copies=1)")
        self.distance_bias = nn.Embedding(2 * max_distance + 3, 1)
        nn.init.zeros_(self.distance_bias.weight)

    def forward(self, x: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        length = x.shape[1]
        pos = torch.arange(length, device=x.device)
        limit = self.max_distance + 1
        buckets = (pos.view(-1, 1) - pos.view(1, -1)).clamp(-limit, limit) + limit  # (L, L)
        bias = self.distance_bias(buckets).squeeze(-1).to(x.dtype)  # (L, L)
        aligned = self.aligner(x, x, mask, mask, score_bias=bias)
        return torch.cat([x, aligned.a_aligned], dim=-1), aligned.matrices  # (B, L, 2D)


class DecomposableAttention(nn.Module):
    """Parikh et al.'s model; see the module docstring. Token id 0 is padding and 1 the NULL token.

    Args:
        vectors: (V, E) initial embedding matrix (pretrained rows plus OOV-bucket rows).
        num_classes: output classes.
        aligner: factory building the cross aligner for a given input width, e.g. a Hydra partial.
        hidden: width of the projection and of F, G, H.
        dropout: dropout before every linear layer of F, G, H.
        null_token: prepend the NULL token to both sentences.
        intra_aligner: factory for the optional intra-sentence attention (None: off).
        freeze_embeddings: keep the word vectors fixed (Parikh); False for trainable random embeddings. Frozen
            rows are stored in float16 (half the checkpoint; unit-norm rows lose nothing that matters) and
            computed with in the projection's precision.
        normalize_embeddings: scale every row of `vectors` to unit L2 norm first.
        word_states: the words' vectors are an encoder's states pooled per word (matching.model.encoders), given with
            each batch (`a_states`, `b_states`: (B, L, E)) or, with a fine-tuned `encoder`, computed from the
            batch's word pieces (`a_pieces`, `b_pieces`); `vectors` is then the (2, E) table of padding and the
            NULL token, and the ids only mark the real tokens. The embedding source says which (model_arguments).
        encoder: the `WordEncoder` fine-tuned with the model (an encoder with trainable layers), or None.
    """

    def __init__(
        self,
        vectors: Tensor,
        num_classes: int,
        aligner: AlignerFactory,
        hidden: int = 200,
        dropout: float = 0.2,
        null_token: bool = False,
        intra_aligner: AlignerFactory | None = None,
        intra_max_distance: int = 10,
        freeze_embeddings: bool = True,
        normalize_embeddings: bool = True,
        word_states: bool = False,
        encoder: nn.Module | None = None,
    ):
        super().__init__()
        if encoder is not None and not word_states:
            raise ValueError("an encoder is only used by a model of word states (word_states=True)")
        if vectors.dim() != 2 or vectors.shape[0] <= NULL_ID:
            raise ValueError(f"vectors must be a (V, E) matrix with V > {NULL_ID}, got {tuple(vectors.shape)}")
        if num_classes < 2:
            raise ConfigError(f"num_classes must be at least 2, got {num_classes}")
        vectors = vectors.float()
        if normalize_embeddings:
            vectors = vectors / vectors.norm(dim=1, keepdim=True).clamp_min(1e-12)
        vectors[PAD_ID] = 0.0
        if freeze_embeddings:
            vectors = vectors.half()
        self.embedding = nn.Embedding.from_pretrained(vectors, freeze=freeze_embeddings, padding_idx=PAD_ID)
        self.projection = nn.Linear(vectors.shape[1], hidden)
        self.null_token = null_token
        self.word_states, self.normalize_states = word_states, word_states and normalize_embeddings
        self.encoder = encoder
        self.intra = IntraAttention(hidden, intra_aligner, intra_max_distance) if intra_aligner else None
        width = 2 * hidden if self.intra else hidden
        self.aligner = aligner(dim=width)
        self.compare = FeedForward(width * (1 + self.aligner.copies), hidden, dropout)  # G
        self.aggregate = FeedForward(2 * hidden, hidden, dropout)  # H
        self.classifier = nn.Linear(hidden, num_classes)

    #: Submodules whose weights stay float32 when the model computes in bf16 (matching.model.precision): the classifier
    #: (hidden x classes weights, no cost), so that the logits and the ranking score, their difference, keep float32's
    #: resolution. In bf16 two close candidates' scores round to a tie (WikiQA dev: −1.80454 and −1.80828 both became
    #: −1.804688, and the tie put the correct answer second).
    float32_modules = ("classifier",)

    def _embed_states(self, ids: Tensor, states: Tensor | None, pieces: dict | None) -> tuple[Tensor, Tensor]:
        """A word-state model's projected word states of one side (NULL first when used) and its mask."""
        x = self._states(ids, states, pieces)  # (B, L, E) float32
        if self.null_token:  # ids.shape[0], not len(ids): a dynamic batch in ONNX
            x = torch.cat([self.embedding.weight[NULL_ID].to(x.dtype).expand(ids.shape[0], 1, -1), x], dim=1)
            ids = torch.cat([torch.full_like(ids[:, :1], NULL_ID), ids], dim=1)
        return self.projection(x.to(self.projection.weight.dtype)), ids != PAD_ID  # (B, L, H)

    def _embed_pair(self, a_ids: Tensor, b_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Both sides' projected vectors, a's tokens then b's, (B, La + Lb, H), their mask (B, La + Lb) and La,
        with the NULL token."""
        if self.null_token:
            null = torch.full_like(a_ids[:, :1], NULL_ID)
            a_ids, b_ids = torch.cat([null, a_ids], dim=1), torch.cat([null, b_ids], dim=1)
        ids = torch.cat([a_ids, b_ids], dim=1)
        x = self.projection(self.embedding(ids).to(self.projection.weight.dtype))
        return x, ids != PAD_ID, a_ids.shape[1]

    def _states(self, ids: Tensor, states: Tensor | None, pieces: dict | None) -> Tensor:
        """(B, L, E) the words' states: given, or from the fine-tuned encoder; unit norm if asked."""
        if states is None:
            if self.encoder is None or pieces is None:
                raise ValueError(
                    "this model needs the encoder states of its words with every batch (a_states, "
                    "b_states), or its word pieces (a_pieces, b_pieces) when the encoder is fine-tuned; build batches "
                    "with PairDataModule (loaders), or TextPipeline.batch for new pairs"
                )
            states = self.encoder(**pieces, texts=ids.shape[0], words=ids.shape[1])
        x = states.float()
        if self.normalize_states:
            x = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        return x * (ids != PAD_ID).unsqueeze(-1)

    def forward(self, a_ids: Tensor, b_ids: Tensor, a_states: Tensor | None = None, b_states: Tensor | None = None,
                a_pieces: dict | None = None, b_pieces: dict | None = None) -> MatchOutput:  # fmt: skip
        """a_ids (B, La), b_ids (B, Lb): token ids, 0-padded on the right. A model of word states also takes the words'
        states (B, L, E), or the word pieces that their fine-tuned encoder turns into them."""
        if self.word_states:
            a, mask_a = self._embed_states(a_ids, a_states, a_pieces)
            b, mask_b = self._embed_states(b_ids, b_states, b_pieces)
            mask = torch.cat([mask_a, mask_b], dim=1)
        else:  # both sides through the vector table and the projection at once: (B, La + Lb, H)
            x, mask, la = self._embed_pair(a_ids, b_ids)
            (a, b), mask_a, mask_b = split_sides(x, la), mask[:, :la], mask[:, la:]
        matrices: dict[str, Tensor] = {}
        if self.intra is not None:
            a, intra_a = self.intra(a, mask_a)  # (B, La, 2H)
            b, intra_b = self.intra(b, mask_b)
            matrices |= {f"intra_a/{k}": v for k, v in intra_a.items()}
            matrices |= {f"intra_b/{k}": v for k, v in intra_b.items()}
        beta, alpha, cross = self.aligner(a, b, mask_a, mask_b)
        matrices |= cross
        # G on [a_i; β_i] and [b_j; α_j] in one call over the tokens of both sides, then the two sums. (The
        # static model's a and b are views of one tensor, but concatenating them again keeps the order in which
        # their gradients add up, so a seed's numbers do not change.)
        compared = torch.cat([torch.cat([a, b], dim=1), torch.cat([beta, alpha], dim=1)], dim=-1)
        v = self.compare(compared) * mask.unsqueeze(-1).to(compared.dtype)
        la = a.shape[1]
        v1, v2 = (side.sum(1) for side in split_sides(v, la))  # (B, H) each, padding excluded
        h = self.aggregate(torch.cat([v1, v2], dim=-1))
        logits = self.classifier(h.to(self.classifier.weight.dtype))  # (B, C); float32 in bf16 too (float32_modules)
        return MatchOutput(logits, matrices, mask_a, mask_b)
