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

from matching.errors import ConfigError
from matching.model.decomposable import MatchOutput, run_batch
from matching.model.precision import check, forward_in, resolve
from matching.training.callbacks import batches_trained
from matching.training.losses import (
    check_distill,
    check_loss,
    kl_to_teacher,
    listwise_kl,
    listwise_softmax,
    margin_mse,
    pairwise_hinge,
)
from matching.training.metrics import (
    ClassificationMetrics,
    EvaluationRecord,
    RankingMetrics,
    describe,
    match_margin,
    positive_index,
)
from matching.training.replay import StepReplay, UpdateInStep, capturable_loss, make_capturable

log = logging.getLogger(__name__)

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class MatchingSystem(pl.LightningModule):
    """Cross-entropy training of `model` (called as model(a_ids, b_ids) -> MatchOutput), optionally
    weighted per class (`class_weights`, e.g. inverse class frequencies for WikiQA's 5 % positives).

    kind="classify": logged keys `{prefix}/{loss,acc}`, and per class `{prefix}/{precision,recall,f1}_<label>` and
    `{prefix}/macro_f1`; with two labels also `{prefix}/{f1,precision,recall,ap,auroc}` of `positive_label` (None:
    the second label). kind="rank" (pointwise ranking, label 1 = match): `{prefix}/{loss,acc}` and
    `{prefix}/{map,mrr,top1,top2,top5,p1,mrr10,ndcg10,map_raw,mrr_raw,questions,...}`, computed per question. Both
    over the whole split, once an evaluation (see matching.training.metrics). The prefix of each evaluation split is
    given by `val_prefixes` (one per validation dataloader, e.g. ["val", "val_mismatched"]) and `test_prefixes`.
    `compute_dtype` is the arithmetic of every forward pass, a `dtype=` value: fp32, bf16 or auto (see
    matching.model.precision). `loss_kind` (a ranking task only): pointwise (the cross-entropy above), pairwise (a hinge
    of `margin` over each query's positive/negative candidates) or listwise (softmax cross-entropy over each query's
    candidates), on the match margin of each pair (see matching.training.losses); evaluation is the same for all three.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerFactory | None,
        labels: Sequence[str],
        kind: str = "classify",
        val_prefixes: Sequence[str] = ("val",),
        test_prefixes: Sequence[str] = ("test",),
        task: str | None = None,
        class_weights: Sequence[float] | None = None,
        compute_dtype: str = "fp32",
        positive_label: str | None = None,
        loss_kind: str = "pointwise",
        margin: float = 1.0,
        distill: dict[str, Any] | None = None,
        capture: bool = False,
    ):
        super().__init__()
        self.task = task
        self.compute_dtype = check(compute_dtype)
        self.model = model
        self.optimizer_factory = optimizer
        self.labels = list(labels)
        self.val_prefixes, self.test_prefixes = list(val_prefixes), list(test_prefixes)
        if kind not in ("classify", "rank"):
            raise ConfigError(f"task kind must be 'classify' or 'rank', got {kind!r}")
        if kind == "rank" and len(self.labels) != 2:
            raise ConfigError(f"ranking is pointwise with two labels (no-match, match), got {self.labels}")
        self.kind = kind
        check_loss(loss_kind, kind, class_weights, margin)
        self.loss_kind, self.margin = loss_kind, float(margin)
        if distill is not None:
            check_distill(distill["loss"], kind, distill["weight"], distill["temperature"])
        self.distill = distill
        # The teacher's logits of every training pair (matching.training.distillation), set before training; not saved.
        self.teacher_logits: torch.Tensor | None = None
        n = len(self.labels)
        if class_weights is not None and len(class_weights) != n:
            raise ConfigError(f"loss.class_weights needs one weight per label {self.labels}, got {list(class_weights)}")
        # Training loss only; evaluation losses stay unweighted so that they compare across settings.
        weights = None if class_weights is None else torch.tensor([float(w) for w in class_weights])
        self.register_buffer("class_weights", weights, persistent=False)
        self.ranking = nn.ModuleDict(
            {p: RankingMetrics() for p in self.val_prefixes + self.test_prefixes} if kind == "rank" else {}
        )
        self.positive = positive_index(self.labels, positive_label, kind)
        self.classification = nn.ModuleDict(
            {p: ClassificationMetrics(self.labels, self.positive) for p in self.val_prefixes + self.test_prefixes}
            if kind == "classify"
            else {}
        )
        # Training accuracy: correct pairs counted on the device, summed over processes once an epoch.
        self.register_buffer("train_correct", torch.zeros((), dtype=torch.long), persistent=False)
        self.train_seen = 0
        prefixes = self.val_prefixes + self.test_prefixes
        self.eval_acc = nn.ModuleDict({p: MulticlassAccuracy(n, average="micro") for p in prefixes})
        # A metric object (not a plain per-process mean) so that the loss is exact over all processes.
        # No NaN check per update (each one would wait for the device); a NaN loss shows in the mean all the same.
        self.eval_loss = nn.ModuleDict({p: MeanMetric(nan_strategy="disable") for p in prefixes})
        # Every pair's prediction, kept only when asked (the final evaluation of a run, `evaluate`): `recorded`.
        self.record_predictions = False
        # Evaluation through another backend (`evaluate backend=onnx`): the batch's logits from it, not the model.
        self.score_batch: Callable[[dict[str, Any]], torch.Tensor] | None = None
        self.records = nn.ModuleDict({p: EvaluationRecord() for p in prefixes})
        self.recorded: dict[str, dict[str, np.ndarray]] = {}
        # `capture=true`: the whole step (batch gather, forward, loss, backward, update) is ours, replayed as a CUDA
        # graph per batch shape on a GPU (matching.training.replay); Lightning still runs the loop around it.
        self.capture = bool(capture)
        self.automatic_optimization = not self.capture
        self.replay: StepReplay | None = None

    #: Plain values that Lightning and the training step set several times a step (the name of the hook being run;
    #: the pairs counted). nn.Module.__setattr__ checks every assignment against the parameters, buffers and
    #: submodules, about 1.3 µs each on a CPU; these can never be one, so they are set directly: ~45 a step.
    _PLAIN_ATTRIBUTES = frozenset({"_current_fx_name", "train_seen", "replay"})

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
        if self.capture:
            return self._replayed_step(batch, batch_idx)
        logits = self.predict_step(batch).logits
        loss = self.training_loss(logits, batch)
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
        """`capture=true`: the step of matching.training.replay on the pairs `batch["index"]` padded to
        `batch["widths"]` (matching.training.batching.IndexCollator), run as the closure of Lightning's optimiser
        step, so that Lightning counts it (global_step, checkpoints, validation intervals) as one of its own; the
        optimiser it steps (UpdateInStep) leaves the update to the replayed graph. Its loss is returned for the
        callbacks that watch it (FiniteLossGuard, after the update)."""
        optimizer = self.optimizers()
        if self.replay is None:
            packed = self.trainer.datamodule.splits["train"].packed(self.device)
            self.replay = StepReplay(self, optimizer.inner, packed, self.trainer.datamodule.batch_size,
                                     capturable=capturable_loss(self.loss_kind, self.distill))  # fmt: skip
        loss = optimizer.step(closure=lambda: self.replay.step(batch["index"], batch["widths"]))
        self._log_step_loss(loss, batch_idx, len(batch["index"]), copy=True)
        return loss

    def on_train_start(self) -> None:
        self.replay = None  # graphs hold the addresses of this fit's optimiser state and split

    def on_train_end(self) -> None:
        if self.replay is not None:
            log.info("capture=true: %s", self.replay.describe())

    def training_loss(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        """The loss of `loss_kind` (matching.training.losses); the ranking losses score a pair by its match margin. With
        a teacher, plus `distill.weight` times the distillation loss against its logits of the batch's pairs."""
        loss = self.label_loss(logits, batch)
        if self.distill is None:
            return loss
        if self.teacher_logits is None:
            raise RuntimeError("distillation is configured but no teacher logits were set: a bug in matching")
        teacher = self.teacher_logits.to(logits.device)[batch["index"]]
        return loss + float(self.distill["weight"]) * self.distill_loss(logits, teacher, batch)

    def label_loss(self, logits: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        if self.loss_kind == "pointwise":
            return F.cross_entropy(logits, batch["label"], weight=self.class_weights)
        scores = match_margin(logits)
        if self.loss_kind == "pairwise":
            return pairwise_hinge(scores, batch["label"], batch["group"], self.margin)
        return listwise_softmax(scores, batch["label"], batch["group"])

    def distill_loss(self, logits: torch.Tensor, teacher: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        kind, temperature = self.distill["loss"], float(self.distill["temperature"])
        if kind == "kl":
            return kl_to_teacher(logits, teacher, temperature)
        scores, taught = match_margin(logits), match_margin(teacher)
        if kind == "margin_mse":
            return margin_mse(scores, taught, batch["label"], batch["group"])
        return listwise_kl(scores, taught, batch["group"], temperature)

    def on_train_epoch_end(self) -> None:
        counts = torch.stack([self.train_correct, self.train_correct.new_tensor(self.train_seen)])
        correct, seen = self.trainer.strategy.reduce(counts, reduce_op="sum").tolist()
        self.train_correct.zero_()
        self.train_seen = 0
        if seen:
            self.log("train/acc", correct / seen)

    def _eval_step(self, batch: dict[str, Any], prefix: str) -> None:
        logits = self.predict_step(batch).logits if self.score_batch is None else self.score_batch(batch)
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
                log.info(describe(prefix, values))
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
        if not self.capture:
            return optimizer
        if self.device.type == "cuda":
            make_capturable(optimizer)
        return UpdateInStep(optimizer)
