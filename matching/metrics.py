"""Ranking metrics grouped by question over a whole split, on torchmetrics' retrieval metrics.

Pointwise ranking (CoDA paper §3.2): every (question, candidate) pair is scored by the 2-class model, and the
candidates of each question are ranked by the logit margin logit[match] − logit[no match] (the order of
P(match), without its float32 saturation at 1.0; see `match_margin`). Scores, labels, question
ids and example indices are accumulated over the whole split (and gathered from all processes), so a question
whose candidates fall into different batches or ranks is still scored as one; duplicates of an example (a
distributed sampler pads the last batch by repeating examples) are counted once.

Protocol:
- `map`, `mrr`, `top1`, `top2`, `top5`: the standard filtered protocol, over questions with at least one
  correct and one incorrect candidate. `topk` is recall@k (Ubuntu's R10@k: the true response among the top k).
- `map_raw`, `mrr_raw`: every question, a question without a correct candidate scoring 0 (trec_eval's view
  of a raw split).
- Ties are broken pessimistically: among equal scores incorrect candidates rank first, then file order, so a
  model that gives every candidate the same score earns no credit from the order of the file.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.retrieval import RetrievalMAP, RetrievalMRR, RetrievalRecall

log = logging.getLogger(__name__)

TOP_K = (1, 2, 5)


class RankingMetrics(Metric):
    """Accumulates (score, label, question id, example index) and computes the metrics of the module doc."""

    full_state_update = False
    higher_is_better = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name in ("scores", "targets", "groups", "indices"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, targets: Tensor, groups: Tensor, indices: Tensor) -> None:
        """scores (N,) higher for a likelier match; targets (N,) 0/1; groups (N,) question ids; indices (N,) ids."""
        self.scores.append(scores.detach().float().flatten())
        self.targets.append(targets.detach().long().flatten())
        self.groups.append(groups.detach().long().flatten())
        self.indices.append(indices.detach().long().flatten())

    def _gathered(self) -> tuple[np.ndarray, ...]:
        values = once_per_example(self, ("scores", "targets", "groups", "indices"))
        scores, targets, groups, indices = (values[k] for k in ("scores", "targets", "groups", "indices"))
        return scores, targets.astype(np.int64), groups.astype(np.int64), indices

    def compute(self) -> dict[str, Tensor]:
        scores, targets, groups, indices = self._gathered()
        if len(scores) == 0:
            raise ValueError("RankingMetrics.compute() called before any update: the evaluation split was empty")
        # Unique rank scores encode the tie-breaking rule: score desc, then incorrect first, then file order.
        order = ranking_order(scores, targets, indices)
        rank_score = np.empty(len(scores))
        rank_score[order] = np.arange(len(scores), 0, -1, dtype=np.float64)  # positive: torchmetrics needs > 0

        group_ids, inverse = np.unique(groups, return_inverse=True)
        positives = np.bincount(inverse, weights=targets, minlength=len(group_ids))
        sizes = np.bincount(inverse, minlength=len(group_ids))
        no_positive, no_negative = positives == 0, positives == sizes
        keep_group = ~(no_positive | no_negative)
        keep = keep_group[inverse]

        preds_t = torch.from_numpy(rank_score)
        target_t = torch.from_numpy(targets).bool()
        index_t = torch.from_numpy(inverse.astype(np.int64))
        out: dict[str, Tensor] = {
            "map_raw": RetrievalMAP(empty_target_action="neg")(preds_t, target_t, indexes=index_t),
            "mrr_raw": RetrievalMRR(empty_target_action="neg")(preds_t, target_t, indexes=index_t),
        }
        if keep.any():
            kp, kt, ki = preds_t[keep], target_t[keep], index_t[keep]
            out["map"] = RetrievalMAP()(kp, kt, indexes=ki)
            out["mrr"] = RetrievalMRR()(kp, kt, indexes=ki)
            for k in TOP_K:
                out[f"top{k}"] = RetrievalRecall(top_k=k)(kp, kt, indexes=ki)
        else:
            nan = torch.tensor(float("nan"))
            out |= {"map": nan, "mrr": nan} | {f"top{k}": nan for k in TOP_K}
        out["questions"] = torch.tensor(float(keep_group.sum()))
        out["skipped_no_positive"] = torch.tensor(float(no_positive.sum()))
        out["skipped_all_positive"] = torch.tensor(float((no_negative & ~no_positive).sum()))
        return {k: v.float() for k, v in out.items()}


class EvaluationRecord(Metric):
    """Every evaluated pair's example index, label, group, predicted class and score (the ranking margin, or the
    probability of the predicted class), gathered from all processes with duplicates dropped: what an evaluation
    writes to the run directory (`matching.results.scores`) for paired significance tests and for reading the
    answers."""

    full_state_update = False
    FIELDS = ("indices", "targets", "groups", "predicted", "scores")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name in self.FIELDS:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, indices: Tensor, targets: Tensor, groups: Tensor, predicted: Tensor, scores: Tensor) -> None:
        for name, value in zip(self.FIELDS, (indices, targets, groups, predicted, scores), strict=True):
            getattr(self, name).append(value.detach().flatten().float() if name == "scores" else value.detach().long())

    def compute(self) -> dict[str, np.ndarray]:
        return once_per_example(self, self.FIELDS)


def once_per_example(metric: Metric, fields: Sequence[str]) -> dict[str, np.ndarray]:
    """A metric's list states (`fields`, one of them `indices`) as arrays sorted by example index, each example once
    (a distributed sampler repeats examples to pad the last batch)."""

    def cat(state) -> np.ndarray:
        if isinstance(state, Tensor):  # after a distributed sync the list is already one tensor
            return state.cpu().numpy()
        return torch.cat(state).cpu().numpy() if state else np.zeros(0)

    values = {name: cat(getattr(metric, name)) for name in fields}
    _, first = np.unique(values["indices"], return_index=True)
    return {name: value[first] for name, value in values.items()}


def ranking_order(scores: np.ndarray, targets: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The candidates' order, best first, with the module doc's tie rule: score desc, incorrect first, file order."""
    return np.lexsort((indices, targets, -scores))


def question_order(scores: np.ndarray, targets: np.ndarray, groups: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The candidates by question (ascending id), each question's as ranked (`ranking_order`)."""
    ranked = ranking_order(scores, targets, indices)
    return ranked[np.argsort(groups[ranked], kind="stable")]


def question_scores(scores: np.ndarray, targets: np.ndarray, groups: np.ndarray, indices: np.ndarray) -> dict:
    """Each question's own scores, whose means over questions are the split's metrics: `question` (the group id),
    `candidates`, `positives`, `ap` and `rr` (0 for a question without a correct candidate, as in `map_raw`), and
    `top1`, `top2`, `top5` (recall@k). The filtered protocol (`map`, `mrr`, `topk`) averages the questions with
    0 < positives < candidates; `map_raw` and `mrr_raw` average them all. Ties as in `RankingMetrics`."""
    order = question_order(scores, targets, groups, indices)
    question_ids, inverse = np.unique(groups[order], return_inverse=True)
    relevant = targets[order].astype(np.float64)
    sizes = np.bincount(inverse, minlength=len(question_ids))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.arange(len(inverse)) - starts[inverse] + 1  # 1-based position within its question
    positives = np.bincount(inverse, weights=relevant, minlength=len(question_ids))
    hits_so_far = np.cumsum(relevant) - np.repeat(np.cumsum(positives) - positives, sizes)
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.bincount(inverse, weights=relevant * hits_so_far / rank, minlength=len(question_ids)) / positives
        first_hit = np.full(len(question_ids), np.inf)
        np.minimum.at(first_hit, inverse[relevant > 0], rank[relevant > 0])
        out = {
            "question": question_ids,
            "candidates": sizes,
            "positives": positives.astype(np.int64),
            "ap": np.nan_to_num(ap, nan=0.0),
            "rr": 1.0 / first_hit,
        }
        for k in TOP_K:
            found = np.bincount(inverse, weights=relevant * (rank <= k), minlength=len(question_ids))
            out[f"top{k}"] = np.nan_to_num(found / positives, nan=0.0)
    return out


def describe(prefix: str, values: dict[str, Tensor]) -> str:
    """One line saying how many questions were scored and skipped, and why."""
    scored, none, only = (int(values[k]) for k in ("questions", "skipped_no_positive", "skipped_all_positive"))
    return (
        f"{prefix}: scored {scored} questions (MAP {values['map']:.4f}, MRR {values['mrr']:.4f}, "
        f"top-1 {values['top1']:.4f}); skipped {none} with no correct candidate and {only} with only correct ones"
    )


def match_margin(logits: torch.Tensor) -> torch.Tensor:
    """Ranking score of a 2-class (no match, match) model: logit[match] − logit[no match], in float32.

    It orders candidates exactly as P(match) = sigmoid(margin) does, but never saturates: P(match) in float32
    rounds to 1.0 once the margin passes ≈ 17, and such ties would then be broken against the model.
    """
    logits = logits.float()
    return logits[:, 1] - logits[:, 0]
