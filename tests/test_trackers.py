"""Experiment trackers by config: logger=wandb and logger=mlflow, alone or several at once, leave their records
offline (W&B's offline mode; MLflow in a SQLite file), and a tracker that is not installed names its extra."""

import importlib.util
from pathlib import Path

import pytest
from conftest import compose_train

from matching.extras import MissingExtraError
from matching.training.run import train


def test_wandb_offline_and_the_csv_log_at_once(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = compose_train(tmp_path, "logger=[csv,wandb]", "trainer.max_epochs=1")
    metrics = train(cfg)
    run = Path(cfg.paths.output_dir)
    assert (run / "logs" / "metrics.csv").is_file()
    (offline,) = (run / "wandb").glob("offline-run-*")
    records = list(offline.glob("*.wandb"))
    assert records and records[0].stat().st_size > 0
    assert "val/acc" in metrics


def test_mlflow_records_the_run_in_a_sqlite_file(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose_train(tmp_path, "logger=mlflow", f"logger.mlflow.tracking_uri={uri}", "trainer.max_epochs=2")
    metrics = train(cfg)
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("matching-snli")
    (recorded,) = client.search_runs([experiment.experiment_id])
    assert recorded.data.metrics["val/acc"] == pytest.approx(metrics["val/acc"])
    assert recorded.data.params["aligner/_target_"] == "matching.model.aligners.SoftmaxAligner"  # the run's config
    assert recorded.info.run_name == "snli-softmax-seed1"


def test_a_tracker_that_is_not_installed_names_its_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    cfg = compose_train(tmp_path, "logger=[csv,wandb]", "trainer.max_epochs=1")
    with pytest.raises(MissingExtraError, match=r"logger=wandb needs wandb, from the wandb extra"):
        train(cfg)
