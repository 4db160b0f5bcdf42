"""Each question's own ranking scores (AP, RR, recall@k, P@1, RR@10, NDCG@10), in NumPy: what `RankingMetrics`
(matching.training.metrics, whose doc gives the protocol and its tie rule) averages over a split's questions, what a
run's per-question files hold (matching.training.scores) and what studies compare; and the MAP a random order of
the same candidates gets. No torch: reports and study pages read scores without loading a model.
"""

from __future__ import annotations

import numpy as np

#: The recall@k cut-offs (`top1`, `top2`, `top5`).
TOP_K = (1, 2, 5)
#: The ranking metrics' cut-off for `mrr10` and `ndcg10`.
CUTOFF = 10


def ranking_order(scores: np.ndarray, targets: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The candidates' order, best first, with the module doc's tie rule: score desc, incorrect first, file order."""
    return np.lexsort((indices, targets, -scores))


def question_order(scores: np.ndarray, targets: np.ndarray, groups: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The candidates by question (ascending id), each question's as ranked (`ranking_order`)."""
    ranked = ranking_order(scores, targets, indices)
    return ranked[np.argsort(groups[ranked], kind="stable")]


def question_scores(scores: np.ndarray, targets: np.ndarray, groups: np.ndarray, indices: np.ndarray) -> dict:
    """Each question's own scores, whose means over questions are the split's metrics: `question` (the group id),
    `candidates`, `positives`, `ap` and `rr` (0 for a question without a correct candidate, as in `map_raw`),
    `top1`, `top2`, `top5` (recall@k), `p1` (precision@1), `rr10` (`rr`, 0 beyond rank 10) and `ndcg10`. The
    filtered protocol (`map`, `mrr`, `topk`, `p1`, `mrr10`, `ndcg10`) averages the questions with
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
        out["p1"] = np.bincount(inverse, weights=relevant * (rank == 1), minlength=len(question_ids))
        out[f"rr{CUTOFF}"] = np.where(first_hit <= CUTOFF, out["rr"], 0.0)
        gain = 1.0 / np.log2(np.arange(CUTOFF) + 2)  # the discount of ranks 1..CUTOFF
        dcg = np.bincount(inverse, weights=relevant * (rank <= CUTOFF) / np.log2(rank + 1), minlength=len(sizes))
        ideal = np.concatenate([[0.0], np.cumsum(gain)])[np.minimum(positives, CUTOFF).astype(np.int64)]
        out[f"ndcg{CUTOFF}"] = np.nan_to_num(dcg / ideal, nan=0.0)
    return out


def filtered_map(scores: np.ndarray, targets: np.ndarray, groups: np.ndarray, indices: np.ndarray) -> float:
    """MAP under the filtered protocol (questions with 0 < positives < candidates); nan when none is left."""
    each = question_scores(scores, targets, groups, indices)
    kept = (each["positives"] > 0) & (each["positives"] < each["candidates"])
    return float(each["ap"][kept].mean()) if kept.any() else float("nan")


def chance_map(targets: np.ndarray, groups: np.ndarray, shuffles: int = 200, seed: int = 0) -> tuple[float, float]:
    """The MAP that a random order of each question's candidates gets on these labels: the 2.5th and 97.5th
    percentiles over `shuffles` random orders (seeded). A model whose MAP falls inside ranks no better than chance."""
    rng = np.random.default_rng(seed)
    indices = np.arange(len(targets))
    maps = [filtered_map(rng.random(len(targets)), targets, groups, indices) for _ in range(shuffles)]
    low, high = np.nanpercentile(maps, [2.5, 97.5])
    return float(low), float(high)


def chance_warning(name: str, value: float, targets: np.ndarray, groups: np.ndarray) -> str | None:
    """A warning when a ranking model's MAP on a split is within what a random order of its candidates gets, with
    that range and what to do; None when it ranks better than chance."""
    low, high = chance_map(targets, groups)
    if not np.isfinite(value) or value > high + 1e-6:  # (a logged MAP is float32)
        return None
    return (
        f"{name}: MAP {value:.4f} is within what a random order of the same candidates gets ({low:.4f}-{high:.4f} in "
        "95 % of 200 shuffles): this model ranks no better than chance, and its scores mean little. Train longer (a "
        "model from positives alone needs more epochs than 3), check the labels (task.labels, the match label "
        "second), or compare with a run that ranks: docs/how-to/ranking.md"
    )


def chance_warnings(name: str, recorded: dict[str, dict[str, np.ndarray]], metrics: dict[str, float]) -> list[str]:
    """`chance_warning` of each ranking split a MatchingSystem recorded (`recorded`, by logged prefix), against its
    logged `<prefix>/map` in `metrics`."""
    warnings = []
    for prefix, record in recorded.items():
        if f"{prefix}/map" in metrics and "groups" in record:
            said = chance_warning(f"{name} {prefix}", metrics[f"{prefix}/map"], record["targets"], record["groups"])
            warnings += [said] if said else []
    return warnings
