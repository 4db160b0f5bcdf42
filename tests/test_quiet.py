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


def test_a_run_says_one_line_an_epoch_and_its_result_and_every_line_once(tmp_path):
    """The console of `python -m matching.train` (stderr not a terminal): one line an epoch, the result, nothing
    twice (Lightning's own handler printed each of its lines a second time); train.log keeps every line."""
    run = tmp_path / "run"
    argv = [*cli_overrides(tmp_path), "trainer.max_epochs=2", f"hydra.run.dir={run}"]
    done = subprocess.run([sys.executable, "-m", "matching.train", *argv], capture_output=True, text=True,
                          env=SUBPROCESS_ENV)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert [line.split(":")[0] for line in lines if line.startswith("epoch ")] == ["epoch 1/2", "epoch 2/2"]
    assert lines[-1].startswith("done: val/acc ") and str(run) in lines[-1]
    assert len(lines) == len(set(lines)) and not [line for line in lines if line.startswith("INFO:")], lines
    assert len(lines) <= 6, lines
    log = (run / "train.log").read_text()
    assert "Seed set to 1" in log and "numerics:" in log and log.count("Seed set to 1") == 1


def test_the_console_filter_keeps_warnings_and_the_marked_lines():
    import logging

    from matching.console import CONSOLE, ConsoleLines

    def record(level, extra=None):
        made = logging.LogRecord("matching.x", level, __file__, 1, "message", None, None)
        made.__dict__.update(extra or {})
        return made

    keep = ConsoleLines()
    assert keep.filter(record(logging.WARNING)) and keep.filter(record(logging.INFO, CONSOLE))
    assert not keep.filter(record(logging.INFO)) and not keep.filter(record(logging.DEBUG))


def test_onnx_irs_note_on_an_empty_list_is_dropped_and_its_other_warnings_still_show():
    """onnxscript's own translation of index_put (a contextual model's word pooling) hands onnx_ir an empty list of
    integers, which onnx_ir notes twice per export; after a command's quieting the note is gone, its logger's other
    warnings are not. Run in a process of its own: the quieting is process-wide."""
    pytest.importorskip("onnx_ir")
    script = (
        "import logging; logging.basicConfig(); import onnx_ir.convenience as c; from matching.cli import "
        "quiet_libraries; c.convert_attribute('before', []); quiet_libraries(); c.convert_attribute('after', []); "
        "logging.getLogger('onnx_ir._convenience').warning('another warning')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Attribute type is ambiguous") == 1 and "another warning" in done.stderr, done.stderr
