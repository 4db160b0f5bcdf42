"""The training losses of a ranking task over the score of each (query, candidate) pair, the margin of the match
logit (`match_margin`: what evaluate, predict and serve rank by). `pointwise` (the paper's protocol) is the 2-class
cross-entropy of every pair on its own; the two ranking losses compare the candidates of one query, so their batches
hold whole queries (see matching.training.batching.QueryBatchSampler):

- `pairwise`: the margin (hinge) loss max(0, margin − (s⁺ − s⁻)) over every (positive, negative) pair of candidates
  of one query in the batch, averaged over those pairs (a query with many negatives weighs more, as in RankNet-style
  training on candidate lists);
- `listwise`: softmax cross-entropy over all candidates of one query, the target spread evenly over its positives:
  −(1/|P|) Σ_{p∈P} log softmax(s)_p (ListNet's top-one form; with one positive, −log softmax(s)_positive), averaged
  over the queries of the batch.

Only queries with at least one positive and one negative candidate in the batch take part; a batch without any
gives a zero loss (with a gradient of zeros, so that every process still runs the same backward pass).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, ListConfig

from matching.errors import ConfigError

#: The values of `loss.kind`.
LOSS_KINDS = ("pointwise", "pairwise", "listwise")


def check_loss(kind: str, task_kind: str, class_weights: object, margin: object) -> None:
    """ConfigError unless `loss.kind`, `loss.class_weights` and `loss.margin` fit each other and the task's kind
    (classify or rank): checked with the config, before any data is read, and by the training system."""
    if kind not in LOSS_KINDS:
        raise ConfigError(f"loss.kind must be one of {list(LOSS_KINDS)}, got {kind!r}")
    if kind != "pointwise" and task_kind != "rank":
        raise ConfigError(
            f"loss.kind={kind} compares the candidates of one query: it needs a ranking task (task.kind=rank, "
            "e.g. task=wikiqa or task=pairs_rank); a classification task trains with loss.kind=pointwise"
        )
    if kind != "pointwise" and class_weights is not None:
        raise ConfigError(
            f"loss.class_weights weighs the pointwise cross-entropy; loss.kind={kind} has no classes to "
            "weigh: leave loss.class_weights=null"
        )
    check_positive("loss.margin", margin)


def check_positive(key: str, value: object) -> None:
    """ConfigError unless the setting `key` is a positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{key} must be a positive number, got {value!r}")


def _queries(groups: torch.Tensor) -> torch.Tensor:
    """The query ids, a pair without one (-1) its own query."""
    alone = -2 - torch.arange(len(groups), device=groups.device)
    return torch.where(groups >= 0, groups, alone)


def _ranked_queries(targets: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inverse, positives, keep): each pair's query index in the batch, each query's count of positives, and
    whether a query has both a positive and a negative candidate."""
    _, inverse = torch.unique(_queries(groups), return_inverse=True)
    queries = int(inverse.max()) + 1 if len(inverse) else 0
    positives = torch.zeros(queries, device=targets.device).index_add_(0, inverse, targets.float())
    sizes = torch.zeros(queries, device=targets.device).index_add_(0, inverse, torch.ones_like(targets.float()))
    return inverse, positives, (positives > 0) & (positives < sizes)


def pairwise_hinge(scores: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor, margin: float) -> torch.Tensor:
    """mean over (positive, negative) candidate pairs of one query of max(0, margin − (s_pos − s_neg)).
    scores (N,) float; targets (N,) 1 for a match, 0 otherwise; groups (N,) query ids."""
    groups = _queries(groups)
    same = groups[:, None] == groups[None, :]  # (N, N)
    ordered = same & (targets[:, None] == 1) & (targets[None, :] == 0)  # row a positive, column a negative
    if not bool(ordered.any()):
        return scores.sum() * 0.0
    hinge = (margin - (scores[:, None] - scores[None, :])).clamp_min(0)  # (N, N)
    return hinge[ordered].mean()


def listwise_softmax(scores: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """mean over queries of −(1/|P|) Σ_{p∈P} log softmax(s over the query's candidates)_p."""
    inverse, positives, keep = _ranked_queries(targets, groups)
    if not bool(keep.any()):
        return scores.sum() * 0.0
    queries = len(positives)
    top = torch.full((queries,), float("-inf"), device=scores.device, dtype=scores.dtype)
    top = top.scatter_reduce(0, inverse, scores.detach(), reduce="amax")  # per query, for a stable log-sum-exp
    sums = torch.zeros(queries, device=scores.device, dtype=scores.dtype).index_add_(
        0, inverse, (scores - top[inverse]).exp()
    )
    log_softmax = scores - (sums.log() + top)[inverse]  # (N,)
    per_query = -torch.zeros(queries, device=scores.device, dtype=scores.dtype).index_add_(
        0, inverse, targets.to(scores.dtype) * log_softmax
    ) / positives.clamp_min(1)
    return per_query[keep].mean()


# -- distillation from a teacher's logits (matching.training.distillation) -------------------------------------

#: The values of `distill.loss`: kl (classification, and pointwise ranking) | margin_mse | listwise_kl (ranking).
DISTILL_LOSSES = ("kl", "margin_mse", "listwise_kl")


def kl_to_teacher(logits: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hinton et al.'s soft targets: T² · mean over pairs of KL(softmax(teacher/T) ‖ softmax(logits/T)); the T²
    keeps the gradient's size as T changes. logits, teacher (N, C)."""
    t = float(temperature)
    target = F.log_softmax(teacher.float() / t, dim=-1)
    return F.kl_div(F.log_softmax(logits.float() / t, dim=-1), target, log_target=True, reduction="batchmean") * t * t


def margin_mse(
    scores: torch.Tensor, teacher: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor
) -> torch.Tensor:
    """MarginMSE (Hofstätter et al. 2020): mean over (positive, negative) candidate pairs of one query of
    ((s_pos − s_neg) − (t_pos − t_neg))²: the student learns the teacher's margins, not its scale. scores, teacher
    (N,) float (the match margins); targets (N,) 1 for a match; groups (N,) query ids."""
    groups = _queries(groups)
    ordered = (groups[:, None] == groups[None, :]) & (targets[:, None] == 1) & (targets[None, :] == 0)
    if not bool(ordered.any()):
        return scores.sum() * 0.0
    student = scores[:, None] - scores[None, :]
    taught = (teacher[:, None] - teacher[None, :]).to(scores.dtype)
    return (student - taught)[ordered].pow(2).mean()


def listwise_kl(scores: torch.Tensor, teacher: torch.Tensor, groups: torch.Tensor, temperature: float) -> torch.Tensor:
    """T² · mean over queries of KL(softmax(t/T) ‖ softmax(s/T)) over each query's candidates in the batch (a
    query of one candidate adds nothing). scores, teacher (N,) float; groups (N,) query ids."""
    t = float(temperature)
    _, inverse = torch.unique(_queries(groups), return_inverse=True)
    queries = int(inverse.max()) + 1 if len(inverse) else 0
    sizes = torch.zeros(queries, device=scores.device).index_add_(
        0, inverse, torch.ones_like(scores, dtype=torch.float)
    )
    keep = sizes > 1
    if not bool(keep.any()):
        return scores.sum() * 0.0
    student = _query_log_softmax(scores.float() / t, inverse, queries)
    target = _query_log_softmax(teacher.float() / t, inverse, queries)
    per_pair = target.exp() * (target - student)
    per_query = torch.zeros(queries, device=scores.device).index_add_(0, inverse, per_pair)
    return per_query[keep].mean() * t * t


def _query_log_softmax(values: torch.Tensor, inverse: torch.Tensor, queries: int) -> torch.Tensor:
    """log softmax of `values` (N,) within each query (`inverse`: each value's query), stable."""
    top = torch.full((queries,), float("-inf"), device=values.device, dtype=values.dtype)
    top = top.scatter_reduce(0, inverse, values.detach(), reduce="amax")
    sums = torch.zeros(queries, device=values.device, dtype=values.dtype).index_add_(
        0, inverse, (values - top[inverse]).exp()
    )
    return values - (sums.log() + top)[inverse]


def compares_candidates(loss_kind: str, distill: dict[str, Any] | None) -> bool:
    """Whether the training loss compares a query's candidates: the ranking losses (pairwise, listwise) and
    distillation's margin_mse and listwise_kl. Their batches hold whole queries (QueryBatchSampler), and their
    operations depend on each batch's queries."""
    return loss_kind != "pointwise" or (distill is not None and distill["loss"] != "kl")


def distill_settings(cfg: DictConfig, task_kind: str) -> dict[str, Any] | None:
    """The run's distillation (teachers, loss, weight, temperature), or None without a teacher."""
    node = cfg.get("distill") or {}
    teacher = node.get("teacher")
    if not teacher:
        return None
    teachers = [str(t) for t in teacher] if isinstance(teacher, (list, ListConfig)) else [str(teacher)]
    loss = str(node.get("loss") or "auto")
    if loss == "auto":
        loss = "margin_mse" if task_kind == "rank" else "kl"
    return {"teachers": teachers, "loss": loss, "weight": node.get("weight", 1.0),
            "temperature": node.get("temperature", 1.0)}  # fmt: skip


def check_distill(loss: str, task_kind: str, weight: object, temperature: object) -> None:
    """ConfigError unless `distill.loss`, `distill.weight` and `distill.temperature` fit each other and the task."""
    if loss not in DISTILL_LOSSES:
        raise ConfigError(f"distill.loss must be one of {list(DISTILL_LOSSES)} (or auto), got {loss!r}")
    if loss != "kl" and task_kind != "rank":
        raise ConfigError(
            f"distill.loss={loss} compares the candidates of one query: it needs a ranking task; a classification "
            "task distils with distill.loss=kl (or auto)"
        )
    check_positive("distill.weight", weight)
    check_positive("distill.temperature", temperature)
