"""Distillation: a student trained on its labels and on a teacher's scores (`distill.teacher=<trained model>`).

The teacher is any model `Matcher.load` takes (a run directory, checkpoint, shared folder, hub id, exported ONNX
folder), or a list of them, an ensemble (the mean of their logits: e.g. the seeds of one configuration). Its logits
are computed once over the student's training pairs as the student reads them (mined negatives included), each
teacher through its own text pipeline, and kept:

- in `paths.cache_dir/teacher/<key>.npy`, keyed by every teacher's weights (sha256) and the training split (file,
  slice, negatives), so that the other seeds of a study reuse them; a changed teacher or split is a new key;
- in the run, `teacher/logits.npy` with `teacher/teacher.json` (the key, each teacher, the pairs, the seconds it
  took), so that the run says what it learnt from.

The run's loss then holds them: matching.training.losses.distilled.DistilledLoss, the loss on the labels plus
`distill.weight` times a loss against the teacher's logits (`distill.loss`: kl, margin_mse or listwise_kl; auto: kl
for classification, margin_mse for ranking), built by matching.training.build.build_loss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from matching.errors import ConfigError
from matching.files import file_sha256, write_json

log = logging.getLogger(__name__)


def teacher_logits(cfg: DictConfig, dm, run_dir: Path, teachers: list[str]) -> np.ndarray:
    """(training pairs, classes) float32: the mean of the teachers' logits over the student's training pairs, from
    the cache when there (see the module docstring), written into the run either way."""
    from matching.inference import load

    pairs = dm.read_pairs("train")
    if len(pairs) != len(dm.splits["train"]):
        raise RuntimeError(f"the training split holds {len(dm.splits['train'])} pairs, its pairs read again "
                           f"{len(pairs)}: a bug in matching")  # fmt: skip
    predictors = [load(t, backend="torch") for t in teachers]
    for path, predictor in zip(teachers, predictors, strict=True):
        if predictor.labels != dm.labels:
            raise ConfigError(
                f"distill.teacher={path} predicts the labels {predictor.labels}, the student's task has {dm.labels}: "
                "a teacher must be trained on the same labels, in the same order (the same task)"
            )
    identities = [{"teacher": path, "sha256": _weights_sha256(p)} for path, p in zip(teachers, predictors, strict=True)]
    key = {"teachers": sorted(i["sha256"] for i in identities), "split": dm.split_key("train"), "pairs": len(pairs)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]
    cached = Path(cfg.paths.cache_dir) / "teacher" / f"{digest}.npy"
    started = time.perf_counter()
    if cached.is_file():
        logits = np.load(cached)
        how = f"reused from {cached}"
    else:
        logits = np.mean([p.logits(pairs, "the training split") for p in predictors], axis=0).astype(np.float32)
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp.npy")  # two runs computing at once: one wins, whole
        np.save(tmp, logits)
        tmp.replace(cached)
        how = f"computed over {len(pairs):,} pairs in {time.perf_counter() - started:.1f} s"
    folder = run_dir / "teacher"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "logits.npy", logits)
    write_json(folder / "teacher.json", {"teachers": identities, "key": key, "cache": str(cached), "how": how})
    log.info("teacher scores (%s): %s", ", ".join(teachers), how)
    return logits


def _weights_sha256(predictor) -> str:
    about = predictor.about
    weights = about.get("weights") or about.get("graph")
    if weights is None:
        raise RuntimeError(f"the teacher {predictor.origin} names no weights file: a bug in matching")
    return file_sha256(Path(weights))
