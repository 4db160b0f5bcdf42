"""What a run prints is for the user: no library advertisements, no deprecations inside libraries, no exporter
internals (each filtered narrowly in matching/cli.py), none of our own warnings."""

import subprocess
import sys

import pytest
from conftest import SUBPROCESS_ENV, cli_overrides

NOISE = [
    "litlogger",  # Lightning's advertisement for its cloud logger
    "LeafSpec",  # torch's deprecation, raised inside Lightning's code
    "requires_grad=True to a scalar",  # ours: reading the loss without detaching it
    "[torch.onnx]",  # the exporter's step-by-step report
    "Replaced initializer",  # onnxscript's optimiser, one line per rewrite
    "torchvision",  # torch's exporter: a library no model here uses is not installed
    "will not be used",  # torch's note on the shared dynamic axis name
    "You have overridden",  # Lightning: a hook defined in both the LightningModule and the data module
]


def test_training_and_onnx_export_print_no_library_noise(tmp_path):
    pytest.importorskip("onnx")
    run = tmp_path / "run"
    train = [*cli_overrides(tmp_path), "trainer.max_epochs=1", f"hydra.run.dir={run}"]
    export = [f"ckpt={run}/checkpoints/best.ckpt", "format=onnx", f"out={tmp_path / 'onnx'}"]
    script = (
        f"import sys; from matching import train, export; sys.exit(train.main({train!r}) or export.main({export!r}))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=SUBPROCESS_ENV)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert (tmp_path / "onnx" / "model.onnx").is_file() and "wrote" in output
    assert [noise for noise in NOISE if noise in output] == []
