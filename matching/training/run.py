"""Training one model: for the `train` command (matching/train.py, which imports this only once Hydra has read the
command line) and for Python, `train(cfg)` on a composed config (`matching.cli.compose_config("train", [...])`).

A run directory holds `config.yaml` (resolved but for the `datamodule` node's references:
matching.saved.run_folder.saved_form), `vocab.txt`, `checkpoints/{best,last}.ckpt`,
`metrics.json` (dev metrics of the best checkpoint, its epoch `best_epoch` counted from 1 as in the CSV log and the
progress bar, optional test metrics, timing), the CSV log, `provenance.json` (the data and embeddings by file name
and sha256, matching.saved.provenance) and, for a task without curated examples, `examples.json` (a few dev pairs for
the server's page). A new run that fails before its first checkpoint leaves `outputs/runs/` (see `set_aside`).
Checkpoints are written atomically at the end of every epoch; `python -m matching.train resume=<run dir>` continues an
interrupted run from its last completed epoch, with its own saved config. A job of a sweep (`-m`) does the same by
itself: relaunched into the same sweep directory, it skips a complete run and continues an interrupted one (see
matching/training/sweeps.py). A run told to stop (SIGTERM, or the SIGUSR1/SIGUSR2 that SLURM sends before a time limit
or preemption) first writes `last.ckpt` at the end of the current training step.
"""

from __future__ import annotations

import csv
import logging
import signal
import statistics
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

# By name: a sweep launcher (submitit) pickles this module's functions, and cloudpickle cannot pickle
# torch.backends.cpu reached as an attribute (a GenericModule).
from torch.backends.cpu import get_cpu_capability

from matching.console import CONSOLE, lines_once
from matching.data.tasks import split_prefix
from matching.data.vocab import Vocabulary
from matching.errors import RunError
from matching.extras import check_installed
from matching.files import write_json, write_text_atomic
from matching.model.assembly import build_model
from matching.model.precision import arithmetic_summary, denormals_flushed, flushes_denormals
from matching.saved.earlier_versions import upgraded
from matching.saved.run_folder import find_run_dir, saved_form
from matching.training.build import AtomicCheckpointIO, build_datamodule, build_systems, check_writable
from matching.training.callbacks import RunRecord, progress_bar_shown, run_callbacks, training_threads
from matching.training.config_checks import check_config
from matching.training.metrics import check_monitor, positive_index
from matching.training.question_scores import chance_warnings
from matching.training.scores import write_recorded
from matching.training.sweeps import check_sweep_processes, is_sweep_job, prior_run

log = logging.getLogger(__name__)

#: The mark of a new run that failed before its first checkpoint (see `set_aside`).
FAILED = "failed.txt"


def _resume_config(resume: str) -> tuple[DictConfig, Path]:
    """The saved config of the run to resume and its last checkpoint."""
    target = Path(resume)
    run_dir = find_run_dir(target) if target.suffix == ".ckpt" else target
    if not (run_dir / "config.yaml").exists():
        raise RunError(f"resume={resume}: no config.yaml there; give the run directory (the one holding checkpoints/)")
    ckpt = target if target.suffix == ".ckpt" else run_dir / "checkpoints" / "last.ckpt"
    if not ckpt.exists():
        raise RunError(
            f"resume={resume}: no checkpoint at {ckpt}; the run ended before its first epoch, start it again"
        )
    return upgraded(OmegaConf.load(run_dir / "config.yaml")), ckpt


def config_choices() -> dict[str, str]:
    """The option chosen in each config group (`task: wikiqa`, `aligner: coda`, ...), saved with the run so that
    reports name aligners and tasks by the names a user typed; empty when the config was not composed by Hydra."""
    if not HydraConfig.initialized():
        return {}
    choices = HydraConfig.get().runtime.choices
    return {k: v for k, v in choices.items() if v is not None and not k.startswith("hydra")}


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def numerics(cfg: DictConfig) -> str:
    """What a seed's numbers depend on besides the config and the data: the torch version, the CPU kernel set
    (PyTorch picks AVX-512 or AVX2 kernels at run time, and they round differently: a softmax over 8 to 15 entries
    is computed element by element by the AVX-512 kernels and vectorised by the AVX2 ones, and a longer one sums in
    another order; `ATEN_CPU_CAPABILITY=avx2` makes an AVX-512 machine use the AVX2 kernels), the processor (the
    same seed, code and kernel set gave other numbers on an Intel Xeon than on an AMD EPYC), the threads, the GPU,
    the arithmetic the model computes in (`dtype`, matching.model.precision) and whether denormal results are set to
    0 (`flush_denormal`)."""
    threads = torch.get_num_threads()
    parts = [f"torch {torch.__version__}", f"CPU kernels {get_cpu_capability()}"]
    if processor := cpu_model():
        parts.append(f"processor {processor}")
    parts.append(f"{threads} thread{'s' * (threads > 1)}")
    gpu = cfg.trainer.get("accelerator") in ("gpu", "cuda") and torch.cuda.is_available()
    if gpu:
        parts.append(f"GPU {torch.cuda.get_device_name()}, precision {cfg.trainer.get('precision')}")
    parts.append(f"dtype {arithmetic_summary(cfg.get('dtype', 'fp32'), 'cuda' if gpu else 'cpu')}")
    if cfg.get("deterministic"):
        parts.append("deterministic algorithms")
    if flushes_denormals():
        parts.append("denormals flushed to 0")
    return ", ".join(parts)


def cpu_model() -> str:
    """The processor's model name as the operating system gives it (Linux: /proc/cpuinfo), or "" where it does not."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        return ""


#: The loggers that need an extra: (module, extra).
LOGGER_EXTRAS = {"WandbLogger": ("wandb", "wandb"), "MLFlowLogger": ("mlflow", "mlflow"),
                 "TensorBoardLogger": ("tensorboard", "tensorboard")}  # fmt: skip


def build_loggers(cfg: DictConfig) -> list[pl.loggers.Logger] | bool:
    """The configured loggers (`logger=csv`, or several: `logger=[csv,wandb,mlflow]`), each under its own key of
    `logger`; a run saved before loggers were keyed holds one `_target_` node. False without any. A logger whose
    library is not installed is a MissingExtraError naming the extra."""
    node = cfg.get("logger")
    if not node:
        return False
    nodes = [node] if "_target_" in node else [n for n in node.values() if n is not None]
    for each in nodes:
        name = str(each._target_).rpartition(".")[2]
        if name in LOGGER_EXTRAS:
            module, extra = LOGGER_EXTRAS[name]
            check_installed(module, extra, f"logger={extra}")
    loggers = [instantiate(each) for each in nodes]
    settings = saved_form(cfg)
    for logger in loggers:  # a tracker shows the run's config beside its metrics (the CSV log has config.yaml)
        if not isinstance(logger, pl.loggers.CSVLogger):
            logger.log_hyperparams(settings)
    return loggers or False


def keep_earlier_log_rows(loggers: list[pl.loggers.Logger], resume_from: Path) -> None:
    """A resumed run's CSV log (`logs/metrics.csv`) keeps the rows of its earlier sittings up to the checkpoint it
    continues from; the resumed run writes the rest. Lightning's CSV logger deletes the file it finds
    when it starts, which left a resumed run's log, and the per-seed curves drawn from it, without its first epochs.
    Rows after that step (the part of an epoch that the interruption lost) are left out: the resumed run logs them
    again."""
    csv_loggers = [each for each in loggers if isinstance(each, pl.loggers.CSVLogger)]
    if not csv_loggers or rank_zero_only.rank != 0:
        return
    step = int(torch.load(resume_from, map_location="cpu", weights_only=False, mmap=True)["global_step"])
    for each in csv_loggers:
        path = Path(each.log_dir) / "metrics.csv"
        if not path.is_file():
            continue
        with open(path, newline="", encoding="utf-8") as f:
            # a row's step is the global step before the one it was logged after: the checkpoint's holds every
            # row written up to it
            rows = [row for row in csv.DictReader(f) if int(row["step"]) < step]
        writer = each.experiment  # made now: it deletes the file, then writes again what it is given
        for row in rows:
            writer.log_metrics({k: float(v) for k, v in row.items() if k != "step" and v != ""}, int(row["step"]))
        writer.save()
        log.info("%s: the %d rows of the earlier sittings kept (before step %d)", path, len(rows), step)


def check_metrics(cfg: DictConfig, dm) -> None:
    """Before any data is prepared: the positive label is one of the task's labels, and every callback's monitored
    metric (`task.monitor`, which checkpointing and early stopping follow) is one the run logs."""
    positive = positive_index(dm.labels, dm.task.positive_label, dm.task.kind)
    if positive is not None and dm.task.kind == "classify":
        log.info("binary metrics (f1, precision, recall, ap, auroc) are those of the label %r", dm.labels[positive])
    prefixes = [split_prefix(s) for s in dm.eval_splits]
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is not None and node.get("monitor") is not None:
            key = "task.monitor" if node.monitor == cfg.task.get("monitor") else f"callbacks.{name}.monitor"
            check_monitor(str(node.monitor), dm.task.kind, dm.labels, prefixes, key)


def train(cfg: DictConfig) -> dict[str, float]:
    """Train as configured (or resume the run named by `cfg.resume`); returns the dev (and optionally test)
    metrics of the best checkpoint. A new run that fails before its first checkpoint is set aside (`set_aside`)."""
    fresh = not cfg.get("resume") and not is_sweep_job()
    lines_once()
    try:
        with denormals_flushed(bool(cfg.get("flush_denormal", True))):  # a run saved before the key: flushed too
            return _train(cfg)
    except BaseException as err:
        if fresh and not isinstance(err, SystemExit):
            set_aside(cfg, err)
        raise


def set_aside(cfg: DictConfig, err: BaseException) -> Path | None:
    """A new run that failed before writing any checkpoint holds nothing to resume or use: its folder gets a
    `failed.txt` saying why, and leaves the runs tree (`<output_root>/runs/...` moves to `<output_root>/failed/...`,
    its train.log and config kept), so that the latest folder of `outputs/runs/<task>/<aligner>/` is always a run
    with checkpoints. A folder outside that tree (one the user named) is only marked. Returns where it is now."""
    run_dir = Path(cfg.paths.output_dir)
    if not run_dir.is_dir() or any((run_dir / "checkpoints").glob("*.ckpt")):
        return None
    why = f"{type(err).__name__}: {err}".splitlines()[0] if str(err) else type(err).__name__
    try:
        write_text_atomic(run_dir / FAILED, f"this run failed before its first checkpoint: {why}\n")
        runs = Path(cfg.paths.output_root) / "runs"
        if not run_dir.resolve().is_relative_to(runs.resolve()):
            return run_dir
        target = Path(cfg.paths.output_root) / "failed" / run_dir.resolve().relative_to(runs.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        run_dir.rename(target)  # the open train.log goes with it, and receives the rest of the log
    except OSError as move_err:  # a read-only or full disk: the folder stays where it is, as it was
        log.warning("could not set aside the failed run %s (%s)", run_dir, move_err)
        return run_dir
    log.warning("the run failed before its first checkpoint; its folder (train.log, config) is now %s", target)
    for parent in run_dir.parents:  # outputs/runs/<task>/<aligner>/ that held nothing else
        if parent.resolve() == runs.resolve() or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()
    return target


def _train(cfg: DictConfig) -> dict[str, float]:
    resume_from = None
    if cfg.get("resume"):
        cfg, resume_from = _resume_config(str(cfg.resume))
        log.info("resuming %s from %s", cfg.paths.output_dir, resume_from)
    check_config(cfg)  # before any data is read
    run_dir = Path(cfg.paths.output_dir)
    if resume_from is None:
        with open_dict(cfg):
            cfg.choices = config_choices()
        if is_sweep_job():  # a relaunched sweep finishes what an interrupted one left
            check_sweep_processes(cfg)
            prior = prior_run(cfg, run_dir)
            if prior.state == "complete":
                log.info("sweep run %s: skipped, complete (its metrics.json is for this config)", run_dir,
                         extra=CONSOLE)  # fmt: skip
                return prior.metrics
            resume_from = prior.checkpoint
            log.info("sweep run %s: %s", run_dir, f"resumed from {resume_from}" if resume_from else "started")
    pl.seed_everything(cfg.seed, workers=True)
    training_threads(cfg)
    check_writable(run_dir)
    new = resume_from is None
    if new:
        (run_dir / FAILED).unlink(missing_ok=True)  # a folder used again
    # A new run builds its vocabulary; a resumed one reads it back.
    dm = build_datamodule(cfg, vocab=None if new else Vocabulary.load(run_dir / "vocab.txt"))
    check_metrics(cfg, dm)
    if new:
        if not cfg.task.get("labels"):  # a generic task's label names, read from the data, go into config.yaml
            with open_dict(cfg):
                cfg.task.labels = list(dm.labels)
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(saved_form(cfg))))
    dm.setup("fit")
    if new:
        vectors = dm.vectors.matrix(dm.vocab, cfg.seed, cfg.paths.cache_dir)
    else:  # the checkpoint restores every weight: the vectors file is not needed
        vectors = torch.zeros(dm.vectors.table_rows(dm.vocab), dm.vectors.dim)
    model = build_model(cfg, vectors, num_classes=len(dm.labels), source=dm.vectors)
    if cfg.get("compile"):
        model.compile(mode=str(cfg.get("compile_mode") or "default"))  # in place: checkpoint keys stay the same
    # After the model (a teacher's assembly draws random numbers): with a teacher, the loss holds its logits of the
    # training pairs (computed once, cached). The second system evaluates the best checkpoint at the end.
    system, evaluation = build_systems(cfg, model, dm, run_dir)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("model: %s aligner, %s trainable parameters", type(model.aligner).__name__, f"{trainable:,}")
    log.info("numerics: %s", numerics(cfg))

    callbacks, checkpoint, timer = run_callbacks(cfg)
    if new:  # its vocabulary, examples and provenance, written once the trainer has started (RunRecord)
        callbacks.append(RunRecord(cfg, run_dir))
    logger = build_loggers(cfg)
    if resume_from is not None and logger:
        keep_earlier_log_rows(logger, resume_from)
    trainer: pl.Trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=logger,
        default_root_dir=run_dir,
        plugins=[AtomicCheckpointIO()],
        enable_progress_bar=progress_bar_shown(cfg),
    )
    try:
        trainer.fit(system, datamodule=dm, ckpt_path=resume_from)
    except SIGTERMException:  # stopped, last.ckpt written (StopCheckpoint): a failure for the scheduler, not a success
        raise SystemExit(128 + signal.SIGTERM) from None
    metrics: dict[str, float] = {
        "train_seconds": timer.fit_seconds(),  # every sitting of a resumed run (EpochTimer)
        "epochs": trainer.current_epoch,
    }
    if timer.sittings is not None:  # absent: resumed from a checkpoint that did not count the time before it
        metrics["sittings"] = timer.sittings
    if timer.seconds:
        metrics["seconds_per_epoch_median"] = statistics.median(timer.seconds)
        metrics["seconds_last_epoch"] = timer.seconds[-1]
    if trainer.fast_dev_run or not checkpoint.best_model_path:
        metrics |= _floats({k: v for k, v in trainer.callback_metrics.items() if k != "epoch"})
    else:
        best = checkpoint.best_model_path  # named: "best" would warn of two checkpoint callbacks (LastEveryEpoch)
        # Counted from 1, as people count epochs (and as the README's tables do); Lightning counts from 0.
        metrics["best_epoch"] = 1 + int(torch.load(best, map_location="cpu", weights_only=False)["epoch"])
        # The best checkpoint evaluated by a system that keeps each pair's prediction, for scores/
        # (matching.training.scores).
        for result in trainer.validate(evaluation, datamodule=dm, ckpt_path=best, verbose=False):
            metrics |= _floats(result)
        if cfg.test and dm.test_splits:
            for result in trainer.test(evaluation, datamodule=dm, ckpt_path=best, verbose=False):
                metrics |= _floats(result)
        if trainer.is_global_zero:
            write_recorded(run_dir, evaluation.recorded, dm, evaluation.labels, evaluation.kind)
            if evaluation.kind == "rank":
                for warning in chance_warnings(dm.task.name, evaluation.recorded, metrics):
                    log.warning(warning)
    if trainer.is_global_zero:
        write_json(run_dir / "metrics.json", metrics)
        shown = {k: round(v, 4) for k, v in metrics.items() if "/" in k}
        log.info("run dir %s; best checkpoint metrics %s", run_dir, shown)
        log.info("%s", result_line(cfg, metrics, run_dir), extra=CONSOLE)
    return metrics


def result_line(cfg: DictConfig, metrics: dict[str, float], run_dir: Path) -> str:
    """A run's result in one console line: its monitored dev metric at the best epoch, the epochs and minutes, and
    where the run is (metrics.json holds the rest)."""
    monitor = str(cfg.task.get("monitor") or "")
    parts = [f"{monitor} {metrics[monitor]:.4f}" if monitor in metrics else "no dev score"]
    if "best_epoch" in metrics:
        parts.append(f"best epoch {int(metrics['best_epoch'])} of {int(metrics.get('epochs', 0))}")
    parts.append(f"{metrics.get('train_seconds', 0.0):.0f} s")
    return f"done: {', '.join(parts)}; {run_dir}"
