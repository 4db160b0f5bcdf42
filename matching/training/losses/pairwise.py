"""The pairwise hinge (`loss=pairwise`): max(0, margin − (s⁺ − s⁻)) over every (positive, negative) pair of
candidates of one query in the batch, averaged over those pairs (a query with many negatives weighs more, as in
RankNet-style training on candidate lists). A pair's score s is the margin of its match logit (`match_margin`: what
evaluate, predict and serve rank by). Only queries with both a positive and a negative candidate in the batch take
part; a batch without any gives a zero loss (with a gradient of zeros, so that every process still runs the same
backward pass)."""

from __future__ import annotations

from typing import Any

import torch

from matching.training.losses.queries import TrainingLoss, check_positive, positive_negative_pairs
from matching.training.metrics import match_margin


class PairwiseHinge(TrainingLoss):
    """The pairwise hinge of `margin` (a positive number) on each pair's match margin (see the module docstring)."""

    compares_candidates = True

    def __init__(self, margin: float = 1.0):
        super().__init__()
        check_positive("loss.margin", margin)
        self.margin = float(margin)

    def forward(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        return pairwise_hinge(match_margin(logits), batch["label"], batch["group"], self.margin)


def pairwise_hinge(scores: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor, margin: float) -> torch.Tensor:
    """mean over (positive, negative) candidate pairs of one query of max(0, margin − (s_pos − s_neg)).
    scores (N,) float; targets (N,) 1 for a match, 0 otherwise; groups (N,) query ids."""
    ordered = positive_negative_pairs(targets, groups)  # (N, N)
    if not bool(ordered.any()):
        return scores.sum() * 0.0
    hinge = (margin - (scores[:, None] - scores[None, :])).clamp_min(0)  # (N, N)
    return hinge[ordered].mean()
