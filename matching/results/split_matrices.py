"""What a trained model's alignment matrices hold over a split: every cross-alignment matrix's values over the real
(non-padding) cells, and for the matrices of weights, which tokens receive nothing at all (as the CoDA paper's
Figure 2 shows the values; `matching-visualize mode=histogram` draws them, a study's page tabulates them).

A matrix of weights is one a side is aligned by: `<kind>_a` (row i weighs the second text for the first text's token
i), `<kind>_b` (column j weighs the first text for the second text's token j) and CoDA's `M` (both ways: its rows and
its columns). A token receives nothing when every one of its weights over the other text's real tokens is exactly
0 (softpick can; a softmax never does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from matching.errors import RunError

if TYPE_CHECKING:
    from matching.model.assembly import TrainedModel


@dataclass
class SplitMatrices:
    """`values`: each matrix's values over the real cells; `empty_lines`: for each matrix of weights, one flag per
    real token it weighs the other text for (rows, then columns for `M`), whether all its weights are 0."""

    values: dict[str, np.ndarray]
    empty_lines: dict[str, np.ndarray]

    def summary(self) -> dict[str, dict[str, float]]:
        """Per matrix: cells, min, max, mean, 1st/50th/99th percentiles, the share of negative cells, and for a matrix
        of weights the share of tokens that receive nothing (`attends_to_nothing`)."""
        summary = {}
        for name, v in self.values.items():
            low, median, high = np.percentile(v, [1, 50, 99]) if len(v) else (np.nan,) * 3
            summary[name] = {
                "cells": int(len(v)), "min": float(v.min()), "max": float(v.max()), "mean": float(v.mean()),
                "p01": float(low), "median": float(median), "p99": float(high), "negative": float((v < 0).mean()),
            }  # fmt: skip
            if name in self.empty_lines and len(self.empty_lines[name]):
                summary[name]["attends_to_nothing"] = float(self.empty_lines[name].mean())
        return summary


def weighed_lines(name: str) -> tuple[int, ...]:
    """The axes of a matrix (B, La, Lb) along which a token's weights lie: 2 for a row (the first text's token
    weighs the second text), 1 for a column; () for a matrix that is not of weights (E, a gate)."""
    if name == "M":
        return (2, 1)
    if name.endswith("_a"):
        return (2,)
    if name.endswith("_b"):
        return (1,)
    return ()


def receive_nothing(m, mask_a, mask_b, axis: int) -> np.ndarray:
    """For each real token whose weights lie along `axis` of `m` (B, La, Lb) (2: the first text's tokens, each a row;
    1: the second's, each a column), whether all its weights over the other text's real tokens are exactly 0."""
    valid = mask_a.unsqueeze(2) & mask_b.unsqueeze(1)
    nothing = ((m != 0) & valid).sum(axis) == 0  # (B, La) for rows, (B, Lb) for columns
    return nothing[mask_a if axis == 2 else mask_b].numpy()


def split_matrices(run: TrainedModel, split: str = "dev", max_pairs: int = 2000) -> SplitMatrices:
    """Every cross-alignment matrix over the real cells of (up to `max_pairs` of) a split, read through the run's data
    module and computed by the forward pass of training and inference (run_batch)."""
    import torch

    from matching.model.decomposable import run_batch
    from matching.model.precision import resolve
    from matching.training.build import evaluation_data

    if split not in run.task.named_splits:
        raise RunError(f"unknown split {split!r}; choose one of {run.task.named_splits}")
    data = evaluation_data(run)
    data.prepare_splits([split])
    compute = resolve(str(run.cfg.get("dtype", "fp32")), torch.device("cpu"))
    values: dict[str, list[np.ndarray]] = {}
    empty: dict[str, list[np.ndarray]] = {}
    seen = 0
    for batch in data.loader(split):
        with torch.inference_mode():
            out = run_batch(run.model, batch, compute)
        valid = out.mask_a.unsqueeze(2) & out.mask_b.unsqueeze(1)  # (B, La, Lb) real cells
        for name, m in out.matrices.items():
            if name.startswith("intra_"):
                continue
            values.setdefault(name, []).append(m[valid].float().numpy())
            for axis in weighed_lines(name):
                empty.setdefault(name, []).append(receive_nothing(m, out.mask_a, out.mask_b, axis))
        seen += len(batch["label"])
        if seen >= max_pairs:
            break
    return SplitMatrices({k: np.concatenate(v) for k, v in values.items()},
                         {k: np.concatenate(v) for k, v in empty.items()})  # fmt: skip
