"""MatchingSystem: the training system around a matching model (loss, metrics, optimiser), apart from the model."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from matching.model.decomposable import MatchOutput, run_batch
from matching.model.precision import check, forward_in, resolve
from matching.training.callbacks import batches_trained
from matching.training.losses import TrainingLoss
from matching.training.metrics import (
    ClassificationMetrics,
    EvaluationRecord,
    RankingMetrics,
    TaskMetrics,
    match_margin,
    questions_line,
)
from matching.training.replay import StepReplay, UpdateInStep, make_capturable

log = logging.getLogger(__name__)

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class MatchingSystem(pl.LightningModule):
    """The training of `model` (called as model(a_ids, b_ids) -> MatchOutput) with `loss` (a TrainingLoss of
    matching.training.losses: pointwise cross-entropy, the pairwise hinge or the listwise softmax, each possibly
    wrapped in distillation's loss against a teacher) and the optimiser `optimizer` makes of its parameters, and
    its evaluation on the splits of `metrics` (matching.training.metrics.TaskMetrics). A system built for evaluation
    alone (`evaluate`, a run's final evaluation) has neither loss nor optimiser. Built by `hydra.utils.instantiate`
    from the run's `system` node (matching.training.build.build_systems), which gives it everything it uses.

    Evaluation is the same whatever the training loss: kind "classify" logs `{prefix}/{loss,acc}`, per class
    `{prefix}/{precision,recall,f1}_<label>` and `{prefix}/macro_f1`, and with two labels also
    `{prefix}/{f1,precision,recall,ap,auroc}` of the positive label; kind "rank" (label 1 = match) logs
    `{prefix}/{loss,acc}` and `{prefix}/{map,mrr,top1,top2,top5,p1,mrr10,ndcg10,map_raw,mrr_raw,questions,...}`,
    computed per question. Both over the whole split, once an evaluation (see matching.training.metrics); the
    evaluation loss is the unweighted cross-entropy, so that it compares across training losses.

    `compute_dtype` is the arithmetic of every forward pass, a `dtype=` value: fp32, bf16 or auto (see
    matching.model.precision). `replay` (`capture=true`): the whole training step is ours, replayed as a CUDA graph
    per batch shape on a GPU (matching.training.replay); Lightning still runs the loop around it. `scorer`: the
    logits of an evaluation batch from another backend (`evaluate backend=onnx`) instead of the model.
    `record_predictions`: every evaluated pair's prediction is kept, in `recorded` (a run's final evaluation,
    `evaluate`; matching.training.scores writes them).
    """

    def __init__(
        self,
        model: nn.Module,
        loss: TrainingLoss | None,
        optimizer: OptimizerFactory | None,
        metrics: TaskMetrics,
        compute_dtype: str = "fp32",
        replay: StepReplay | None = None,
        scorer: Callable[[dict[str, Any]], torch.Tensor] | None = None,
        record_predictions: bool = False,
    ):
        super().__init__()
        self.model, self.loss, self.optimizer_factory = model, loss, optimizer
        self.compute_dtype = check(compute_dtype)
        self.task, self.kind, self.labels = metrics.task, metrics.kind, list(metrics.labels)
        self.val_prefixes, self.test_prefixes = list(metrics.val_prefixes), list(metrics.test_prefixes)
        self.positive = metrics.positive
        prefixes = metrics.prefixes
        self.ranking = nn.ModuleDict({p: RankingMetrics() for p in prefixes} if self.kind == "rank" else {})
        self.classification = nn.ModuleDict(
            {p: ClassificationMetrics(self.labels, self.positive) for p in prefixes} if self.kind == "classify" else {}
        )
        # Training accuracy: correct pairs counted on the device, summed over processes once an epoch.
        self.register_buffer("train_correct", torch.zeros((), dtype=torch.long), persistent=False)
        self.train_seen = 0
        self.eval_acc = nn.ModuleDict({p: MulticlassAccuracy(len(self.labels), average="micro") for p in prefixes})
        # A metric object (not a plain per-process mean) so that the loss is exact over all processes.
        # No NaN check per update (each one would wait for the device); a NaN loss shows in the mean all the same.
        self.eval_loss = nn.ModuleDict({p: MeanMetric(nan_strategy="disable") for p in prefixes})
        self.scorer, self.record_predictions = scorer, record_predictions
        self.records = nn.ModuleDict({p: EvaluationRecord() for p in prefixes})
        self.recorded: dict[str, dict[str, np.ndarray]] = {}
        self.replay = replay
        self.automatic_optimization = replay is None

    #: Plain values that Lightning and the training step set several times a step (the name of the hook being run;
    #: the pairs counted). nn.Module.__setattr__ checks every assignment against the parameters, buffers and
    #: submodules, about 1.3 µs each on a CPU; these can never be one, so they are set directly: ~45 a step.
    _PLAIN_ATTRIBUTES = frozenset({"_current_fx_name", "train_seen"})

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._PLAIN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> MatchOutput:
        return forward_in(resolve(self.compute_dtype, a.device), self.model, a, b)

    def predict_step(self, batch: dict[str, Any], batch_idx: int = 0, dataloader_idx: int = 0) -> MatchOutput:
        """Logits, alignment matrices and token masks of a batch: what evaluate, predict, visualize and export
        use (under a Trainer or called directly), computed in `compute_dtype`."""
        return run_batch(self.model, batch, resolve(self.compute_dtype, batch["a"].device))

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        if self.replay is not None:
            return self._replayed_step(batch, batch_idx)
        logits = self.predict_step(batch).logits
        loss = self.loss(logits, batch)
        self.count_correct(logits, batch["label"])
        self._log_step_loss(loss.detach(), batch_idx, len(batch["label"]))
        return loss

    def count_correct(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """The training accuracy's count, on the device (nothing here waits for an accelerator): logged once an
        epoch."""
        self.train_correct.add_((logits.detach().argmax(-1) == labels).sum())

    def _log_step_loss(self, loss: torch.Tensor, batch_idx: int, size: int, copy: bool = False) -> None:
        """The step loss, on the steps whose metrics the loggers write (log_every_n_steps) and on an epoch's first
        step (so that even an epoch shorter than that interval shows one); `copy`: a copy of it is logged (a replayed
        graph's loss tensor is overwritten by the next replay)."""
        self.train_seen += size
        every = self.trainer.log_every_n_steps
        if batch_idx == 0 or (every > 0 and (self.global_step + 1) % every == 0):
            self.log("train/loss", loss.clone() if copy else loss, prog_bar=True, batch_size=size)

    def _replayed_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """`capture=true`: the step of `replay` on the pairs `batch["index"]` padded to `batch["widths"]`
        (matching.training.batching.IndexCollator), run as the closure of Lightning's optimiser step, so that
        Lightning counts it (global_step, checkpoints, validation intervals) as one of its own; the optimiser it steps
        (UpdateInStep) leaves the update to the replayed graph. Its loss is returned for the callbacks that watch it
        (FiniteLossGuard, after the update)."""
        optimizer = self.optimizers()
        loss, correct = optimizer.step(closure=lambda: self.replay.step(batch["index"], batch["widths"]))
        self.train_correct.add_(correct)
        self._log_step_loss(loss, batch_idx, len(batch["index"]), copy=True)
        return loss

    def on_train_start(self) -> None:
        if self.replay is not None:  # graphs hold the addresses of this fit's optimiser state and split
            self.replay.start(self.model, self.loss, self.optimizers().inner, self.compute_dtype, self.device)

    def on_train_end(self) -> None:
        if self.replay is not None:
            log.info("capture=true: %s", self.replay.steps_summary())

    def on_train_epoch_end(self) -> None:
        counts = torch.stack([self.train_correct, self.train_correct.new_tensor(self.train_seen)])
        correct, seen = self.trainer.strategy.reduce(counts, reduce_op="sum").tolist()
        self.train_correct.zero_()
        self.train_seen = 0
        if seen:
            self.log("train/acc", correct / seen)

    def _eval_step(self, batch: dict[str, Any], prefix: str) -> None:
        logits = self.predict_step(batch).logits if self.scorer is None else self.scorer(batch)
        loss = F.cross_entropy(logits, batch["label"])
        size = len(batch["label"])
        metric = self.eval_acc[prefix]
        metric(logits, batch["label"])
        self.eval_loss[prefix].update(loss, weight=size)
        self.log(f"{prefix}/loss", self.eval_loss[prefix], batch_size=size, add_dataloader_idx=False)
        self.log(f"{prefix}/acc", metric, prog_bar=prefix == "val", batch_size=size, add_dataloader_idx=False)
        if self.kind == "rank":
            self.ranking[prefix].update(match_margin(logits), batch["label"], batch["group"], batch["index"])
        else:
            self.classification[prefix].update(logits, batch["label"], batch["index"])
        if self.record_predictions:
            probs = logits.float().softmax(-1)
            predicted = probs.argmax(-1)
            score = match_margin(logits) if self.kind == "rank" else probs.gather(1, predicted[:, None])
            self.records[prefix].update(batch["index"], batch["label"], batch["group"], predicted, score)

    def _keep_records(self, prefixes: Sequence[str]) -> None:
        """The recorded predictions of each split, gathered from every process (all of them take part)."""
        for prefix in prefixes:
            record = self.records[prefix]
            if self.record_predictions and record.update_called:
                self.recorded[prefix] = record.compute()
            record.reset()

    def _log_split_metrics(self, prefixes: Sequence[str]) -> None:
        """Each split's metrics over all its pairs (ranking: per question; classification: per class and of the
        positive label), computed once at the end of the evaluation, then its recorded predictions."""
        rank = self.kind == "rank"
        for prefix in prefixes:
            metric = (self.ranking if rank else self.classification)[prefix]
            if not metric.update_called:
                continue
            values = metric.compute()
            metric.reset()
            for name, value in values.items():
                self.log(f"{prefix}/{name}", value, prog_bar=rank and name == "map" and prefix == "val")
            if rank and not self.trainer.sanity_checking and self.trainer.is_global_zero:
                log.info(questions_line(prefix, values))
        self._keep_records(prefixes)

    def on_validation_epoch_end(self) -> None:
        self._log_split_metrics(self.val_prefixes)

    def on_test_epoch_end(self) -> None:
        self._log_split_metrics(self.test_prefixes)

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, self.val_prefixes[dataloader_idx])

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, self.test_prefixes[dataloader_idx])

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Resuming continues the random streams (dropout) exactly where the interrupted run left them.
        counts = checkpoint.get("train_counts")
        if counts and self._trainer is not None and self.trainer.world_size == 1:
            # A run stopped in the middle of an epoch counts that epoch's accuracy on from where it stopped. (With
            # several processes each counted its own pairs and the checkpoint holds one's: the epoch's accuracy
            # then covers the pairs after the resume.)
            self.train_correct.fill_(int(counts[0]))
            self.train_seen = int(counts[1])
        rng = checkpoint.get("rng")
        if rng:
            torch.set_rng_state(rng["torch"])
            name, keys, pos, has_gauss, cached = rng["numpy"]
            np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
            random.setstate(rng["python"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Tensors and plain Python values only, so the checkpoint still loads with torch.load(weights_only=True).
        name, keys, pos, has_gauss, cached = np.random.get_state()
        numpy_state = (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))
        checkpoint["rng"] = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
        if self._trainer is not None and 0 < batches_trained(self.trainer) < self.trainer.num_training_batches:
            # saved in the middle of an epoch (a scheduler's signal): its accuracy so far
            checkpoint["train_counts"] = [int(self.train_correct), self.train_seen]
        # What `evaluate`/`predict` check a checkpoint against before trusting it with data.
        model = self.model
        checkpoint["matching"] = {
            "task": self.task,
            "labels": self.labels,
            "kind": self.kind,
            "vocab_size": model.embedding.num_embeddings if hasattr(model, "embedding") else None,
            "encoder": getattr(model, "source_record", None),  # what the embedding source records (an encoder)
        }

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.optimizer_factory is None:
            raise RuntimeError("this MatchingSystem was built for evaluation only (no optimizer)")
        trained = [p for p in self.parameters() if p.requires_grad]
        encoder = getattr(self.model, "encoder", None)
        lr = getattr(encoder, "lr", None)
        if lr is None:
            optimizer = self.optimizer_factory(trained)
        else:  # a fine-tuned encoder's layers at their own learning rate (embeddings.encoder_lr), the rest at the
            own = {id(p) for p in encoder.parameters()}  # optimiser's
            groups = [{"params": [p for p in trained if id(p) not in own]},
                      {"params": [p for p in trained if id(p) in own], "lr": lr}]  # fmt: skip
            optimizer = self.optimizer_factory(groups)
        if self.replay is None:
            return optimizer
        if self.device.type == "cuda":
            make_capturable(optimizer)
        return UpdateInStep(optimizer)
