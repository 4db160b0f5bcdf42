"""The pointwise cross-entropy (`loss=pointwise`, the paper's protocol): every pair on its own, its logits against
its label, optionally weighted per class (`loss.class_weights`, e.g. inverse class frequencies for WikiQA's 5 %
positives)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from matching.errors import ConfigError
from matching.training.losses.queries import TrainingLoss

log = logging.getLogger(__name__)


class PointwiseCrossEntropy(TrainingLoss):
    """Cross-entropy of each pair's logits against its label. `class_weights`: null (plain cross-entropy),
    "balanced" (n / (classes · count of the class) over the training split, as in scikit-learn) or one weight per
    label. `label_counts` (the training split's pairs per label, in the task's label order) is given when
    the run's loss is built: "balanced" is computed from it and a list of weights is checked against its labels.
    Evaluation losses stay unweighted (matching.training.system), so that they compare across settings."""

    def __init__(
        self, class_weights: str | Sequence[float] | None = None, label_counts: Mapping[str, int] | None = None
    ):
        super().__init__()
        labels = list(label_counts or {})
        if class_weights is None:
            weights = None
        elif class_weights == "balanced":
            if label_counts is None:
                raise ConfigError("loss.class_weights=balanced weighs the labels by their counts in the training "
                                  "split, which this loss was not given")  # fmt: skip
            counts = [max(int(n), 1) for n in label_counts.values()]
            total = sum(int(n) for n in label_counts.values())
            weights = [total / (len(counts) * n) for n in counts]
            log.info("class weights (balanced over the training split): %s", dict(zip(labels, weights, strict=True)))
        elif isinstance(class_weights, str):
            raise ConfigError(f"loss.class_weights must be null, 'balanced' or a list of {len(labels) or 'label'} "
                              f"numbers, got {class_weights!r}")  # fmt: skip
        else:
            weights = [float(w) for w in class_weights]
            if label_counts is not None and len(weights) != len(labels):
                raise ConfigError(f"loss.class_weights needs one weight per label {labels}, got {weights}")
        self.register_buffer("class_weights", None if weights is None else torch.tensor(weights), persistent=False)

    def forward(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        return F.cross_entropy(logits, batch["label"], weight=self.class_weights)
