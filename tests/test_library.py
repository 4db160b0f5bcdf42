"""matching as a library leaves its caller's process alone: importing any module of it, and Matcher.load/predict,
change no warning filter, logging level, filter or handler, environment variable or torch global; only the
commands' entry points set what they need. Files it writes get the user's umask."""

import json
import os
import stat
import subprocess
import sys

from conftest import SUBPROCESS_ENV
from test_hub import export_hub

#: Run in a fresh interpreter: import the third-party libraries the package uses (what *they* do on import is
#: theirs), take the state, import every module of matching and use a trained run through Matcher, take the state
#: again and print both.
PROBE = r"""
import json, logging, os, pkgutil, sys, warnings, importlib
import hydra, lightning.pytorch, numpy, omegaconf, tokenizers, torch, torchmetrics, yaml
for optional in ("datasets", "huggingface_hub", "safetensors", "matplotlib", "matplotlib.pyplot",
                 "fastapi", "uvicorn", "onnx", "onnxruntime", "transformers", "gensim", "pandas", "tensorboard"):
    try:
        importlib.import_module(optional)
    except ImportError:
        pass

def state():
    loggers = {"": logging.getLogger()} | {n: l for n, l in logging.Logger.manager.loggerDict.items()
                                            if isinstance(l, logging.Logger)}
    return {
        "warnings": [repr(f) for f in warnings.filters],
        "loggers": {n: [l.level, l.disabled, l.propagate, [repr(f) for f in l.filters], [repr(h) for h in l.handlers]]
                    for n, l in sorted(loggers.items())},
        "logging.disable": logging.root.manager.disable,
        "environ": dict(os.environ),
        "torch": [torch.get_num_threads(), torch.get_num_interop_threads(),
                  torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision(),
                  str(torch.get_default_dtype()), torch.is_grad_enabled(),
                  torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark, torch.is_anomaly_enabled()],
    }

before = state()
import matching
names = [m.name for m in pkgutil.walk_packages(matching.__path__, "matching.")]
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as err:  # a module of an extra that is not installed
        print("skipped", name, err, file=sys.stderr)
from matching import Matcher
matcher = Matcher.load(sys.argv[1])
matcher.predict([("A man sleeps.", "A person rests.")])
matcher.align("A man sleeps.", "A person rests.")
after = state()
print(json.dumps({"before": before, "after": after, "modules": names}))
"""


def test_importing_matching_and_using_a_matcher_changes_nothing_in_the_process(snli_run):
    run_dir, _ = snli_run
    env = {k: v for k, v in SUBPROCESS_ENV.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", PROBE, str(run_dir)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.splitlines()[-1])
    assert {
        "matching.cli",
        "matching.saved.shared_folder",
        "matching.train",
        "matching.serve",
        "matching.data.readers",
    } <= set(probe["modules"])
    before, after = probe["before"], probe["after"]
    for key in before:
        if key == "loggers":  # a new logger of a library, untouched, is not a change; a touched existing one is
            changed = {n: (v, after["loggers"].get(n)) for n, v in before[key].items() if after["loggers"].get(n) != v}
            ours = {n: v for n, v in after[key].items() if n not in before[key] and (v[0] or v[3] or v[4])}
            assert changed == {} and ours == {}, (changed, ours)
        else:
            assert after[key] == before[key], key


def test_a_command_still_quiets_the_libraries_at_its_entry_point():
    """The filters moved from import time to the commands' `main`: a command sets them."""
    script = (
        "import warnings, matching.train as t; n = len(warnings.filters); "
        "status = t.main(['--help']); print(len(warnings.filters) > n, status)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "True 0"


def test_a_shared_model_folder_is_readable_by_the_team(snli_run, tmp_path):
    """Every file of `export format=hub` gets the user's umask, like any program's files (safetensors writes its
    file 0600 on its own)."""
    run_dir, _ = snli_run
    for umask, expected in ((0o022, 0o644), (0o002, 0o664)):
        previous = os.umask(umask)
        try:
            folder = export_hub(run_dir, tmp_path / f"shared{umask:o}")
        finally:
            os.umask(previous)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir() if p.is_file()}
        assert "model.safetensors" in modes and set(modes.values()) == {expected}, {k: oct(v) for k, v in modes.items()}
