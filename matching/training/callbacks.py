"""The callbacks of a training run besides the configured ones: the record a new run writes before its first step,
the epoch timer, the guard against a non-finite loss, `last.ckpt` at every epoch's end, the checkpoint written when
a run is told to stop and the epoch numbers of the logs; and the configured callbacks (`callbacks.<name>`, among
them the progress bar).

Epochs are numbered from 1 everywhere a person reads them: the progress bar (`Epoch 1/20`), the `epoch` column of
`logs/metrics.csv` (and of every tracker), `best_epoch` in metrics.json and the messages. Lightning counts from 0
(`trainer.current_epoch`, and the `epoch` of a checkpoint file, which stays Lightning's)."""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint, ProgressBar, TQDMProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from matching.configs import build
from matching.console import CONSOLE
from matching.errors import ConfigError, UserError
from matching.model.precision import arithmetic_summary
from matching.saved.examples import curated, write_run_examples
from matching.saved.provenance import write_provenance

log = logging.getLogger(__name__)


def batches_trained(trainer: pl.Trainer) -> int:
    """How many batches of the current epoch the trainer has trained on (Lightning's own count)."""
    return trainer.fit_loop.epoch_loop.batch_progress.current.processed


def build_callbacks(cfg: DictConfig) -> dict[str, pl.Callback]:
    """The configured callbacks (`callbacks.<name>`: a `_target_` node, or null to leave it out); a progress bar
    only while `trainer.enable_progress_bar` is on (Lightning refuses one otherwise)."""
    built = {name: build(node) for name, node in (cfg.get("callbacks") or {}).items() if node is not None}
    if not progress_bar_shown(cfg):
        built = {name: c for name, c in built.items() if not isinstance(c, ProgressBar)}
    return built


def progress_bar_shown(cfg: DictConfig) -> bool:
    """Whether a run draws a progress bar: `trainer.enable_progress_bar` and stderr a terminal (in a log file or a
    pipe a bar is a screenful of redraws: `EpochLine` says one line an epoch instead)."""
    return bool(cfg.get("trainer", {}).get("enable_progress_bar", True)) and sys.stderr.isatty()


def run_callbacks(cfg: DictConfig) -> tuple[list[pl.Callback], ModelCheckpoint, EpochTimer]:
    """A training run's callbacks: the configured ones (`callbacks.checkpoint`, a ModelCheckpoint, among them), the
    epoch timer, the finite-loss guard, `last.ckpt` at every epoch's end and the checkpoint on a stop signal; also
    the checkpoint callback and the timer, whose results the run reports."""
    configured = build_callbacks(cfg)
    checkpoint = configured.get("checkpoint")
    if not isinstance(checkpoint, ModelCheckpoint):
        raise ConfigError("callbacks.checkpoint must be a ModelCheckpoint: the run directory's best.ckpt comes from it")
    timer = EpochTimer()
    callbacks = [*configured.values(), timer, FiniteLossGuard(), LastEveryEpoch(checkpoint), StopCheckpoint(),
                 EpochNumbers()]  # fmt: skip
    if threads_follow_free_cores(cfg):
        callbacks.append(SharedCores())
    return callbacks, checkpoint, timer


def threads_follow_free_cores(cfg: DictConfig) -> bool:
    """Whether a run's threads follow the free cores (`threads: 0`, and no OMP_NUM_THREADS set by its launcher, as a
    study's runs and `jobs=2 threads=1` set it; on a GPU the host thread count matters little)."""
    return not int(cfg.get("threads") or 0) and "OMP_NUM_THREADS" not in os.environ


def training_threads(cfg: DictConfig) -> int:
    """The intra-op threads a run starts with, set: `threads=N` (N > 0) exactly; else OMP_NUM_THREADS's when its
    launcher set it; else the cores free now (matching.inference.threads.free_cores: at a run's start the cores less
    the load average, no wait; SharedCores re-measures them from the idle time at every epoch), at least one. More
    threads than free cores stall every step (docs/results/performance.md, "Training beside other jobs")."""
    requested = int(cfg.get("threads") or 0)
    if requested < 0:
        raise ConfigError(f"threads must be 0 (the free cores) or a positive number of threads, got {requested}")
    if requested:
        torch.set_num_threads(requested)
    elif threads_follow_free_cores(cfg):
        from matching.inference.threads import free_cores

        torch.set_num_threads(free_cores())  # at the start: its estimate from the load average, no wait
    return torch.get_num_threads()


class RunRecord(pl.Callback):
    """What a new run writes into its folder once its data is ready, before its first step: its vocabulary
    (vocab.txt, which resuming the run and every use of its model read), a few pairs of its first evaluation split
    for the server's page (examples.json, for a task without examples written for it: matching.saved.examples) and
    where its data and embeddings came from, with the arithmetic it computes in (provenance.json:
    matching.saved.provenance). On the first process only; a resumed run keeps the record of its first sitting."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg, self.run_dir = cfg, run_dir

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        dm = trainer.datamodule
        dm.vocab.save(self.run_dir / "vocab.txt")
        self.keep_examples(dm)
        arithmetic = arithmetic_summary(str(self.cfg.get("dtype", "fp32")), trainer.strategy.root_device.type)
        write_provenance(self.cfg, dm.task, dm.vectors, self.run_dir, arithmetic)

    def keep_examples(self, dm: Any) -> None:
        """A few pairs of the first evaluation split (with their mined candidates, for a task of positives alone);
        not for a benchmark, whose page shows examples written for it."""
        option = (self.cfg.get("choices") or {}).get("task") or dm.task.name
        if curated(option) is not None or not dm.eval_splits:
            return
        split = dm.eval_splits[0]
        write_run_examples(self.run_dir, dm.read_pairs(split), dm.task.kind, dm.labels, split)


class SharedCores(pl.Callback):
    """With `threads: 0`, each epoch starts on as many threads as cores were free over the last one (the run's own
    use counted as free): a run that shares the machine gives up the cores others take, and takes them back after."""

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from matching.inference.threads import free_cores

        now, before = free_cores(), torch.get_num_threads()
        if now != before:
            torch.set_num_threads(now)
            log.info("epoch %d: %d thread%s (the cores free over the last epoch; was %d)", trainer.current_epoch + 1,
                     now, "s" * (now > 1), before)  # fmt: skip


class EpochNumbers(pl.Callback):
    """Logs `epoch` counted from 1 with every logged metric, so that the loggers' epoch column (which Lightning
    fills from `trainer.current_epoch`, from 0, unless `epoch` is logged) agrees with the progress bar and with
    metrics.json's `best_epoch`. The evaluations of a checkpoint after training (the best one's dev and test
    metrics) are logged under the epoch that wrote it: `evaluated`, read from the checkpoint when it is loaded."""

    def __init__(self) -> None:
        self.evaluated: int | None = None

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        # Evaluating a checkpoint (trainer.validate/test with ckpt_path): its epoch, counted from 1 as metrics.json's
        # best_epoch. (Resuming a fit loads one too; a fit logs its own epochs.)
        self.evaluated = int(checkpoint["epoch"]) + 1

    def _log(self, pl_module: pl.LightningModule, trainer: pl.Trainer, on_step: bool) -> None:
        if trainer.sanity_checking:
            return
        epoch = trainer.current_epoch + 1 if trainer.state.fn == "fit" else self.evaluated
        if epoch is not None:
            pl_module.log("epoch", float(epoch), on_step=on_step, on_epoch=not on_step, prog_bar=False, logger=True,
                          sync_dist=False)  # fmt: skip

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Only on the steps whose row the loggers write (every trainer.log_every_n_steps, counted in optimiser steps,
        # as Lightning's logger connector counts them; and the last): a logged number becomes a tensor on the
        # model's device, which on a GPU is a copy from the host that waits for the queued work.
        if trainer.global_step % trainer.log_every_n_steps == 0 or trainer.should_stop or trainer.fast_dev_run:
            self._log(pl_module, trainer, on_step=True)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, trainer, on_step=False)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, trainer, on_step=False)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._log(pl_module, trainer, on_step=False)


class EpochLine(pl.Callback):
    """One console line an epoch where no progress bar shows it (`trainer.enable_progress_bar=false`, or stderr is
    not a terminal): `epoch 3/10: val/acc 0.6120 (best), train/loss 0.8123, 4.1 s`."""

    def __init__(self) -> None:
        self.started = 0.0
        self.best: float | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A resumed run's best so far is the checkpoint callback's, restored from the checkpoint it continues from.
        best = getattr(trainer.checkpoint_callback, "best_model_score", None)
        self.best = float(best) if best is not None else None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.started = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_global_zero:
            return
        if trainer.progress_bar_callback is not None:
            return
        checkpoint = trainer.checkpoint_callback
        monitor = getattr(checkpoint, "monitor", None)
        metrics = trainer.callback_metrics
        parts = []
        if monitor and monitor in metrics:
            value = float(metrics[monitor])
            better = self.best is None or (value > self.best if checkpoint.mode == "max" else value < self.best)
            self.best = value if better else self.best
            parts.append(f"{monitor} {value:.4f}{' (best)' if better else f', best {self.best:.4f}'}")
        if "train/loss" in metrics:
            parts.append(f"train/loss {float(metrics['train/loss']):.4f}")
        planned = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        # an epoch resumed from a checkpoint written inside it (a stop signal) did not start in this sitting
        timing = f"{time.perf_counter() - self.started:.1f} s" if self.started else "resumed in this epoch"
        log.info("epoch %d%s: %s, %s", trainer.current_epoch + 1, planned, ", ".join(parts), timing, extra=CONSOLE)


class EpochProgressBar(TQDMProgressBar):
    """Lightning's progress bar, its epoch counted from 1 and out of the planned number (`Epoch 1/20`)."""

    def on_train_epoch_start(self, trainer, *args) -> None:
        super().on_train_epoch_start(trainer, *args)
        planned = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        out_of = f"/{planned}" if planned else ""
        self.train_progress_bar.set_description(f"Epoch {trainer.current_epoch + 1}{out_of}")


class EpochTimer(pl.Callback):
    """Wall-clock seconds of each training epoch, validation excluded, and of the whole fit, over every sitting of
    a resumed run.

    Lightning validates inside the training epoch, before the epoch's end hook: the time from `on_validation_start`
    to `on_validation_end` is taken off the epoch's (the checkpoints written after a validation are still counted:
    milliseconds for these models). Each checkpoint holds the figures up to the moment it was written (`timing`):
    a resumed run adds its own to those of the sittings before, so that `train_seconds` is the training time of the
    run, not of its last sitting, and work lost to an interruption (the part of an epoch after its last checkpoint)
    is not counted."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start: float | None = None  # None in an epoch resumed from a mid-epoch checkpoint: not timed
        self._validating_since: float | None = None
        self._validated = 0.0  # seconds of this epoch spent validating
        self._sitting: float | None = None  # when this sitting's fit began
        self._before = 0.0  # the fit seconds of the sittings before this one (a resumed run's checkpoint)
        self.sittings: int | None = 1  # this one and those before; None after a checkpoint that did not count them

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self._sitting, self._before, self.sittings = time.perf_counter(), 0.0, 1

    def fit_seconds(self) -> float:
        """The seconds of the fit so far: the sittings before this one (as their checkpoint holds them) and this."""
        return self._before + (time.perf_counter() - self._sitting if self._sitting is not None else 0.0)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start, self._validated = time.perf_counter(), 0.0

    def on_validation_start(self, trainer, pl_module) -> None:
        if self._start is not None:  # not the sanity check before training, nor a validation after it
            self._validating_since = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._validating_since is not None:
            self._validated += time.perf_counter() - self._validating_since
            self._validating_since = None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self._start is not None:
            self.seconds.append(time.perf_counter() - self._start - self._validated)
        self._start = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        epochs = list(self.seconds)
        if self._start is not None and batches_trained(trainer) >= trainer.num_training_batches:
            # written after the epoch's closing validation, before its end hook: the epoch is whole
            epochs.append(time.perf_counter() - self._start - self._validated)
        checkpoint["timing"] = {"epoch_seconds": epochs, "fit_seconds": self.fit_seconds(), "sittings": self.sittings}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn != "fit":  # an evaluation of a checkpoint after the fit loads one too
            return
        timing = checkpoint.get("timing")
        if timing is None or timing.get("sittings") is None:  # written before the sittings were counted
            self.sittings = None  # the run's seconds are this sitting's: the run's metrics.json says no `sittings`
            return
        self.seconds = [float(s) for s in timing["epoch_seconds"]]
        self._before = float(timing["fit_seconds"])
        self.sittings = int(timing["sittings"]) + 1


def last_path(checkpoint: ModelCheckpoint) -> Path:
    """Where the checkpoint callback's `last.ckpt` goes."""
    return Path(checkpoint.dirpath) / f"{checkpoint.CHECKPOINT_NAME_LAST}{checkpoint.FILE_EXTENSION}"


def last_written(trainer: pl.Trainer) -> Path | None:
    """The run's `last.ckpt` where one has been written so far; None before (or without a checkpoint callback)."""
    callback = trainer.checkpoint_callback
    if callback is None or not callback.dirpath:
        return None
    path = last_path(callback)
    return path if path.exists() else None


def save_last(trainer: pl.Trainer, checkpoint: ModelCheckpoint) -> Path:
    """The checkpoint callback's `last.ckpt`, written now (atomically: the trainer's AtomicCheckpointIO) and recorded
    as its last one, in the file too: otherwise a run stopped before that callback's first save would, once resumed,
    keep this file and write its own to last-v1.ckpt."""
    path = last_path(checkpoint)
    checkpoint.last_model_path = str(path)  # Lightning's object, which has no method for it
    trainer.save_checkpoint(path, checkpoint.save_weights_only)
    return path


class LastEveryEpoch(Checkpoint):
    """`last.ckpt` at the end of every epoch, so that a resumed run continues from its last finished epoch.

    Lightning 2.6 writes the checkpoint callback's `save_last` copy only at a step where it writes a best checkpoint
    too: an epoch that is not the best so far left last.ckpt at the best epoch, and a resumed run trained every
    epoch since again (the same numbers, since a checkpoint holds the random streams, but time: hours of a long
    run). A `Checkpoint`, so that Lightning calls it after the checkpoint callback, whose state (the best score and
    path) the file then holds. Where that callback wrote its own copy at this step (an improving epoch, or a
    Lightning that writes it every time), nothing is written."""

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint = checkpoint

    def _write(self, trainer: pl.Trainer) -> None:
        callback = self.checkpoint
        if not callback.save_last or callback.dirpath is None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        # Lightning's own record of the step it last wrote at (no public accessor); where it lacks one, write.
        if trainer.global_step == getattr(callback, "_last_global_step_saved", None):
            return
        save_last(trainer, callback)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Where the checkpoint callback writes an epoch's (validating once an epoch): a checkpoint written at the
        # validation's end, before the epoch is counted as processed, resumes into the epoch's end hooks without the
        # dev metrics they check.
        self._write(trainer)


class NonFiniteLossError(UserError, ValueError):
    """The training loss became NaN or infinite; reported like a user's mistake (what to change is in the message:
    the learning rate, clipping, the data), without a traceback."""


class FiniteLossGuard(pl.Callback):
    """Stops the run at the first non-finite training loss, naming the step; checkpoints already written
    (the last completed epoch) are kept.

    On a CPU the loss is read at every step, before backward, so the weights in memory are never touched by the
    bad loss. Reading it on the host would wait for an accelerator, so there the first bad step is recorded on
    the device and read every `log_every_n_steps` steps and always before validation, the end of an
    epoch and the end of training, i.e. before any checkpoint could be written from weights the bad loss reached.
    """

    def __init__(self) -> None:
        self._first: torch.Tensor | None = None  # global step of the first non-finite loss, −1 while none
        self._loss: torch.Tensor | None = None  # that loss
        self._where: dict[int, tuple[int, int]] = {}  # global step -> (epoch, batch) since the last check

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._where[trainer.global_step] = (trainer.current_epoch, batch_idx)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._watch(trainer, loss, trainer.global_step)

    def _watch(self, trainer, loss: torch.Tensor, step: int) -> None:
        if loss.device.type == "cpu":  # free to read: checked now
            if not math.isfinite(value := float(loss.detach())):
                self._stop(trainer, step, value)
            self._where.clear()
            return
        loss = loss.detach()
        if self._first is None or self._first.device != loss.device:
            self._first, self._loss = torch.full((), -1, device=loss.device), torch.zeros((), device=loss.device)
        new = ~torch.isfinite(loss) & (self._first < 0)
        self._first = torch.where(new, step, self._first)
        self._loss = torch.where(new, loss.float(), self._loss)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not pl_module.automatic_optimization and isinstance(outputs, dict) and "loss" in outputs:
            # A step of our own (capture=true: backward and update inside one replayed graph): its loss is seen
            # after the update, the step already counted; still before any checkpoint is written from its weights.
            self._watch(trainer, outputs["loss"], trainer.global_step - 1)
        every = trainer.log_every_n_steps
        if every > 0 and trainer.global_step % every == 0:
            self._check(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._check(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._check(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._check(trainer)

    def _check(self, trainer) -> None:
        if self._first is None:
            return
        step = int(self._first)
        if step < 0:
            self._where.clear()
            return
        self._stop(trainer, step, float(self._loss))

    def _stop(self, trainer, step: int, loss: float) -> None:
        epoch, batch_idx = self._where.get(step, (trainer.current_epoch, -1))
        last = last_written(trainer)
        kept = f"the last good checkpoint is {last}" if last else "no checkpoint was written yet"
        raise NonFiniteLossError(
            f"training loss became {loss} at global step {step} (epoch {epoch + 1}, batch {batch_idx}); "
            f"{kept}. Lower optim.lr, set trainer.gradient_clip_val, or check the data."
        )


class StopCheckpoint(pl.Callback):
    """Writes `last.ckpt` before a run that is told to stop ends, so that a relaunch loses no finished step.

    SIGTERM (what SLURM sends on preemption or `scancel`, Ray and Kubernetes when they stop a worker) is Lightning's
    own: it stops at the end of the current step and calls `on_exception`. SIGUSR1 and SIGUSR2 (SLURM's warning
    before a time limit: `--signal`, submitit's and Lightning's requeue signal) are caught here: at the end of the
    current step the checkpoint is written, then the handler that was there before runs (submitit's or Lightning's
    requeue of the job; by default, the signal ends the process as it would have). Under DDP the processes agree
    every `log_every_n_steps` steps whether one was signalled; then all write and stop at that same step.

    A SIGTERM that stops a validation inside training writes no checkpoint; the last one written (the previous
    epoch's end, or a step before) is kept, and the relaunched run repeats the steps since, with the same numbers (a
    checkpoint holds the random streams). Lightning 2.6 stops a validation between two of its batches, and resumes a
    checkpoint written then as if the validation had finished: the epoch's dev score was lost, and the epoch's end
    failed for want of it (early stopping: "conditioned on metric val/acc which is not available")."""

    SIGNALS = ("SIGUSR1", "SIGUSR2")

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._pending: int | None = None

    def _save(self, trainer: pl.Trainer, why: str) -> None:
        callback = trainer.checkpoint_callback
        if callback is not None and callback.dirpath:
            path = save_last(trainer, callback)
            if trainer.is_global_zero:
                log.warning("%s: wrote %s (step %d); relaunch to continue from it", why, path, trainer.global_step)

    def on_train_start(self, trainer, pl_module) -> None:  # after Lightning's own handlers, which ours then call
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers belong to the main thread
        for name in self.SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None:
                self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self._pending = signum  # acted on at the end of the current step, when the weights are whole

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.world_size > 1:  # all processes stop at the same step (the signal may reach them a step apart),
            # agreed every log_every_n_steps steps, not at every step: the agreement waits for the device
            if trainer.global_step % max(1, trainer.log_every_n_steps):
                return
            got = trainer.strategy.reduce(torch.tensor(self._pending or 0), reduce_op="max")
            self._pending = int(got) or None
        if self._pending is not None:
            self._save(trainer, f"received {signal.Signals(self._pending).name}")
            self._deliver()

    def _deliver(self) -> None:
        """The pending signal, to the handler that was there before ours."""
        signum, self._pending = self._pending, None
        self._restore()
        previous = signal.getsignal(signum)
        if callable(previous):
            previous(signum, None)
        elif previous != signal.SIG_IGN:
            signal.raise_signal(signum)  # the default action: the process ends as it would have

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and trainer.state.fn == "fit":
            if not trainer.validating:
                self._save(trainer, "received SIGTERM")
            elif trainer.is_global_zero:  # see the class's docstring
                last = last_written(trainer)
                kept = (f"{last} is kept, and a relaunch continues from it" if last
                        else "none was written before, and a relaunch starts again")  # fmt: skip
                log.warning("received SIGTERM during validation, at step %d: no checkpoint written (one written now "
                            "would resume without this validation); %s", trainer.global_step, kept)  # fmt: skip
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_end(self, trainer, pl_module) -> None:
        if self._pending is not None:  # signalled after the last step: the epoch-end checkpoints are written
            self._deliver()
        self._restore()
