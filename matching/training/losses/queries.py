"""What every training loss is (`TrainingLoss`) and what the losses that compare a query's candidates share: each
pair's query in the batch, and which queries have both a positive and a negative candidate."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from matching.errors import ConfigError


class TrainingLoss(nn.Module):
    """A training loss: `loss(logits, batch)` -> a scalar tensor, on a training batch's logits (N, C) and its
    `label`, `group` (query ids, -1 for none) and `index` (each pair's place in the training split) tensors."""

    #: Whether the loss compares the candidates of one query (see matching.training.losses).
    compares_candidates: ClassVar[bool] = False

    def forward(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError


def check_positive(key: str, value: object) -> None:
    """ConfigError unless the setting `key` is a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{key} must be a positive number, got {value!r}")


def queries(groups: torch.Tensor) -> torch.Tensor:
    """The query ids, a pair without one (-1) its own query."""
    alone = -2 - torch.arange(len(groups), device=groups.device)
    return torch.where(groups >= 0, groups, alone)


def ranked_queries(targets: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inverse, positives, keep): each pair's query index in the batch, each query's count of positives, and
    whether a query has both a positive and a negative candidate."""
    _, inverse = torch.unique(queries(groups), return_inverse=True)
    count = int(inverse.max()) + 1 if len(inverse) else 0
    positives = torch.zeros(count, device=targets.device).index_add_(0, inverse, targets.float())
    sizes = torch.zeros(count, device=targets.device).index_add_(0, inverse, torch.ones_like(targets.float()))
    return inverse, positives, (positives > 0) & (positives < sizes)


def positive_negative_pairs(targets: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: row a positive, column a negative candidate of the same query."""
    groups = queries(groups)
    return (groups[:, None] == groups[None, :]) & (targets[:, None] == 1) & (targets[None, :] == 0)


def query_log_softmax(values: torch.Tensor, inverse: torch.Tensor, count: int) -> torch.Tensor:
    """log softmax of `values` (N,) within each query (`inverse`: each value's query, `count` queries), stable."""
    top = torch.full((count,), float("-inf"), device=values.device, dtype=values.dtype)
    top = top.scatter_reduce(0, inverse, values.detach(), reduce="amax")
    sums = torch.zeros(count, device=values.device, dtype=values.dtype).index_add_(
        0, inverse, (values - top[inverse]).exp()
    )
    return values - (sums.log() + top)[inverse]
