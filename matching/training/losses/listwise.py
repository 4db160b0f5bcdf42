"""The listwise softmax (`loss=listwise`): softmax cross-entropy over all candidates of one query, the target spread
evenly over its positives, −(1/|P|) Σ_{p∈P} log softmax(s)_p (ListNet's top-one form; with one positive,
−log softmax(s)_positive), averaged over the queries of the batch. A pair's score s is the margin of its match logit
(`match_margin`). Only queries with both a positive and a negative candidate take part; a batch without any gives a
zero loss (with a gradient of zeros)."""

from __future__ import annotations

from typing import Any

import torch

from matching.training.losses.queries import TrainingLoss, query_log_softmax, ranked_queries
from matching.training.metrics import match_margin


class ListwiseSoftmax(TrainingLoss):
    """The listwise softmax cross-entropy on each pair's match margin (see the module docstring); no settings."""

    compares_candidates = True

    def forward(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        return listwise_softmax(match_margin(logits), batch["label"], batch["group"])


def listwise_softmax(scores: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """mean over queries of −(1/|P|) Σ_{p∈P} log softmax(s over the query's candidates)_p."""
    inverse, positives, keep = ranked_queries(targets, groups)
    if not bool(keep.any()):
        return scores.sum() * 0.0
    count = len(positives)
    log_softmax = query_log_softmax(scores, inverse, count)  # (N,)
    per_query = -torch.zeros(count, device=scores.device, dtype=scores.dtype).index_add_(
        0, inverse, targets.to(scores.dtype) * log_softmax
    ) / positives.clamp_min(1)
    return per_query[keep].mean()
