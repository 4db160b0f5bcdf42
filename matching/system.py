"""MatchingSystem: the training system around a matching model (loss, metrics, optimiser), apart from the model."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class MatchingSystem(pl.LightningModule):
    """Cross-entropy training of `model` (called as model(a_ids, b_ids) -> (logits, matrices)).

    Logged keys are `{prefix}/{loss,acc}` where the prefix of each evaluation split is given by
    `val_prefixes` (one per validation dataloader, e.g. ["val", "val_mismatched"]) and `test_prefixes`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerFactory,
        labels: Sequence[str],
        val_prefixes: Sequence[str] = ("val",),
        test_prefixes: Sequence[str] = ("test",),
    ):
        super().__init__()
        self.model = model
        self.optimizer_factory = optimizer
        self.labels = list(labels)
        self.val_prefixes, self.test_prefixes = list(val_prefixes), list(test_prefixes)
        n = len(self.labels)
        self.train_acc = MulticlassAccuracy(n, average="micro")
        self.eval_acc = nn.ModuleDict(
            {p: MulticlassAccuracy(n, average="micro") for p in self.val_prefixes + self.test_prefixes}
        )

    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return self.model(a, b)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        logits = self.model(batch["a"], batch["b"]).logits
        loss = F.cross_entropy(logits, batch["label"])
        size = len(batch["label"])
        self.train_acc(logits, batch["label"])
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, batch_size=size)
        return loss

    def _eval_step(self, batch: dict[str, Any], prefix: str) -> None:
        logits = self.model(batch["a"], batch["b"]).logits
        loss = F.cross_entropy(logits, batch["label"])
        size = len(batch["label"])
        metric = self.eval_acc[prefix]
        metric(logits, batch["label"])
        self.log(f"{prefix}/loss", loss, batch_size=size, add_dataloader_idx=False)
        self.log(f"{prefix}/acc", metric, prog_bar=prefix == "val", batch_size=size, add_dataloader_idx=False)

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, self.val_prefixes[dataloader_idx])

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, self.test_prefixes[dataloader_idx])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory([p for p in self.parameters() if p.requires_grad])
