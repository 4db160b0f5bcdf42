"""One text pipeline for training and PyTorch inference: `TextPreparation` (a pair's texts -> tokens -> the model's
words -> ids -> batches within one memory budget; matching.data.preparation, without torch) with the tensors a
PyTorch model takes, and what the embedding source adds to a batch (an encoder's word states).

The data module reads and prepares whole splits through it (`tokenize`, then matching.data.encoding); PyTorch
inference (matching.inference) prepares new pairs through it (`prepare`, then `order` into batches within the budget and
`batch` for each), so that a new pair is prepared exactly as the training data was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from matching.data.preparation import Budget, PreparedPairs, TextPreparation, pad_ids
from matching.data.tasks import Task
from matching.data.vocab import Tokenizer, Vocabulary
from matching.model.embeddings import EmbeddingSource


def pad_batch(seqs: Sequence[np.ndarray]) -> torch.Tensor:
    """(B, max length) int64 ids, 0-padded on the right."""
    return torch.from_numpy(pad_ids(seqs))


class TextPipeline(TextPreparation):
    """`TextPreparation` with PyTorch batches; `source` is the run's embedding source (what a batch carries besides
    ids)."""

    def __init__(self, task: Task, tokenizer: Tokenizer, max_length: int | None, budget: Budget,
                 source: EmbeddingSource | None = None, vocab: Vocabulary | None = None):  # fmt: skip
        super().__init__(task, tokenizer, max_length, budget, vocab)
        self.source = source

    def batch(self, prepared: PreparedPairs, index: np.ndarray | None = None) -> dict[str, Any]:
        """A model batch of the pairs `index` (all by default) of `prepared`."""
        index = np.arange(len(prepared)) if index is None else index
        batch = {name: torch.from_numpy(ids) for name, ids in self.ids(prepared, index).items()}
        if self.source is not None:
            words_a, words_b = [prepared.words_a[i] for i in index], [prepared.words_b[i] for i in index]
            batch |= self.source.new_inputs(words_a, words_b)
        return batch
