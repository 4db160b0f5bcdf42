"""Faults, determinism and multi-process training: kill and resume, NaN loss, atomic writes, DDP parity."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, SUBPROCESS_ENV, big_snli, cli_overrides, evaluate

from matching.saved.run_folder import load_run
from matching.training.batching import BucketBatchSampler
from matching.training.build import AtomicCheckpointIO
from matching.training.callbacks import NonFiniteLossError
from matching.training.run import train

ENV = SUBPROCESS_ENV


def _cli(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "matching.train",
        *cli_overrides(run_dir.parent),
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_reaches_the_uninterrupted_metrics(tmp_path):
    train_file = big_snli(tmp_path / "train.jsonl", copies=250)  # 3,000 pairs: 750 steps per epoch
    args = [f"task.splits.train.path={train_file}", "data.batch_size=4", "trainer.max_epochs=4",
            "deterministic=true", "seed=3", "callbacks.early_stopping=null"]  # fmt: skip
    straight = tmp_path / "straight"
    done = subprocess.run(_cli(straight, *args), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = json.loads((straight / "metrics.json").read_text())

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        _cli(killed, *args), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    last = killed / "checkpoints" / "last.ckpt"
    deadline = time.time() + 600
    while not last.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5 * reference["seconds_per_epoch_median"])  # well inside the second epoch
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not (killed / "metrics.json").exists()
    assert torch.load(last, weights_only=False)["epoch"] < 3  # it really was interrupted before the end
    load_run(last)  # the checkpoint left behind is whole

    resume = subprocess.run(
        [sys.executable, "-m", "matching.train", f"resume={killed}", f"hydra.run.dir={tmp_path / 'resume_log'}"],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert resume.returncode == 0, resume.stderr[-3000:]
    resumed = json.loads((killed / "metrics.json").read_text())
    for key in ("val/acc", "val/loss", "best_epoch", "epochs"):
        assert resumed[key] == reference[key], key
    killed_at = torch.load(last, weights_only=False)["epoch"]
    print(f"\nkilled after epoch {killed_at}; uninterrupted {reference['val/acc']:.6f}/{reference['val/loss']:.6f}, "
          f"resumed {resumed['val/acc']:.6f}/{resumed['val/loss']:.6f}")  # fmt: skip


def test_resume_of_a_run_without_checkpoint_is_a_clear_error(make_cfg, tmp_path):
    from matching.errors import RunError

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.yaml").write_text("seed: 1\n")
    with pytest.raises(RunError, match="no checkpoint at"):
        train(make_cfg(f"resume={tmp_path / 'empty'}"))
    with pytest.raises(RunError, match="no config.yaml there"):
        train(make_cfg(f"resume={tmp_path}"))


def test_nan_loss_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint(make_cfg, monkeypatch):
    import matching.training.system as system_module

    real = system_module.F.cross_entropy
    calls = {"n": 0}

    def poisoned(logits, target, *args, **kwargs):
        loss = real(logits, target, *args, **kwargs)
        if logits.requires_grad:  # training steps only
            calls["n"] += 1
            if calls["n"] > 4:  # epoch 1 has 3 steps: it completes and is checkpointed; epoch 2 fails
                return loss * float("nan")
        return loss

    monkeypatch.setattr(system_module.F, "cross_entropy", poisoned)
    cfg = make_cfg("trainer.max_epochs=5")
    with pytest.raises(NonFiniteLossError, match=r"became nan at global step 4 \(epoch 2, batch 1\)") as err:
        train(cfg)
    last = Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"
    assert str(last) in str(err.value)
    monkeypatch.setattr(system_module.F, "cross_entropy", real)
    assert "val/acc" in evaluate(last)  # the kept checkpoint is usable


def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 1}, target)

    def killed_midway(obj, path, *args, **kwargs):
        Path(path).write_bytes(b"half a checkpo")
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(torch, "save", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"epoch": 2}, target)
    monkeypatch.undo()
    assert torch.load(target, weights_only=False)["epoch"] == 1  # the previous checkpoint is intact


def test_same_seed_is_identical_and_different_seeds_differ(make_cfg, tmp_path):
    runs = [train(make_cfg("trainer.max_epochs=2", "deterministic=true", f"seed={s}")) for s in (5, 5, 6)]
    assert runs[0]["val/loss"] == runs[1]["val/loss"]
    assert runs[0]["val/loss"] != runs[2]["val/loss"]


def test_distributed_evaluation_shards_whole_questions_without_repeats():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), rng.integers(1, 12, size=40))
    lengths = rng.integers(3, 40, size=len(groups))
    seen = []
    for rank in range(3):
        batches = list(BucketBatchSampler(lengths, 8, shuffle=False, num_replicas=3, rank=rank, groups=groups))
        mine = [i for b in batches for i in b]
        assert len(batches) == len(BucketBatchSampler(lengths, 8, False, num_replicas=3, rank=rank, groups=groups))
        seen.append(set(mine))
        for g in set(groups[mine]):  # every question this rank holds, it holds whole
            assert set(np.flatnonzero(groups == g)) <= set(mine)
    assert sum(len(s) for s in seen) == len(groups) and set().union(*seen) == set(range(len(groups)))


def test_distributed_training_shards_have_equal_step_counts():
    lengths = np.random.default_rng(1).integers(3, 40, size=101)
    shards = [list(BucketBatchSampler(lengths, 10, True, seed=2, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == 6
    assert {i for shard in shards for b in shard for i in b} == set(range(101))


@pytest.mark.slow
def test_ddp_two_cpu_processes_match_single_process_ranking_metrics(tmp_path):
    run = tmp_path / "ddp"
    cmd = _cli(run, "task=wikiqa", "trainer=ddp", "trainer.devices=2", "data.batch_size=4", "data.eval_batch_size=3",
               "trainer.max_epochs=3", "seed=2")  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    distributed = json.loads((run / "metrics.json").read_text())
    single = evaluate(run / "checkpoints" / "best.ckpt", "dev", out=str(tmp_path / "single.json"))
    assert distributed["val/questions"] == 3
    for key in ("val/map", "val/mrr", "val/map_raw", "val/mrr_raw", "val/top1", "val/questions", "val/loss"):
        assert distributed[key] == pytest.approx(single[key], abs=1e-6), key
    assert (run / "train_ddp_process_1.log").exists()  # two processes really ran
    print(f"\nDDP {distributed['val/map']:.6f}/{distributed['val/mrr']:.6f} vs single {single['val/map']:.6f}/"
          f"{single['val/mrr']:.6f} over {int(single['val/questions'])} questions")  # fmt: skip


@pytest.mark.parametrize("capture", ["false", "true"])
def test_a_nan_loss_is_reported_as_one_paragraph(tmp_path, capsys, capture):
    """From the command line too: the step, the kept checkpoint and what to change; exit 2, no traceback; likewise
    with the whole step ours (capture=true), whose loss the guard sees after the update."""
    from conftest import cli_overrides

    from matching.train import main

    argv = [*cli_overrides(tmp_path), f"hydra.run.dir={tmp_path / 'run'}", "optim.lr=1e30", "trainer.max_epochs=3",
            "data.batch_size=2", "model.dropout=0.0", f"capture={capture}"]  # fmt: skip
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "training loss became" in err and "Traceback" not in err
