"""benchmarks/seed_curves.py: every seed's dev curve of a study's families, in pairs (uncentred and centred, ungated
and gated), from the runs' logs/metrics.csv; a family with no logged run is refused by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "seed_curves.py"


def write_run(study: Path, family: str, seed: int, accuracies: list[float]) -> None:
    logs = study / "runs" / "snli_check" / family / "default" / f"seed{seed}" / "logs"
    logs.mkdir(parents=True)
    rows = ["epoch,step,train/loss,val/acc"]
    rows += [f"{epoch},{10 * epoch},0.5,{acc}" for epoch, acc in enumerate(accuracies)]
    rows.insert(2, "0,5,0.7,")  # a training row: no dev figure, skipped
    (logs / "metrics.csv").write_text("\n".join(rows) + "\n")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_curves_of_family_pairs_are_drawn_and_a_family_without_runs_is_named(tmp_path):
    from matplotlib.image import imread

    study = tmp_path / "study"
    for family, offset in (("softpick", 0.0), ("softpick_gated", 0.01)):
        for seed in (1, 2, 10):
            write_run(study, family, seed, [0.5 + offset, 0.6, 0.7])
    out = tmp_path / "curves.png"
    done = run(str(study), "--variant", "gated", "--panel", "softpick,softpick_gated", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert imread(out).shape[1] > 300

    refused = run(str(study), "--panel", "softpick,cog", "--out", str(tmp_path / "no.png"))
    assert refused.returncode != 0 and "for: cog;" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "no.png").exists()
    bad = run(str(study), "--panel", "softpick", "--out", str(tmp_path / "no.png"))
    assert bad.returncode != 0 and "two families" in bad.stderr


def _script():
    """The script as a module (benchmarks/ is not a package)."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import seed_curves
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return seed_curves


def test_seeds_are_ordered_by_number(tmp_path):
    for seed in (10, 2, 1):
        write_run(tmp_path, "coda", seed, [0.5])
    assert [r.name for r in _script().runs_of(tmp_path, "snli_check", "coda")] == ["seed1", "seed2", "seed10"]


def test_the_best_checkpoints_evaluation_after_training_is_not_a_point_of_the_curve(tmp_path):
    """Training logs a dev row per epoch, then the best checkpoint's evaluation at that checkpoint's epoch: drawn, it
    was a line from the last epoch back to the best one."""
    write_run(tmp_path, "coda", 1, [0.5, 0.7, 0.6, 0.55])
    logs = tmp_path / "runs" / "snli_check" / "coda" / "default" / "seed1" / "logs" / "metrics.csv"
    logs.write_text(logs.read_text() + "1,31,,0.7\n")  # the best (epoch 1) evaluated again after epoch 3
    epochs, values = _script().curve(logs.parent.parent, "val/acc")
    assert epochs == [0, 1, 2, 3] and values == pytest.approx([50.0, 70.0, 60.0, 55.0])


def test_the_metric_drawn_is_the_runs_monitored_one(tmp_path):
    seed_curves = _script()
    write_run(tmp_path, "coda", 1, [0.5])
    run = tmp_path / "runs" / "snli_check" / "coda" / "default" / "seed1"
    assert seed_curves.monitored([run]) == "val/acc"  # no config.yaml: accuracy
    (run / "config.yaml").write_text("task:\n  name: trecqa\n  monitor: val/map\n")
    assert seed_curves.monitored([run]) == "val/map"


def test_the_first_familys_legend_is_not_the_variant_unless_named():
    seed_curves = _script()
    assert seed_curves.legend_labels("gated") == ("not gated", "gated")
    assert seed_curves.legend_labels("30 epochs", "10 epochs") == ("10 epochs", "30 epochs")
