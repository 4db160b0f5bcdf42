"""`python -m matching.train [overrides]`: train one model; every run directory is self-contained.

A run directory holds `config.yaml` (resolved), `vocab.txt`, `checkpoints/{best,last}.ckpt`,
`metrics.json` (dev metrics of the best checkpoint, optional test metrics, timing) and the CSV log.
"""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
import numpy as np
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from matching.runs import build_datamodule, build_embedding_matrix, build_model, build_system, write_json

log = logging.getLogger(__name__)


class EpochTimer(pl.Callback):
    """Wall-clock seconds of each training epoch (excluding validation)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.seconds.append(time.perf_counter() - self._start)


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def train(cfg: DictConfig) -> dict[str, float]:
    """Train as configured; returns the dev (and optionally test) metrics of the best checkpoint."""
    pl.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.paths.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    dm = build_datamodule(cfg)
    dm.setup("fit")
    dm.vocab.save(run_dir / "vocab.txt")
    model = build_model(cfg, build_embedding_matrix(cfg, dm.vocab), num_classes=len(dm.labels))
    system = build_system(cfg, model, dm)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("model: %s aligner, %s trainable parameters", type(model.aligner).__name__, f"{trainable:,}")

    checkpoint = ModelCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="best",
        monitor=cfg.checkpoint.monitor,
        mode=cfg.checkpoint.mode,
        save_last=True,
        auto_insert_metric_name=False,
    )
    timer = EpochTimer()
    callbacks: list[pl.Callback] = [checkpoint, timer]
    if cfg.early_stopping.patience is not None:
        callbacks.append(
            EarlyStopping(
                monitor=cfg.checkpoint.monitor, mode=cfg.checkpoint.mode, patience=cfg.early_stopping.patience
            )
        )
    logger = instantiate(cfg.logger) if cfg.get("logger") else False
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=logger, default_root_dir=run_dir)
    started = time.perf_counter()
    trainer.fit(system, datamodule=dm)
    metrics: dict[str, float] = {
        "train_seconds": time.perf_counter() - started,
        "epochs": trainer.current_epoch,
    }
    if timer.seconds:
        metrics["seconds_per_epoch_median"] = statistics.median(timer.seconds)
    if trainer.fast_dev_run or not checkpoint.best_model_path:
        metrics |= _floats(trainer.callback_metrics)
    else:
        metrics["best_epoch"] = int(
            torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=False)["epoch"]
        )
        for result in trainer.validate(system, datamodule=dm, ckpt_path="best", verbose=False):
            metrics |= _floats(result)
        if cfg.test and dm.test_splits:
            for result in trainer.test(system, datamodule=dm, ckpt_path="best", verbose=False):
                metrics |= _floats(result)
    write_json(run_dir / "metrics.json", metrics)
    shown = {k: round(v, 4) for k, v in metrics.items() if "/" in k}
    log.info("run dir %s; best checkpoint metrics %s", run_dir, shown)
    return metrics


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    metrics = train(cfg)
    value = metrics.get(cfg.checkpoint.monitor)
    return None if value is None or np.isnan(value) else float(value)  # the objective for sweepers


if __name__ == "__main__":
    main()
