"""Hyper-parameter search with the Optuna sweeper (only when the sweep extra is installed)."""

import os
import subprocess
import sys

import pytest
import yaml
from conftest import FIXTURE_VECTORS, FIXTURES, ROOT


def test_optuna_sweep_runs_two_trials(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    cmd = [
        sys.executable, "-m", "matching.train", "-m", "sweep=optuna_coda", "hydra.sweeper.n_trials=2",
        f"paths.data_dir={FIXTURES}", f"paths.cache_dir={tmp_path / 'cache'}", f"embeddings.path={FIXTURE_VECTORS}",
        "embeddings.dim=20", "model.hidden=16", "data.batch_size=4", "trainer.max_epochs=1",
        "trainer.enable_progress_bar=false", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert set(results["best_params"]) >= {"optim.lr", "model.dropout", "aligner.gate", "aligner.alpha"}
    assert 0 <= results["best_value"] <= 1
    assert len(list((tmp_path / "sweep").glob("*/metrics.json"))) == 2
