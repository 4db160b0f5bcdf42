"""Studies on a cluster: launchers (submitit, Ray), resumable sweeps, a signalled run's checkpoint, the report of an
unfinished sweep, and multi-node DDP."""

import csv
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from conftest import CONF, ROOT, SUBPROCESS_ENV, big_snli, cli_overrides, compose_train, evaluate
from hydra import compose, initialize_config_dir

from matching import report as report_module
from matching import train as train_module
from matching.results.discovery import find_runs
from matching.results.tables import summarise, to_markdown
from matching.training import run as training

HAS_SUBMITIT = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is not None
HAS_RAY = importlib.util.find_spec("ray") is not None


def _launcher(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    return cfg.hydra.launcher


@pytest.mark.skipif(not HAS_SUBMITIT, reason="hydra-submitit-launcher not installed (the cluster extra)")
def test_slurm_launcher_has_our_defaults_and_takes_partition_and_account():
    launcher = _launcher("hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.account=nlp")
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.cpus_per_task, launcher.timeout_min) == (1, 4, 240)
    assert (launcher.partition, launcher.account) == ("gpu", "nlp")
    with_dir = _launcher("hydra/launcher=slurm", "hydra.sweep.dir=/shared/study")
    assert with_dir.submitit_folder == "/shared/study/.submitit/%j"  # the jobs' logs, beside the runs
    assert launcher.max_num_timeout > 0  # a job at its time limit is requeued, and resumes
    with pytest.raises(Exception, match="partiton"):  # validated against the plugin's schema: a typo is an error
        _launcher("hydra/launcher=slurm", "hydra.launcher.partiton=gpu")
    local = _launcher("hydra/launcher=submitit_local")
    assert local._target_.endswith("submitit_launcher.LocalLauncher") and local.cpus_per_task == 1


def test_ray_launcher_defaults_to_a_local_cluster_with_resources_per_job():
    launcher = _launcher("hydra/launcher=ray", "hydra.launcher.num_gpus=1", "hydra.launcher.address=auto")
    assert launcher._target_ == "hydra_plugins.matching_ray_launcher.ray_launcher.RayLauncher"
    assert (launcher.address, launcher.num_cpus, launcher.num_gpus) == ("auto", 1, 1)
    assert _launcher("hydra/launcher=ray").address is None  # null: a local cluster started for the sweep


@pytest.mark.parametrize(("option", "extra"), [("hydra/launcher=slurm", "cluster"), ("hydra/launcher=ray", "ray"),
                                               ("hydra/launcher=submitit_local", "cluster")])  # fmt: skip
def test_a_missing_launcher_plugin_names_its_extra(option, extra, tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    hidden = ("ray", "hydra_plugins.hydra_submitit_launcher")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a))
    assert train_module.main(["-m", option, *cli_overrides(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {option} needs ") and f'pip install -e ".[{extra}]"' in err
    assert "Traceback" not in err and not (tmp_path / "multirun").exists()


def test_the_slurm_launcher_off_a_slurm_cluster_is_a_users_mistake(tmp_path, monkeypatch, capsys):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun on this machine's path
    argv = ["-m", "hydra/launcher=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}", *cli_overrides(tmp_path)]
    assert train_module.main(argv) == 2
    err = capsys.readouterr().err
    assert "needs a SLURM cluster" in err and "Traceback" not in err


class SignalAt(pl.Callback):
    """Sends the process `signal` during training step `step` (a scheduler's warning, in a test)."""

    def __init__(self, step: int, signal: str) -> None:
        self.step, self.signal = step, signal

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), getattr(signal, self.signal))


class Requeued(Exception):
    pass


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGTERM"])
def test_a_signalled_run_writes_last_ckpt_at_that_step_then_stops(make_cfg, name, monkeypatch):
    """SLURM's warning (SIGUSR1/2) and SIGTERM (preemption, Ray, scancel) stop the run after the current step with
    last.ckpt written first (epoch 0 has 3 steps: no epoch-end checkpoint exists yet); for SIGUSR1 the handler that
    was there before (here one standing for submitit's requeue) runs after it."""

    def requeue(signum, frame):
        raise Requeued

    previous = signal.signal(signal.SIGUSR1, requeue)
    try:
        cfg = make_cfg("trainer.max_epochs=3", f"+callbacks.signal._target_={__name__}.SignalAt",
                       "+callbacks.signal.step=1", f"+callbacks.signal.signal={name}")  # fmt: skip
        with pytest.raises(Requeued if name == "SIGUSR1" else SystemExit) as stopped:
            training.train(cfg)
        assert signal.getsignal(signal.SIGUSR1) is requeue  # our handler is gone again
    finally:
        signal.signal(signal.SIGUSR1, previous)
    if name == "SIGTERM":
        assert stopped.value.code == 128 + signal.SIGTERM  # a stopped run is a failure for the scheduler
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    state = torch.load(last, weights_only=False)
    assert state["global_step"] == 2 and state["epoch"] == 0
    assert not (Path(cfg.paths.output_dir) / "metrics.json").exists()
    assert training.train(make_cfg(f"resume={cfg.paths.output_dir}"))["epochs"] == 3  # continues from that step


@pytest.mark.parametrize("capture", ["false", "true"])
def test_a_run_stopped_mid_epoch_by_a_signal_resumes_to_the_uninterrupted_result(tmp_path, capture):
    """Stopped (SIGTERM) after step 2 of epoch 0's 3 and resumed, a deterministic run trains on exactly the
    batches it had not seen, in the same order, with the same dropout: the weights, dev metrics and the training
    accuracy of the interrupted epoch equal those of a run never stopped; likewise with the whole step ours
    (capture=true, matching.training.replay)."""
    common = ("trainer.max_epochs=2", "deterministic=true", "callbacks.early_stopping=null", "seed=4",
              f"capture={capture}")  # fmt: skip
    reference = training.train(compose_train(tmp_path / "whole", *common))
    stopped = compose_train(tmp_path / "stopped", *common, f"+callbacks.signal._target_={__name__}.SignalAt",
                            "+callbacks.signal.step=1", "+callbacks.signal.signal=SIGTERM")  # fmt: skip
    with pytest.raises(SystemExit):
        training.train(stopped)
    resumed = training.train(compose_train(tmp_path / "stopped", f"resume={stopped.paths.output_dir}"))
    untimed = lambda metrics: {k: v for k, v in metrics.items() if "seconds" not in k and k != "sittings"}  # noqa: E731
    assert untimed(resumed) == untimed(reference) and "val/loss" in resumed
    assert (reference["sittings"], resumed["sittings"]) == (1, 2)

    def weights(cfg_dir: Path, name: str) -> dict:
        return torch.load(cfg_dir / "run" / "checkpoints" / name, weights_only=False)["state_dict"]

    for name in ("last.ckpt", "best.ckpt"):
        a, b = weights(tmp_path / "whole", name), weights(tmp_path / "stopped", name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    logged = [
        [row["train/acc"] for row in csv.DictReader(open(next((d / "run").rglob("metrics.csv")))) if row["train/acc"]]
        for d in (tmp_path / "whole", tmp_path / "stopped")
    ]
    assert logged[0] == logged[1] and len(logged[0]) == 2


class SignalInValidation(pl.Callback):
    """Sends the process SIGTERM during the first batch of the dev validation at the end of epoch `epoch` (0-based),
    once: not again when `mark` exists (the resumed run repeats that epoch)."""

    def __init__(self, epoch: int, mark: str) -> None:
        self.epoch, self.mark = epoch, Path(mark)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking and trainer.current_epoch == self.epoch:
            if batch_idx == 0 and not self.mark.exists():
                self.mark.touch()
                os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("epoch", [1, 2])
def test_a_run_stopped_during_its_validation_resumes_to_the_uninterrupted_result(tmp_path, epoch):
    """SIGTERM in the first of the dev split's batches at the end of the second or the last epoch: Lightning stops the
    validation there, and a checkpoint written then resumed as if the validation had finished, without the epoch's
    dev score, so early stopping failed ('conditioned on metric val/acc which is not available', a SciTail run of the
    study). Now no checkpoint is written then; last.ckpt stays the previous epoch's end, and the resumed run repeats
    the epoch and equals one never stopped."""
    common = ("trainer.max_epochs=3", "deterministic=true", "seed=4", "data.eval_batch_size=2")
    reference = training.train(compose_train(tmp_path / "whole", *common))
    signal_at = (f"+callbacks.signal._target_={__name__}.SignalInValidation", f"+callbacks.signal.epoch={epoch}",
                 f"+callbacks.signal.mark={tmp_path / 'signalled'}")  # fmt: skip
    stopped = compose_train(tmp_path / "stopped", *common, *signal_at)
    with pytest.raises(SystemExit):
        training.train(stopped)
    last = torch.load(Path(stopped.paths.output_dir) / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 3 * epoch  # the previous epoch's end (an epoch is 3 steps)
    resumed = training.train(compose_train(tmp_path / "stopped", f"resume={stopped.paths.output_dir}"))
    untimed = lambda metrics: {k: v for k, v in metrics.items() if "seconds" not in k and k != "sittings"}  # noqa: E731
    assert untimed(resumed) == untimed(reference) and resumed["sittings"] == 2


def test_last_ckpt_is_written_at_every_epoch_end_not_only_beside_a_new_best(make_cfg):
    """With the weights held still (lr 0) no epoch after the first improves its dev score; last.ckpt is still
    the last epoch's (Lightning 2.6 writes the checkpoint callback's copy only beside a new best, which left it at
    the best epoch: a resumed run trained every epoch since again)."""
    cfg = make_cfg("trainer.max_epochs=3", "optim.lr=0", "callbacks.early_stopping=null")
    metrics = training.train(cfg)
    checkpoints = Path(cfg.paths.output_dir) / "checkpoints"
    assert metrics["best_epoch"] == 1 and torch.load(checkpoints / "best.ckpt", weights_only=False)["epoch"] == 0
    last = torch.load(checkpoints / "last.ckpt", weights_only=False)
    assert last["epoch"] == 2 and last["global_step"] == 9
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.ckpt", "last.ckpt"]  # no last-v1.ckpt beside it


def test_a_resumed_run_counts_every_sitting_and_keeps_the_earlier_log_rows(make_cfg, caplog):
    """Stopped in its second epoch (SIGTERM after step 4; an epoch is 3 steps) and resumed, a run's train_seconds
    adds the first sitting's (the checkpoint's `timing`) to its own, its per-epoch seconds keep the first epoch's,
    its CSV log keeps the first epoch's rows (Lightning's logger deletes the file it finds), and the epoch line
    compares with the best so far of before the interruption."""
    common = ("trainer.max_epochs=3", "optim.lr=0", "callbacks.early_stopping=null")
    cfg = make_cfg(*common, f"+callbacks.signal._target_={__name__}.SignalAt", "+callbacks.signal.step=4",
                   "+callbacks.signal.signal=SIGTERM")  # fmt: skip
    with pytest.raises(SystemExit):
        training.train(cfg)
    run_dir = Path(cfg.paths.output_dir)
    timing = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["timing"]
    assert len(timing["epoch_seconds"]) == 1 and timing["fit_seconds"] > sum(timing["epoch_seconds"]) > 0
    caplog.clear()
    with caplog.at_level("INFO", logger="matching.training.callbacks"):
        metrics = training.train(make_cfg(f"resume={run_dir}"))
    assert metrics["epochs"] == 3 and metrics["train_seconds"] > timing["fit_seconds"] and metrics["sittings"] == 2
    assert metrics["seconds_per_epoch_median"] > 0  # epoch 1's (restored) and epoch 3's; epoch 2 resumed mid-way
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert lines and all("(best)" not in line for line in lines), lines  # lr 0: no epoch beats the first
    assert lines[0].startswith("epoch 2/3") and lines[0].endswith("resumed in this epoch"), lines  # not "0.0 s"
    assert lines[1].startswith("epoch 3/3") and lines[1].endswith(" s"), lines
    rows = list(csv.DictReader(open(run_dir / "logs" / "metrics.csv")))
    validated = [(float(row["epoch"]), int(row["step"])) for row in rows if row.get("val/acc")]
    # each epoch's dev score once (the first sitting's, then the resumed run's), then the best checkpoint's
    assert validated == [(1.0, 2), (2.0, 5), (3.0, 8), (1.0, 9)], validated


# A grid sweep in this process (the basic launcher), relaunched as a user would after an interruption.
def _sweep(tmp_path: Path, sweep_dir: Path, *extra: str) -> int:
    argv = ["-m", "aligner=softmax,coda", "seed=1", "trainer.max_epochs=2", f"hydra.sweep.dir={sweep_dir}",
            *cli_overrides(tmp_path), *extra]  # fmt: skip
    return train_module.main(argv)


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in folder.glob("*.ckpt")}


def test_a_relaunched_sweep_skips_finished_runs_resumes_interrupted_ones_and_starts_the_rest(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert _sweep(tmp_path, sweep) == 0
    said = capsys.readouterr().out
    assert f"sweep folder {sweep}; if the sweep is interrupted, relaunch this command to finish it" in said
    assert f"sweep {sweep}: 2 of 2 runs complete; results: python -m matching.report runs={sweep}" in said
    first, second = sweep / "0_snli_softmax_seed1", sweep / "1_snli_coda_seed1"
    reference = json.loads(second.joinpath("metrics.json").read_text())
    kept = _files(first / "checkpoints")
    # The second run as a kill before its metrics were written leaves it (a mid-run kill: the slow test below)
    (second / "metrics.json").unlink()
    assert _sweep(tmp_path, sweep) == 0
    assert _files(first / "checkpoints") == kept  # not retrained, not rewritten
    assert "skipped, complete" in (first / "train.log").read_text()
    assert "resumed from" in (second / "train.log").read_text()
    resumed = json.loads(second.joinpath("metrics.json").read_text())
    assert {k: v for k, v in resumed.items() if "seconds" not in k and k != "sittings"} == {
        k: v for k, v in reference.items() if "seconds" not in k and k != "sittings"
    }
    # A run that never wrote a checkpoint starts again
    for path in (second / "checkpoints").iterdir():
        path.unlink()
    (second / "metrics.json").unlink()
    assert _sweep(tmp_path, sweep) == 0
    said = [line for line in (second / "train.log").read_text().splitlines() if "sweep run" in line]
    assert [line.rsplit(": ", 1)[-1].split()[0] for line in said] == ["started", "resumed", "started"]
    assert (second / "metrics.json").exists()
    capsys.readouterr()
    # The same sweep folder with another config: an error naming the key, nothing overwritten
    assert _sweep(tmp_path, sweep, "model.hidden=8") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "model.hidden: 16 -> 8" in err and "hydra.sweep.dir" in err
    assert _files(first / "checkpoints") == kept


def test_a_sweep_job_that_would_start_ddp_processes_itself_is_a_clear_error(tmp_path, capsys):
    assert _sweep(tmp_path, tmp_path / "sweep", "trainer=ddp", "trainer.devices=2") == 2
    err = capsys.readouterr().err
    assert "running the whole sweep again" in err and "tasks_per_node" in err
    assert not list((tmp_path / "sweep").glob("*/checkpoints"))


def _write_run(folder: Path, seed: int, aligner: str, value: float | None) -> None:
    (folder / ".hydra").mkdir(parents=True)
    config = {"task": {"name": "snli", "report_metrics": ["acc"], "monitor": "val/acc"}, "seed": seed,
              "aligner": {"_target_": "x.Y"}, "choices": {"task": "snli", "aligner": aligner}}  # fmt: skip
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"aligner={aligner}", f"seed={seed}"]))
    if value is not None:
        (folder / "metrics.json").write_text(json.dumps({"val/acc": value}))


def test_report_shows_a_failed_or_never_started_seed_as_missing(tmp_path, capsys):
    """A 2 aligners x 3 seeds sweep folder as a cluster leaves it: coda seed 2 failed (config.yaml, no metrics),
    coda seed 3 never started (no folder). The coda row averages seed 1 only and says so; softmax is whole."""
    sweep = tmp_path / "sweep"
    multirun = {"hydra": {"overrides": {"task": ["aligner=softmax,coda", "seed=1,2,3"]}, "sweeper": {"params": None},
                          "runtime": {"choices": {"task": "snli", "aligner": "softmax", "hydra/sweeper": "basic"}}},
                "task": {"name": "snli"}, "seed": 1}  # fmt: skip
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(multirun))
    for n, (aligner, seed, value) in enumerate([("softmax", 1, 0.5), ("softmax", 2, 0.6), ("softmax", 3, 0.7),
                                                ("coda", 1, 0.8), ("coda", 2, None)]):  # fmt: skip
        _write_run(sweep / f"{n}_snli_{aligner}_seed{seed}", seed, aligner, value)
    rows = {r.aligner: r for r in summarise(find_runs([sweep]))}
    assert (rows["softmax"].n, rows["softmax"].planned, rows["softmax"].missing) == (3, 3, {})
    assert rows["softmax"].mean == 60.0
    coda = rows["coda"]
    assert (coda.n, coda.planned, coda.mean, coda.seeds) == (1, 3, 80.0, (1,))
    assert coda.missing[2].startswith("no metrics.json: failed") and coda.missing[3] == "not started"
    assert report_module.main([f"runs={sweep}", f"out={tmp_path}"]) == 0
    printed = capsys.readouterr()
    assert "| snli | coda | – | dev | acc | 80.00 (n = 1) | 1 of 3 |" in printed.out  # one seed: no std
    assert "seed 3 (not started)" in printed.out and "4 runs (2 missing)" in printed.out
    with open(tmp_path / "report.csv") as table:
        assert {r["aligner"]: r["missing"] != "" for r in csv.DictReader(table)} == {"softmax": False, "coda": True}


def test_report_counts_a_seed_run_again_in_another_sweep_once(tmp_path, capsys):
    """A sweep stopped after seed 1 (seeds 2 and 3 never started, seed 2 left unfinished), its other seeds run as a
    second sweep: the row has 3 seeds and nothing missing, and the summary says what was counted once."""
    first, second = tmp_path / "first", tmp_path / "second"
    for sweep, seeds in ((first, "1,2,3"), (second, "2,3")):
        multirun = {"hydra": {"overrides": {"task": ["aligner=coda", f"seed={seeds}"]}, "sweeper": {"params": None},
                              "runtime": {"choices": {"task": "snli", "aligner": "coda", "hydra/sweeper": "basic"}}},
                    "task": {"name": "snli"}, "seed": 1}  # fmt: skip
        sweep.mkdir()
        (sweep / "multirun.yaml").write_text(yaml.safe_dump(multirun))
    _write_run(first / "0_snli_coda_seed1", 1, "coda", 0.5)
    _write_run(first / "1_snli_coda_seed2", 2, "coda", None)  # interrupted: config, no metrics
    _write_run(second / "0_snli_coda_seed2", 2, "coda", 0.6)
    _write_run(second / "1_snli_coda_seed3", 3, "coda", 0.7)
    superseded = []
    (row,) = summarise(find_runs([first, second], superseded=superseded))
    assert (row.n, row.planned, row.missing, row.mean) == (3, 3, {}, 60.0)
    assert sorted(r.seed for r in superseded) == [2, 3]
    assert report_module.main([f"runs=[{first},{second}]", f"out={tmp_path / 'out'}"]) == 0
    printed = capsys.readouterr().out
    summary = printed.splitlines()[-1]
    assert summary.startswith("3 runs; 2 unfinished jobs of a sweep run again elsewhere") and "missing" not in summary
    # Alone, the stopped sweep still shows its gaps
    (alone,) = summarise(find_runs([first]))
    assert alone.n == 1 and "seed 2 (no metrics.json" in alone.missing_text()
    assert "seed 3 (not started)" in alone.missing_text()


def test_the_training_command_pickles_by_value_as_a_sweep_launcher_sends_it():
    """`python -m matching.train -m hydra/launcher=submitit_*` runs the module as __main__, whose functions submitit
    pickles by value (cloudpickle), with everything they reach; a module attribute it cannot pickle breaks every
    SLURM sweep at submission (as `torch.backends.cpu.get_cpu_capability()` did)."""
    cloudpickle = pytest.importorskip("cloudpickle")
    cloudpickle.register_pickle_by_value(train_module)
    try:
        assert cloudpickle.loads(cloudpickle.dumps(train_module.train_command)).__name__ == "train_command"
    finally:
        cloudpickle.unregister_pickle_by_value(train_module)


# Slow: the launchers against the basic one, a SIGKILLed sweep, multi-node DDP.
SWEEP = ["aligner=softmax,coda", "seed=1,2", "trainer.max_epochs=2", "deterministic=true"]


def _run_sweep(tmp_path: Path, sweep_dir: Path, *extra: str, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "matching.train", "-m", *SWEEP, f"hydra.sweep.dir={sweep_dir}",
           *cli_overrides(tmp_path), *extra]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _outcome(sweep_dir: Path, tmp_path: Path) -> tuple[dict, str]:
    """The run folders with their metrics (timings and sittings aside), and the report's table."""
    runs = {}
    for metrics_file in sorted(sweep_dir.glob("*/metrics.json")):
        metrics = json.loads(metrics_file.read_text())
        runs[metrics_file.parent.name] = {k: v for k, v in metrics.items() if "seconds" not in k and k != "sittings"}
    return runs, to_markdown(summarise(find_runs([sweep_dir])))


@pytest.fixture(scope="module")
def basic_sweep(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("basic")
    _run_sweep(tmp_path, tmp_path / "sweep")
    return _outcome(tmp_path / "sweep", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SUBMITIT, reason="hydra-submitit-launcher not installed (the cluster extra)")
def test_submitit_local_sweep_equals_the_basic_launchers(basic_sweep, tmp_path):
    started = time.perf_counter()
    _run_sweep(tmp_path, tmp_path / "sweep", "hydra/launcher=submitit_local")
    runs, table = _outcome(tmp_path / "sweep", tmp_path)
    assert len(runs) == 4 and runs == basic_sweep[0]
    assert table == basic_sweep[1]
    assert list((tmp_path / "sweep" / ".submitit").glob("*/*_log.err"))  # the jobs' logs, under the sweep folder
    print(f"\nsubmitit_local sweep of 4 runs: {time.perf_counter() - started:.0f} s")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_RAY, reason="ray not installed (the ray extra: pip install -e '.[ray]')")
def test_ray_sweep_on_a_local_cluster_equals_the_basic_launchers(basic_sweep, tmp_path):
    started = time.perf_counter()
    _run_sweep(tmp_path, tmp_path / "sweep", "hydra/launcher=ray", "hydra.launcher.init.num_cpus=2")
    runs, table = _outcome(tmp_path / "sweep", tmp_path)
    assert len(runs) == 4 and runs == basic_sweep[0]
    assert table == basic_sweep[1]
    print(f"\nRay sweep of 4 runs on a local 2-CPU cluster: {time.perf_counter() - started:.0f} s")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_RAY, reason="ray not installed (the ray extra: pip install -e '.[ray]')")
def test_a_ray_job_with_a_users_mistake_fails_the_sweep_with_its_message(tmp_path):
    cmd = [sys.executable, "-m", "matching.train", "-m", "seed=1", "optim.lr=abc", "hydra/launcher=ray",
           "hydra.launcher.init.num_cpus=1", f"hydra.sweep.dir={tmp_path}/sweep", *cli_overrides(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2  # not retried by Ray as a lost worker, not a traceback
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sweep job #0 (") and "failed: optim.lr='abc': expected a number" in last


@pytest.mark.slow
def test_a_sigkilled_sweep_relaunched_with_the_same_command_completes_as_an_uninterrupted_one(tmp_path):
    train_file = big_snli(tmp_path / "train.jsonl", copies=80)  # 960 pairs: 240 steps per epoch
    args = [f"task.splits.train.path={train_file}", "trainer.max_epochs=3", "callbacks.early_stopping=null"]
    straight = tmp_path / "straight"
    _run_sweep(tmp_path, straight, *args)
    reference, reference_table = _outcome(straight, tmp_path)

    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "matching.train", "-m", *SWEEP, f"hydra.sweep.dir={sweep}",
           *cli_overrides(tmp_path), *args]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    third = sweep / "2_snli_coda_seed1"
    deadline = time.time() + 600
    while not (third / "checkpoints" / "last.ckpt").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, half-way through the third run
    assert proc.wait() == -signal.SIGKILL
    finished = sorted(p.parent.name for p in sweep.glob("*/metrics.json"))
    assert finished == ["0_snli_softmax_seed1", "1_snli_softmax_seed2"]
    assert torch.load(third / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] < 3
    kept = {name: _files(sweep / name / "checkpoints") for name in finished}

    done = _run_sweep(tmp_path, sweep, *args)  # the same command again
    runs, table = _outcome(sweep, tmp_path)
    assert {name: _files(sweep / name / "checkpoints") for name in finished} == kept  # not retrained
    assert "skipped, complete" in (sweep / finished[0] / "train.log").read_text()
    assert "resumed from" in (third / "train.log").read_text()
    assert "sweep run" in done.stderr + done.stdout
    assert runs == reference  # deterministic=true: the resumed run ends where the uninterrupted one did
    assert table == reference_table


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_of_one_process_each_match_a_single_process_evaluation(tmp_path):
    """The multi-node recipe of docs/how-to/cluster.md on one machine: the same command on each node, with MASTER_ADDR,
    MASTER_PORT, NODE_RANK and WORLD_SIZE set (here both nodes are 127.0.0.1, one process each)."""
    run = tmp_path / "two_nodes"
    cmd = [sys.executable, "-m", "matching.train", *cli_overrides(tmp_path), f"hydra.run.dir={run}", "task=wikiqa",
           "trainer=ddp", "trainer.devices=1", "trainer.num_nodes=2", "data.batch_size=4", "data.eval_batch_size=3",
           "trainer.max_epochs=3", "seed=2"]  # fmt: skip
    port = str(_free_port())
    nodes = [
        subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=SUBPROCESS_ENV
            | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "NODE_RANK": str(rank)},
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=900)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    # The second node joined the group: Lightning says so in the log, which the console leaves to train.log (both
    # nodes' run folder is this one here, on one machine)
    log = (run / "train.log").read_text()
    assert "GLOBAL_RANK: 1" in log and "MEMBER: 2/2" in log
    distributed = json.loads((run / "metrics.json").read_text())
    single = evaluate(run / "checkpoints" / "best.ckpt", "dev", out=str(tmp_path / "single.json"))
    assert distributed["val/questions"] == 3
    for key in ("val/map", "val/mrr", "val/map_raw", "val/mrr_raw", "val/top1", "val/questions", "val/loss"):
        assert distributed[key] == pytest.approx(single[key], abs=1e-6), key
    print(f"\n2 nodes x 1 process {distributed['val/map']:.6f}/{distributed['val/mrr']:.6f} vs single "
          f"{single['val/map']:.6f}/{single['val/mrr']:.6f} over {int(single['val/questions'])} questions")  # fmt: skip


def test_a_failed_submitit_job_is_one_paragraph_with_its_error_and_logs():
    from matching.cli import sweep_job_error

    class UncompletedJobError(RuntimeError):  # as submitit raises it when a job exits without a result
        __module__ = "submitit.core.utils"

    err = UncompletedJobError(
        "Job 11729 (task: 0) with path /s/.submitit/11729/11729_0_result.pkl\nhas not produced any output (state: "
        "FINISHED)\nError stream produced:\n----\nerror: optim.lr='abc': expected a number (the default is 0.001)\n"
    )
    message = str(sweep_job_error(err))
    assert message.startswith("a sweep job failed: optim.lr='abc': expected a number")
    assert "Its logs: /s/.submitit/11729/." in message and "\n" not in message


@pytest.mark.slow
def test_a_signal_to_one_ddp_process_stops_both_at_the_same_step_with_last_ckpt_written(tmp_path):
    """SLURM's warning may reach the processes of a job a step apart: they agree at the next check, write one
    last.ckpt of that step, and both stop (none is left waiting for the other); resume= then finishes the run."""
    train_file = big_snli(tmp_path / "train.jsonl", copies=100)  # 1,200 pairs: 150 steps per process and epoch
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "matching.train", *cli_overrides(tmp_path), f"hydra.run.dir={run}",
           f"task.splits.train.path={train_file}", "trainer=ddp", "trainer.devices=2", "trainer.max_epochs=3",
           "trainer.log_every_n_steps=10", "callbacks.early_stopping=null"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env=SUBPROCESS_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    last = run / "checkpoints" / "last.ckpt"
    deadline = time.time() + 600
    while not last.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)  # rank 0 only
    try:
        err, _ = proc.communicate(timeout=120)  # stdout and stderr together
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGUSR1, err[-3000:]
    state = torch.load(last, weights_only=False)
    assert state["global_step"] % 10 == 0 and state["global_step"] % 150 != 0, state["global_step"]  # mid-epoch
    assert "received SIGUSR1: wrote" in err
    for _ in range(100):  # the other process stops too (it is not waiting for rank 0 in a collective)
        leftover = subprocess.run(["ps", "-o", "pid,stat,etime,cmd", "-s", str(proc.pid)], capture_output=True,
                                  text=True).stdout.splitlines()[1:]  # fmt: skip
        if not leftover:
            break
        time.sleep(0.1)
    assert not leftover, leftover
    resume = subprocess.run([sys.executable, "-m", "matching.train", f"resume={run}",
                             f"hydra.run.dir={tmp_path / 'resume_log'}"],
                            cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert resume.returncode == 0, resume.stderr[-3000:]
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3
