"""Distillation's loss (`distill.teacher=<trained model>`, matching.training.distillation): the student's loss on its
labels plus `distill.weight` times a loss against the teacher's logits of the same pairs. `kl` (classification; or a
ranking task's pairs one by one): the teacher's probabilities at `distill.temperature`; for ranking, `margin_mse`
(MarginMSE, Hofstätter et al. 2020: the teacher's margin between a query's positive and negative candidates) or
`listwise_kl` (the teacher's distribution over a query's candidates). `auto`: kl for classification, margin_mse for
ranking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, ListConfig

from matching.errors import ConfigError
from matching.training.losses.queries import (
    TrainingLoss,
    check_positive,
    positive_negative_pairs,
    queries,
    query_log_softmax,
)
from matching.training.metrics import match_margin

#: The values of `distill.loss`: kl (classification, and pointwise ranking) | margin_mse | listwise_kl (ranking).
DISTILL_LOSSES = ("kl", "margin_mse", "listwise_kl")


@dataclass(frozen=True)
class Distillation:
    """A run's distillation as its `distill` node sets it, checked once when made: the teachers (run folders,
    checkpoints, shared or ONNX folders, hub ids; several: their mean), the loss (`auto` resolved by the task's kind),
    its weight beside the labels' loss and its temperature."""

    teachers: tuple[str, ...]
    loss: str = "kl"
    weight: float = 1.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.loss not in DISTILL_LOSSES:
            raise ConfigError(f"distill.loss must be one of {list(DISTILL_LOSSES)} (or auto), got {self.loss!r}")
        check_positive("distill.weight", self.weight)
        check_positive("distill.temperature", self.temperature)

    @property
    def compares_candidates(self) -> bool:
        """Whether the loss against the teacher compares a query's candidates (margin_mse, listwise_kl)."""
        return self.loss != "kl"

    @classmethod
    def of(cls, cfg: DictConfig, task_kind: str) -> Distillation | None:
        """The run's distillation from its `distill` node, or None without a teacher."""
        node = cfg.get("distill") or {}
        teacher = node.get("teacher")
        if not teacher:
            return None
        teachers = tuple(str(t) for t in teacher) if isinstance(teacher, (list, ListConfig)) else (str(teacher),)
        loss = str(node.get("loss") or "auto")
        if loss == "auto":
            loss = "margin_mse" if task_kind == "rank" else "kl"
        return cls(teachers, loss, node.get("weight", 1.0), node.get("temperature", 1.0))


class DistilledLoss(TrainingLoss):
    """`labels_loss` plus `distillation.weight` times the loss against `teacher_logits` (training pairs, classes):
    the teacher's logits of every training pair, indexed by each batch's `index`. They are a buffer that is not saved:
    they move to the training device with the system, once, and checkpoints hold the model's weights alone."""

    def __init__(self, labels_loss: TrainingLoss, teacher_logits: torch.Tensor, distillation: Distillation):
        super().__init__()
        self.labels_loss, self.distillation = labels_loss, distillation
        self.compares_candidates = labels_loss.compares_candidates or distillation.compares_candidates
        self.register_buffer("teacher_logits", teacher_logits, persistent=False)

    def forward(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        loss = self.labels_loss(logits, batch)
        teacher = self.teacher_logits[batch["index"]]
        return loss + float(self.distillation.weight) * self.against_teacher(logits, teacher, batch)

    def against_teacher(self, logits: torch.Tensor, teacher: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        kind, temperature = self.distillation.loss, float(self.distillation.temperature)
        if kind == "kl":
            return kl_to_teacher(logits, teacher, temperature)
        scores, taught = match_margin(logits), match_margin(teacher)
        if kind == "margin_mse":
            return margin_mse(scores, taught, batch["label"], batch["group"])
        return listwise_kl(scores, taught, batch["group"], temperature)


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
    ordered = positive_negative_pairs(targets, groups)
    if not bool(ordered.any()):
        return scores.sum() * 0.0
    student = scores[:, None] - scores[None, :]
    taught = (teacher[:, None] - teacher[None, :]).to(scores.dtype)
    return (student - taught)[ordered].pow(2).mean()


def listwise_kl(scores: torch.Tensor, teacher: torch.Tensor, groups: torch.Tensor, temperature: float) -> torch.Tensor:
    """T² · mean over queries of KL(softmax(t/T) ‖ softmax(s/T)) over each query's candidates in the batch (a
    query of one candidate adds nothing). scores, teacher (N,) float; groups (N,) query ids."""
    t = float(temperature)
    _, inverse = torch.unique(queries(groups), return_inverse=True)
    count = int(inverse.max()) + 1 if len(inverse) else 0
    sizes = torch.zeros(count, device=scores.device).index_add_(0, inverse, torch.ones_like(scores, dtype=torch.float))
    keep = sizes > 1
    if not bool(keep.any()):
        return scores.sum() * 0.0
    student = query_log_softmax(scores.float() / t, inverse, count)
    target = query_log_softmax(teacher.float() / t, inverse, count)
    per_pair = target.exp() * (target - student)
    per_query = torch.zeros(count, device=scores.device).index_add_(0, inverse, per_pair)
    return per_query[keep].mean() * t * t
