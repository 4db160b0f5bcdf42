"""The training losses, one class per file, each named by what it computes and each checking its own settings when
it is built (the `loss` config group, conf/loss/, names one; `distill.*` wraps it in DistilledLoss):

- `PointwiseCrossEntropy` (pointwise.py, `loss=pointwise`): the cross-entropy of every pair on its own, optionally
  weighted per class; the paper's protocol, for classification and ranking tasks alike;
- `PairwiseHinge` (pairwise.py, `loss=pairwise`): a hinge over each query's (positive, negative) candidates;
- `ListwiseSoftmax` (listwise.py, `loss=listwise`): softmax cross-entropy over each query's candidates;
- `DistilledLoss` (distilled.py): a loss above plus `weight` times a distillation loss against the teacher's logits
  it holds (matching.training.distillation computes them).

Every loss is an `nn.Module` called as `loss(logits, batch)` on a training batch's logits (N, C) and its `label`,
`group` and `index` tensors. `compares_candidates` says whether it compares the candidates of one query: its batches
then hold whole queries (matching.training.batching.QueryBatchSampler), it needs a ranking task, and its operations
depend on each batch's queries (so its step is not captured as a CUDA graph, matching.training.replay). A loss keeps
no state in checkpoints (its tensors are buffers that are not saved), so a run's checkpoints are those of its model.
"""

from __future__ import annotations

from hydra.utils import get_class
from omegaconf import DictConfig

from matching.errors import ConfigError
from matching.training.losses.distilled import (
    DISTILL_LOSSES,
    Distillation,
    DistilledLoss,
    kl_to_teacher,
    listwise_kl,
    margin_mse,
)
from matching.training.losses.listwise import ListwiseSoftmax, listwise_softmax
from matching.training.losses.pairwise import PairwiseHinge, pairwise_hinge
from matching.training.losses.pointwise import PointwiseCrossEntropy
from matching.training.losses.queries import TrainingLoss

__all__ = [
    "DISTILL_LOSSES",
    "DistilledLoss",
    "Distillation",
    "ListwiseSoftmax",
    "PairwiseHinge",
    "PointwiseCrossEntropy",
    "TrainingLoss",
    "compares_candidates",
    "kl_to_teacher",
    "listwise_kl",
    "listwise_softmax",
    "loss_class",
    "margin_mse",
    "pairwise_hinge",
]


def loss_class(node: DictConfig) -> type[TrainingLoss]:
    """The class the `loss` node builds (before it is built: whether its batches hold whole queries decides how the
    training split is batched, before any loss can be given the split's label counts)."""
    target = get_class(str(node._target_))
    if not (isinstance(target, type) and issubclass(target, TrainingLoss)):
        raise ConfigError(f"loss._target_={node._target_} is not a training loss (matching.training.losses)")
    return target


def compares_candidates(cfg: DictConfig, task_kind: str) -> bool:
    """Whether the run's training loss compares a query's candidates (its `loss`, or its distillation's loss): its
    batches then hold whole queries (matching.training.batching.QueryBatchSampler)."""
    distillation = Distillation.of(cfg, task_kind)
    return loss_class(cfg.loss).compares_candidates or (distillation is not None and distillation.compares_candidates)
