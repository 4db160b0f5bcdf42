"""The metrics of an evaluation split, computed once over the whole split on torchmetrics: ranking metrics grouped
by question (`RankingMetrics`), and what classification is judged by beside accuracy (`ClassificationMetrics`).

Ranking.

Pointwise ranking (CoDA paper §3.2): every (question, candidate) pair is scored by the 2-class model, and the
candidates of each question are ranked by the logit margin logit[match] − logit[no match] (the order of
P(match), without its float32 saturation at 1.0; see `match_margin`). Scores, labels, question
ids and example indices are accumulated over the whole split (and gathered from all processes), so a question
whose candidates fall into different batches or ranks is still scored as one; duplicates of an example (a
distributed sampler pads the last batch by repeating examples) are counted once.

Protocol:
- `map`, `mrr`, `top1`, `top2`, `top5`: the standard filtered protocol, over questions with at least one
  correct and one incorrect candidate. `topk` is recall@k (Ubuntu's R10@k: the true response among the top k).
- `p1` (precision@1: the top candidate is correct), `mrr10` (reciprocal rank of the first correct candidate, 0
  beyond rank 10: what sentence-transformers' CrossEncoder reranking evaluator reports as MRR@10) and `ndcg10`
  (NDCG@10, binary gains): over the same filtered questions.
- `map_raw`, `mrr_raw`: every question, a question without a correct candidate scoring 0 (trec_eval's view
  of a raw split).
- Ties are broken pessimistically: among equal scores incorrect candidates rank first, then file order, so a
  model that gives every candidate the same score earns no credit from the order of the file.

Classification (`ClassificationMetrics`), from the predicted class (the arg max, as `acc`):
- every task: `precision_<label>`, `recall_<label>`, `f1_<label>` per class and `macro_f1` (their mean over the
  classes that occur among the gold labels or the predictions, as scikit-learn's `average="macro"`). A class
  never predicted has precision 0; a class absent from the gold labels has recall 0.
- two labels: also `precision`, `recall`, `f1` of the positive label (`task.positive_label`, default the second
  label), and `ap` (average precision) and `auroc` (ROC-AUC) of the positive label's probability. They are
  computed from the log-odds logit[positive] − logit[other], which orders the pairs exactly as the probability
  does without its float32 saturation at 1.0 (see `match_margin`); tied scores are handled as scikit-learn does
  (one threshold per distinct score). Without a positive (or without a negative) pair in the split, `ap` (`auroc`)
  is NaN: they are undefined there.
`<label>` is the label's name with any character other than a letter, digit, `.`, `-` or `_` replaced by `_`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.functional.classification import (
    binary_auroc,
    binary_average_precision,
    binary_f1_score,
    binary_precision,
    binary_recall,
    multiclass_f1_score,
    multiclass_precision,
    multiclass_recall,
)
from torchmetrics.retrieval import (
    RetrievalMAP,
    RetrievalMRR,
    RetrievalNormalizedDCG,
    RetrievalPrecision,
    RetrievalRecall,
)

from matching.errors import ConfigError
from matching.training.question_scores import CUTOFF, TOP_K, ranking_order

log = logging.getLogger(__name__)

#: The ranking metrics of the filtered protocol (questions with a correct and an incorrect candidate).
FILTERED_NAMES = ("map", "mrr", *(f"top{k}" for k in TOP_K), "p1", f"mrr{CUTOFF}", f"ndcg{CUTOFF}")
#: What RankingMetrics logs for a split (after the split's prefix).
RANKING_NAMES = (*FILTERED_NAMES, "map_raw", "mrr_raw", "questions", "skipped_no_positive", "skipped_all_positive")
#: What a binary task logs of its positive label, beside the per-class metrics.
BINARY_NAMES = ("f1", "precision", "recall", "ap", "auroc")


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
            out["p1"] = RetrievalPrecision(top_k=1)(kp, kt, indexes=ki)
            out[f"mrr{CUTOFF}"] = RetrievalMRR(top_k=CUTOFF)(kp, kt, indexes=ki)
            out[f"ndcg{CUTOFF}"] = RetrievalNormalizedDCG(top_k=CUTOFF)(kp, kt, indexes=ki)
        else:
            nan = torch.tensor(float("nan"))
            out |= {name: nan for name in FILTERED_NAMES}
        out["questions"] = torch.tensor(float(keep_group.sum()))
        out["skipped_no_positive"] = torch.tensor(float(no_positive.sum()))
        out["skipped_all_positive"] = torch.tensor(float((no_negative & ~no_positive).sum()))
        return {k: v.float() for k, v in out.items()}


class ClassificationMetrics(Metric):
    """Accumulates (logits, label, example index) over a split and computes the classification metrics of the module
    doc: per class and macro-F1 for any number of labels, and for two labels those of the positive one (index
    `positive`)."""

    full_state_update = False
    higher_is_better = True

    def __init__(self, labels: Sequence[str], positive: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.labels = list(labels)
        self.keys = label_keys(self.labels)
        if positive is not None and len(self.labels) != 2:
            raise ValueError(f"a positive label applies to two labels, not {self.labels}")
        self.positive = positive
        for name in ("logits", "targets", "indices"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, logits: Tensor, targets: Tensor, indices: Tensor) -> None:
        """logits (N, C); targets (N,) class indices; indices (N,) example ids (duplicates are counted once)."""
        self.logits.append(logits.detach().float())
        self.targets.append(targets.detach().long().flatten())
        self.indices.append(indices.detach().long().flatten())

    def compute(self) -> dict[str, Tensor]:
        values = once_per_example(self, ("logits", "targets", "indices"))
        if len(values["indices"]) == 0:
            raise ValueError("ClassificationMetrics.compute() called before any update: the evaluation split was empty")
        logits = torch.from_numpy(values["logits"]).reshape(len(values["indices"]), -1)
        target = torch.from_numpy(values["targets"]).long()
        predicted = logits.argmax(-1)
        n = len(self.labels)
        per_class = {
            "precision": multiclass_precision(predicted, target, n, average="none", zero_division=0),
            "recall": multiclass_recall(predicted, target, n, average="none", zero_division=0),
            "f1": multiclass_f1_score(predicted, target, n, average="none", zero_division=0),
        }
        out = {"macro_f1": multiclass_f1_score(predicted, target, n, average="macro", zero_division=0)}
        for name, scores in per_class.items():
            out |= {f"{name}_{key}": scores[i] for i, key in enumerate(self.keys)}
        if self.positive is not None:
            is_positive = (target == self.positive).long()
            said_positive = (predicted == self.positive).long()
            log_odds = logits[:, self.positive] - logits[:, 1 - self.positive]  # orders pairs as P(positive) does
            out["f1"] = binary_f1_score(said_positive, is_positive, zero_division=0)
            out["precision"] = binary_precision(said_positive, is_positive, zero_division=0)
            out["recall"] = binary_recall(said_positive, is_positive, zero_division=0)
            positives = int(is_positive.sum())
            nan = torch.tensor(float("nan"))
            out["ap"] = binary_average_precision(log_odds, is_positive, thresholds=None) if positives else nan
            both = 0 < positives < len(is_positive)
            out["auroc"] = binary_auroc(log_odds, is_positive, thresholds=None) if both else nan
        return {k: v.float() for k, v in out.items()}


@dataclass(frozen=True)
class TaskMetrics:
    """What a training system evaluates, and so which metrics it keeps: the task (its name, `labels`, `kind` classify
    or rank, `positive_label`) and the prefix of each evaluation split (`val_prefixes`, one per validation dataloader,
    e.g. ["val", "val_mismatched"]; `test_prefixes`). Checked when made: a ranking task is pointwise over two labels
    (no match, match), and the positive label is one of the labels."""

    labels: tuple[str, ...]
    kind: str = "classify"
    val_prefixes: tuple[str, ...] = ("val",)
    test_prefixes: tuple[str, ...] = ("test",)
    task: str | None = None
    positive_label: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("classify", "rank"):
            raise ConfigError(f"task kind must be 'classify' or 'rank', got {self.kind!r}")
        if self.kind == "rank" and len(self.labels) != 2:
            raise ConfigError(f"ranking is pointwise with two labels (no-match, match), got {list(self.labels)}")
        positive_index(self.labels, self.positive_label, self.kind)

    @property
    def positive(self) -> int | None:
        """The index of the label whose binary metrics are reported (see `positive_index`)."""
        return positive_index(self.labels, self.positive_label, self.kind)

    @property
    def prefixes(self) -> list[str]:
        return [*self.val_prefixes, *self.test_prefixes]


def label_keys(labels: Sequence[str]) -> list[str]:
    """Each label as its metrics name it (`f1_<key>`): the label with any character other than a letter, digit, `.`,
    `-` or `_` replaced by `_`; two labels that would share a key are a ConfigError."""
    keys = [re.sub(r"[^\w.-]", "_", str(label)) for label in labels]
    if len(set(keys)) < len(keys):
        raise ConfigError(
            f"the labels {list(labels)} name their metrics {keys}, two of them alike; rename a label (task.labels, or "
            "the values in your data) so that they differ in a letter or digit"
        )
    return keys


def positive_index(labels: Sequence[str], positive_label: str | None, kind: str = "classify") -> int | None:
    """The index of the label whose F1, precision, recall, AP and ROC-AUC a two-label task reports: `positive_label`
    (`task.positive_label`) or, when it is None, the second label; None for more than two labels. A ranking task's
    positive label is its match label, the second."""
    labels = [str(label) for label in labels]
    if positive_label is None:
        return 1 if len(labels) == 2 else None
    if str(positive_label) not in labels:
        raise ConfigError(
            f"task.positive_label={positive_label!r} is not one of the task's labels {labels}; name one of them"
        )
    if len(labels) != 2:
        raise ConfigError(
            f"task.positive_label={positive_label!r}: a positive label applies to a task with two labels, and this "
            f"one has {len(labels)} ({labels}); its per-class metrics (f1_<label>, ...) cover every label. Remove "
            "task.positive_label"
        )
    index = labels.index(str(positive_label))
    if kind == "rank" and index != 1:
        raise ConfigError(
            f"task.positive_label={positive_label!r}: a ranking task's positive label is its match label, the "
            f"second of {labels}; set task.labels=[<no match>,<match>] instead"
        )
    return index


def metric_names(kind: str, labels: Sequence[str]) -> list[str]:
    """Every name an evaluation split logs (after its prefix) for a task of this kind and these labels."""
    names = ["loss", "acc"]
    if kind == "rank":
        return names + list(RANKING_NAMES)
    if len(labels) == 2:
        names += BINARY_NAMES
    keys = label_keys(labels)
    return names + ["macro_f1"] + [f"{name}_{key}" for name in ("precision", "recall", "f1") for key in keys]


def check_monitor(
    monitor: str, kind: str, labels: Sequence[str], prefixes: Sequence[str] = ("val",), key: str = "task.monitor"
) -> None:
    """A ConfigError (naming the config `key` that set it) unless `monitor` is a metric a run logs at every
    validation: one of `metric_names` under a dev split's prefix (`prefixes`), or the training loss or accuracy."""
    logged = [f"{prefix}/{name}" for prefix in prefixes for name in metric_names(kind, labels)]
    if monitor in logged or monitor in ("train/loss", "train/acc"):
        return
    raise ConfigError(
        f"{key}={monitor!r} is not a metric this run logs at each validation; choose one of "
        f"{', '.join(logged)}, train/loss or train/acc (with task.monitor_mode=min for a loss). Test metrics are never "
        "monitored: model selection uses the dev split only"
    )


class EvaluationRecord(Metric):
    """Every evaluated pair's example index, label, group, predicted class and score (the ranking margin, or the
    probability of the predicted class), gathered from all processes with duplicates dropped: what an evaluation
    writes to the run directory (`matching.training.scores`) for paired significance tests and for reading the
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


def questions_line(prefix: str, values: dict[str, Tensor]) -> str:
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
