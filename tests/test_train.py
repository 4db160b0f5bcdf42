"""Smoke and learning tests: the whole training system on fixture corpora."""

import csv
import json
import math
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from conftest import evaluate

from matching.training.callbacks import EpochTimer, build_callbacks
from matching.training.run import cpu_model, train

ALIGNERS = ["softmax", "coda", "conflict", "softmax_conflict", "differential", "cog", "softpick", "sigmoid", "ssmax"]


@pytest.mark.parametrize("aligner", ALIGNERS)
def test_fast_dev_run_every_aligner(make_cfg, aligner):
    metrics = train(make_cfg(f"aligner={aligner}", "debug=fast"))
    assert "val/acc" in metrics and "train/loss" in metrics


@pytest.mark.parametrize(
    "overrides", [["task=mnli"], ["task=scitail", "intra=coda"], ["task=dnli", "model.null_token=true"]]
)
def test_fast_dev_run_every_task(make_cfg, overrides):
    metrics = train(make_cfg(*overrides, "debug=fast"))
    assert "val/acc" in metrics
    if "task=mnli" in overrides:
        assert "val_mismatched/acc" in metrics


@pytest.mark.parametrize(
    "overrides",
    [
        ["task=wikiqa"],
        ["task=trecqa"],
        ["task=ubuntu", "aligner=coda"],
        [
            "task=trecqa",
            "task/reader=trecqa_xml",
            "task.splits.train.path=trecqa/xml/train.xml",
            "task.splits.dev.path=trecqa/xml/dev.xml",
            "task.splits.dev_raw.path=trecqa/xml/dev.xml",
        ],
        [
            "task=ubuntu",
            "task/reader=ubuntu_tsv",
            "task.splits.train.path=ubuntu_tsv/train.txt",
            "task.splits.dev.path=ubuntu_tsv/valid.txt",
            "task.splits.test.path=ubuntu_tsv/test.txt",
        ],
    ],
)
def test_fast_dev_run_every_ranking_task(make_cfg, overrides):
    metrics = train(make_cfg(*overrides, "debug=fast", "data.eval_batch_size=4"))
    for key in ("val/map", "val/mrr", "val/map_raw", "val/top1", "val/questions"):
        assert key in metrics, key


def test_ranking_run_scores_every_question_of_the_split(make_cfg, caplog):
    cfg = make_cfg("task=wikiqa", "trainer.max_epochs=1", "data.eval_batch_size=3")
    with caplog.at_level("INFO"):
        metrics = train(cfg)
    # fixture dev: 5 questions, 3 with both kinds of answer, 1 without a correct one, 1 with only correct ones
    assert (metrics["val/questions"], metrics["val/skipped_no_positive"], metrics["val/skipped_all_positive"]) == (
        3,
        1,
        1,
    )
    assert "val: scored 3 questions" in caplog.text
    assert 0 < metrics["val/map"] <= 1 and 0 < metrics["val/mrr"] <= 1


@pytest.mark.parametrize("aligner", ALIGNERS)
def test_bf16_mixed_precision_is_numerically_sound(make_cfg, aligner):
    """The GPU config's precision, exercised on CPU: masks by multiplication keep every value finite."""
    metrics = train(make_cfg(f"aligner={aligner}", "intra=coda", "model.null_token=true", "debug=fast",
                             "trainer.precision=bf16-mixed"))  # fmt: skip
    assert all(math.isfinite(v) for k, v in metrics.items() if "/" in k)


def test_a_small_batch_can_be_overfitted(make_cfg):
    cfg = make_cfg("debug=overfit", "model.dropout=0.0", "optim.lr=0.005", "data.batch_size=6", "logger=csv")
    metrics = train(cfg)
    run = Path(cfg.paths.output_dir)
    rows = (run / "logs" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    acc_col, loss_col = header.index("train/acc"), header.index("train/loss")
    epoch_accs = [float(r.split(",")[acc_col]) for r in rows[1:] if r.split(",")[acc_col]]
    step_losses = [float(r.split(",")[loss_col]) for r in rows[1:] if r.split(",")[loss_col]]
    assert step_losses[-1] < 0.5 * step_losses[0]
    assert epoch_accs[-1] >= 0.95
    assert metrics["epochs"] > 0


def test_run_directory_is_self_contained(make_cfg):
    cfg = make_cfg("trainer.max_epochs=2", "test=true")
    metrics = train(cfg)
    run = Path(cfg.paths.output_dir)
    for name in ["config.yaml", "vocab.txt", "metrics.json", "checkpoints/best.ckpt", "checkpoints/last.ckpt"]:
        assert (run / name).exists(), name
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["val/acc"] == pytest.approx(metrics["val/acc"])
    assert "test/acc" in saved
    # Epochs count from 1 in metrics.json and in the CSV log alike: best_epoch is the CSV epoch of the best dev
    # accuracy, the first of equal ones; every row of the log (steps, train and dev epochs) is numbered the same way
    log_rows = list(csv.DictReader((run / "logs" / "metrics.csv").open()))
    rows = [r for r in log_rows if r["val/acc"]][:2]  # the 2 epochs
    accs = [float(r["val/acc"]) for r in rows]
    assert [int(float(r["epoch"])) for r in rows] == [1, 2]
    assert saved["best_epoch"] == int(float(rows[accs.index(max(accs))]["epoch"]))
    assert {int(float(r["epoch"])) for r in log_rows} == {1, 2}
    assert saved["epochs"] == 2


def test_same_seed_gives_identical_metrics(make_cfg, tmp_path):
    first = train(make_cfg("trainer.max_epochs=2", "deterministic=true"))
    second = train(make_cfg("trainer.max_epochs=2", "deterministic=true"))
    assert first["val/loss"] == second["val/loss"]


def test_training_logs_the_step_loss_on_logging_steps_and_the_accuracy_once_an_epoch(make_cfg):
    import csv

    cfg = make_cfg("trainer.max_epochs=2", "trainer.log_every_n_steps=2", "logger=csv")
    train(cfg)
    rows = list(csv.DictReader(open(next(Path(cfg.paths.output_dir).rglob("metrics.csv")))))
    losses = [r for r in rows if r.get("train/loss")]
    accuracies = [r for r in rows if r.get("train/acc")]
    assert losses and all((int(r["step"]) + 1) % 2 == 0 for r in losses)  # written on every 2nd step only
    assert [int(float(r["epoch"])) for r in accuracies] == [1, 2]  # once an epoch, counted from 1
    assert all(0.0 <= float(r["train/acc"]) <= 1.0 for r in accuracies)


def test_the_progress_bar_is_redrawn_every_few_steps_and_left_out_when_disabled(make_cfg, monkeypatch):
    """A bar on a terminal only (elsewhere EpochLine's one line an epoch), and never with enable_progress_bar off."""
    from lightning.pytorch.callbacks import TQDMProgressBar

    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    shown = build_callbacks(make_cfg("trainer.enable_progress_bar=true"))
    assert isinstance(shown["progress_bar"], TQDMProgressBar) and shown["progress_bar"].refresh_rate == 10
    assert "progress_bar" not in build_callbacks(make_cfg())  # the tests run with trainer.enable_progress_bar=false
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    assert "progress_bar" not in build_callbacks(make_cfg("trainer.enable_progress_bar=true"))  # a log file, a pipe


@pytest.mark.slow
def test_a_compiled_model_trains_and_its_checkpoint_loads_uncompiled(make_cfg):
    cfg = make_cfg("compile=true", "trainer.max_epochs=1")
    metrics = train(cfg)
    assert math.isfinite(metrics["val/loss"])
    best = Path(cfg.paths.output_dir) / "checkpoints" / "best.ckpt"
    state = torch.load(best, map_location="cpu", weights_only=True)["state_dict"]
    assert not any("_orig_mod" in key for key in state)  # compiled in place: the keys of an eager model
    assert evaluate(best)["val/loss"] == pytest.approx(metrics["val/loss"], rel=1e-4)


class BatchOrder(pl.Callback):
    """Records the pairs of every training batch, by epoch (a test's view of the batch order)."""

    seen: dict[int, list[list[int]]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        BatchOrder.seen.setdefault(trainer.current_epoch, []).append(batch["index"].tolist())


def test_every_epoch_has_its_own_batch_order(make_cfg):
    """Lightning sets the epoch of a loader's sampler, not of its batch sampler: the bucketing batch sampler must
    receive it all the same, or every epoch repeats the first one's order (as it did before this test)."""
    BatchOrder.seen = {}
    train(make_cfg("trainer.max_epochs=3", "data.batch_size=2", "callbacks.early_stopping=null",
                   f"+callbacks.order._target_={__name__}.BatchOrder"))  # fmt: skip
    orders = [BatchOrder.seen[epoch] for epoch in range(3)]
    assert all(sorted(sum(order, [])) == sorted(sum(orders[0], [])) for order in orders)  # each epoch: every pair
    assert orders[0] != orders[1] and orders[1] != orders[2]


def test_the_epoch_time_leaves_out_the_validation_run_inside_the_epoch():
    """Lightning validates before a training epoch's end hook; seconds_per_epoch is the training's time alone."""

    class SlowValidation(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.weight(batch).sum()

        def validation_step(self, batch, batch_idx):
            time.sleep(0.2)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.zeros(4, 2), batch_size=2)
    timer = EpochTimer()
    trainer = pl.Trainer(
        max_epochs=2, callbacks=[timer], logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=1,
    )  # fmt: skip
    trainer.fit(SlowValidation(), data, data)  # each epoch: two training steps, then 0.4 s of validation
    trainer.validate(SlowValidation(), data, verbose=False)  # after training: not an epoch's
    assert len(timer.seconds) == 2 and max(timer.seconds) < 0.2, timer.seconds


def test_a_run_logs_what_its_numbers_depend_on_besides_the_config(make_cfg, caplog):
    """The torch version and the CPU kernel set (AVX-512 and AVX2 kernels round a softmax differently), so that two
    runs whose per-seed numbers differ can be told apart from a bug."""
    with caplog.at_level("INFO"):
        train(make_cfg("debug=fast"))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("numerics: "))
    assert f"torch {torch.__version__}" in line
    assert f"CPU kernels {torch.backends.cpu.get_cpu_capability()}" in line and "thread" in line
    assert not cpu_model() or f"processor {cpu_model()}" in line  # Intel and AMD gave one seed other numbers


def test_denormals_are_flushed_while_training_and_the_callers_arithmetic_comes_back(make_cfg, caplog):
    """flush_denormal (the default) sets CPU float results below 1.2e-38 to 0 during the run, the numerics line says
    so, a run with flush_denormal=false does not, and the caller's process computes with denormals again after either;
    the seed's metrics are the same both ways."""
    from matching.model.precision import flushes_denormals

    before = flushes_denormals()
    results, lines = [], []
    for flush in ("true", "false"):
        caplog.clear()
        with caplog.at_level("INFO"):
            results.append(train(make_cfg("debug=fast", f"flush_denormal={flush}")))
        lines.append(next(r.getMessage() for r in caplog.records if r.getMessage().startswith("numerics: ")))
        assert flushes_denormals() == before
    assert "denormals flushed to 0" in lines[0] and "denormals" not in lines[1]
    dev = [{k: v for k, v in r.items() if k.startswith("val/")} for r in results]
    assert dev[0] == dev[1]


def test_threads_fixed_or_following_the_free_cores(make_cfg, monkeypatch):
    """`threads=N` trains on N threads; `threads=0` (the default) on the cores free when the run starts, re-checked
    every epoch (SharedCores), unless a launcher set OMP_NUM_THREADS; a negative count is a clear error."""
    from matching.errors import ConfigError
    from matching.training.callbacks import SharedCores, run_callbacks, training_threads

    before = torch.get_num_threads()
    try:
        cfg = make_cfg("debug=fast", "threads=1")
        assert cfg.threads == 1 and "train/loss" in train(cfg) and torch.get_num_threads() == 1
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr("matching.inference.threads.free_cores", lambda: 1)
        cfg = make_cfg("debug=fast")
        assert training_threads(cfg) == 1
        assert any(isinstance(c, SharedCores) for c in run_callbacks(cfg)[0])
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert not any(isinstance(c, SharedCores) for c in run_callbacks(cfg)[0])
        with pytest.raises(ConfigError, match="threads must be 0"):
            training_threads(make_cfg("threads=-2"))
    finally:
        torch.set_num_threads(before)
