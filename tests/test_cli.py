"""One way in: every command is a Hydra app with --help, the same override grammar, the run's saved config under
the command's own, and one way of reporting a user's mistake (one `error:` paragraph, exit status 2)."""

import subprocess
import sys

import pytest
from conftest import cli_overrides

from matching import demo, evaluate, export, predict, report, train, visualize
from matching.cli import compose_config, quote_verbatim

COMMANDS = {"train": train, "evaluate": evaluate, "predict": predict, "visualize": visualize, "export": export,
            "report": report, "demo": demo}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_with_its_usage(name, capsys):
    assert COMMANDS[name].main(["--help"]) == 0
    assert capsys.readouterr().out.startswith(f"Usage: matching-{name} ")


def test_a_command_on_a_run_composes_over_the_saved_config(snli_run, capsys):
    run, _ = snli_run
    ckpt = f"ckpt={run / 'checkpoints' / 'best.ckpt'}"
    cfg = compose_config("evaluate", [ckpt, "data.eval_batch_size=3", "split=test"])
    assert cfg.task.name == "snli" and cfg.data.eval_batch_size == 3 and cfg.split == "test"
    assert cfg.model.hidden == 16  # the run's own value, not the default of conf/model
    assert evaluate.main([ckpt, "--cfg", "job"]) == 0
    assert "eval_batch_size" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["model.hiden=3"], "unknown config key 'model.hiden'; valid keys at model"),
     (["split=dev,test"], "--multirun"),  # a sweep value outside -m
     (["aligner=nope"], "aligner"),
     (["aligner=1"], "aligner is a config group, whose value is the name of one of its options, not a number; the "
                     "options of 'aligner': attention coda"),
     (["intra=true"], "not true or false; the options of 'intra': coda none softmax"),
     (["data.eval_batch_size=[1"], "cannot parse the override 'data.eval_batch_size=[1'")],
)  # fmt: skip
def test_a_bad_override_is_one_clear_paragraph(snli_run, capsys, argv, message):
    run, _ = snli_run
    assert evaluate.main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["outputs/multirun/x"], "'outputs/multirun/x' is not an override: every argument is key=value; did you mean "
                              "runs=outputs/multirun/x?"),
     (["runs=a", "outputs/multirun/x"], "is not an override: every argument is key=value (")],  # runs= is given
)  # fmt: skip
def test_an_argument_without_a_key_is_named_with_the_key_it_is_for(capsys, argv, message):
    assert report.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err and "EQUAL" not in err


def test_train_reports_a_missing_vectors_file_without_a_traceback(tmp_path, capsys):
    argv = [o for o in cli_overrides(tmp_path) if not o.startswith("embeddings.path=")]
    code = train.main([*argv, "embeddings.path=/no/such/vectors.txt", f"hydra.run.dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: No word vectors at /no/such/vectors.txt") and "Traceback" not in err


def test_debug_switch_shows_the_traceback(snli_run, monkeypatch):
    run, _ = snli_run
    monkeypatch.setenv("MATCHING_DEBUG", "1")
    with pytest.raises(ValueError, match="unknown split"):
        evaluate.main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "split=nope"])


def test_missing_required_key_names_it_with_the_usage(snli_run, capsys):
    run, _ = snli_run
    assert predict.main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}"]) == 2
    err = capsys.readouterr().err
    assert "missing input=" in err and "usage: matching-predict ckpt=" in err


def test_free_text_is_taken_as_typed():
    argv = quote_verbatim(["a=Yes, it's (really) a dog", 'b="already quoted"', "out=x.png"], ("a", "b"))
    assert argv == ["a='Yes, it\\'s (really) a dog'", 'b="already quoted"', "out=x.png"]


def test_visualize_takes_texts_with_commas_and_apostrophes(snli_run, tmp_path):
    run, _ = snli_run
    out = tmp_path / "pair.png"
    argv = [f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "a=Yes, it's a dog (a big one).", "b=A dog, running.",
            f"out={out}"]  # fmt: skip
    assert visualize.main(argv) == 0 and out.exists()


MISTAKES = [
    ("train", ["task.splits.train.path=/no/such/train.jsonl"], "/no/such/train.jsonl"),
    ("train", ["optim.lrr=0.1"], "unknown config key 'optim.lrr'"),
    ("train", ["aligner=nope"], "Could not find 'aligner/nope'"),
    ("train", ["embeddings.top_words=-1"], "embeddings.top_words must be 0 or more"),
    ("evaluate", [], "missing ckpt="),
    ("evaluate", ["ckpt=/no/such/best.ckpt"], "no checkpoint file at /no/such/best.ckpt"),
    ("evaluate", ["{ckpt}", "split=validation"], "unknown split 'validation'"),
    ("predict", ["{ckpt}", "input=/no/such/pairs.tsv"], "/no/such/pairs.tsv"),
    ("predict", ["{ckpt}", "input=-", "input_format=xml"], "input_format must be one of"),
    ("visualize", ["{ckpt}", "mode=pie"], "mode must be heatmap or histogram"),
    ("visualize", ["{ckpt}", "a=only one side"], "needs both texts"),
    ("export", ["{ckpt}", "format=tflite"], "format must be one of"),
    ("report", ["runs=/no/such/folder"], "no such run or multirun directory"),
]


@pytest.mark.parametrize(("name", "argv", "message"), MISTAKES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISTAKES)])
def test_a_users_mistake_is_one_paragraph_and_exit_2(name, argv, message, snli_run, tmp_path, capsys):
    run, _ = snli_run
    argv = [a.format(ckpt=f"ckpt={run / 'checkpoints' / 'best.ckpt'}") for a in argv]
    if name == "train":
        argv = [*cli_overrides(tmp_path), f"hydra.run.dir={tmp_path / 'run'}", *argv]
    assert COMMANDS[name].main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err, err


def test_a_missing_extra_is_named(snli_run, tmp_path, monkeypatch, capsys):
    """Plots are an extra: without matplotlib, visualize says which extra to install; report still writes its
    tables and only skips the chart."""
    run, _ = snli_run
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert visualize.main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "a=a dog", "b=an animal"]) == 2
    assert 'pip install -e ".[plots]"' in capsys.readouterr().err
    assert report.main([f"runs={run}", f"out={tmp_path}"]) == 0
    assert (tmp_path / "report.md").exists() and not (tmp_path / "report.png").exists()


#: A training whose model breaks in its second epoch: a bug of ours, injected into a subprocess.
def test_a_bug_of_ours_shows_its_traceback_says_so_and_keeps_what_was_computed(tmp_path, monkeypatch, capsys):
    """A ValueError raised inside the package is not a user's mistake: the traceback, a line saying it is a bug
    and where to report it, exit status 1; the first epoch's checkpoint and metrics are still on disk."""
    import torch

    from matching.train import main
    from matching.training import system

    step = system.MatchingSystem.training_step

    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1:
            dict(zip([1, 2], [1], strict=True))  # the length mismatch of the issue: ours, not the user's
        return step(self, batch, batch_idx)

    monkeypatch.setattr(system.MatchingSystem, "training_step", training_step)
    run = tmp_path / "run"
    code = main([*cli_overrides(tmp_path), "trainer.max_epochs=3", f"hydra.run.dir={run}"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback (most recent call last)" in err and "zip() argument 2 is shorter" in err
    assert "This is a bug in matching" in err and "\nerror:" not in err
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] == 0  # the first, complete
    header, *rows = (run / "logs" / "metrics.csv").read_text().splitlines()
    val = header.split(",").index("val/acc")
    assert [r.split(",")[val] for r in rows if r.split(",")[val]]  # the first epoch's dev score


#: Each command with its usual arguments before a typo (`{run}`: a run directory).
TYPO_COMMANDS = {
    "train": [], "evaluate": ["ckpt={run}"], "predict": ["ckpt={run}", "input=-"], "visualize": ["ckpt={run}"],
    "export": ["ckpt={run}"], "serve": ["ckpt={run}"], "report": ["runs=outputs"], "study": [],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TYPO_COMMANDS))
def test_a_typo_is_answered_before_torch_and_lightning_load(name, snli_run, tmp_path):
    """The time of the answer is a benchmark's figure (benchmarks/bench_cli_errors.py, docs/results/performance.md);
    what keeps it under a second is checkable here: a command reads its arguments before it imports the heavy
    libraries."""
    run, _ = snli_run
    argv = [w.format(run=run) for w in TYPO_COMMANDS[name]] + ["unknwon_key=1"]
    code = (
        f"import sys; from matching.{name} import main; status = main({argv!r}); "
        "heavy = sorted(m for m in ('torch', 'lightning', 'transformers', 'matplotlib') if m in sys.modules); "
        "print(status, heavy)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, input="")
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr[-2000:]
    assert "unknwon_key" in done.stderr and "Traceback" not in done.stderr


#: Every console script (pyproject.toml's [project.scripts]) that is a Hydra app, and the module whose main it runs.
HYDRA_SCRIPTS = {
    "matching-train": "train", "matching-evaluate": "evaluate", "matching-predict": "predict",
    "matching-visualize": "visualize", "matching-export": "export", "matching-report": "report",
    "matching-study": "study", "matching-derive-vectors": "derive_vectors", "matching-serve": "serve",
    "matching-demo": "demo",
}  # fmt: skip


def test_every_console_script_is_checked_for_its_help():
    import tomllib
    from conftest import ROOT

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {*HYDRA_SCRIPTS, "matching-serve-onnx"}
    assert all(scripts[name] == f"matching.{module}:main" for name, module in HYDRA_SCRIPTS.items())


def _listed_groups(help_text: str) -> dict[str, list[str]]:
    """The `group: option, option` lines of a --help's `== Configuration groups ==` section ({} without one)."""
    if "== Configuration groups ==" not in help_text:
        return {}
    section = help_text.split("== Configuration groups ==", 1)[1].split("\n== ", 1)[0]
    lines = [line for line in section.splitlines()[1:] if ": " in line]
    return {group: options.split(", ") for group, options in (line.split(": ", 1) for line in lines)}


def _composes(config_name: str, override: str) -> bool:
    from matching.cli import OverrideError

    try:
        compose_config(config_name, [override])
    except OverrideError:
        return False
    return True


#: The groups each command's --help must list: those of its own defaults list, no other folder of conf/.
EXPECTED_GROUPS = {
    "train": {"aligner", "debug", "embeddings", "experiment", "intra", "logger", "loss", "model", "optim", "paths",
              "sweep", "task", "task/reader", "trainer"},
    "study": {"paths", "study"}, "derive_vectors": {"paths"}, "demo": {"paths"},
}  # fmt: skip


@pytest.mark.parametrize("script", sorted(HYDRA_SCRIPTS))
def test_help_lists_only_the_groups_the_command_takes(script, capsys):
    """Hydra's default help lists every folder of conf/ under every command (`study` under matching-train, which
    refuses it): each command's --help lists the groups of its own defaults list, each of which composes with one
    of the options listed for it; a command without groups (evaluate, report, ...) lists none."""
    import importlib

    name = HYDRA_SCRIPTS[script]
    assert importlib.import_module(f"matching.{name}").main(["--help"]) == 0
    listed = _listed_groups(capsys.readouterr().out)
    assert set(listed) == EXPECTED_GROUPS.get(name, set())
    for group, options in listed.items():
        assert options == sorted(options) and all(options), (group, options)
        assert any(_composes(name, f"{group}={option}") for option in options), f"{script} --help lists {group}"
    if name == "train":
        assert not _composes("train", "study=centring")  # what the old help offered and train refuses


def test_help_says_a_run_s_config_is_taken_only_by_the_commands_on_a_run(capsys):
    for module, on_a_run in ((evaluate, True), (predict, True), (report, False), (demo, False)):
        assert module.main(["--help"]) == 0
        said = "(given ckpt=) the trained run's saved config" in capsys.readouterr().out
        assert said == on_a_run, module.__name__


def test_serve_onnx_help_lists_the_keys_it_takes_and_no_other(capsys):
    """matching-serve-onnx takes some of matching-serve's keys (EXPORTED_KEYS), not the run's config, nor backend,
    compare, engine, ...: its --help lists exactly those, and each one listed is accepted."""
    import yaml
    from conftest import CONF

    from matching.serve_onnx import EXPORTED_KEYS
    from matching.serve_onnx import main as serve_onnx

    assert serve_onnx(["--help"]) == 0
    listed = yaml.safe_load(capsys.readouterr().out.split("== Options ==\n", 1)[1])
    assert set(listed) == set(EXPORTED_KEYS)
    assert set(yaml.safe_load((CONF / "serve.yaml").read_text())) - set(listed) >= {"backend", "compare", "engine"}
    for key in listed:  # accepted: the answer is about the missing ckpt, not about the key
        value = "x" if key != "limits" else "{max_pairs: 1}"
        assert serve_onnx([f"{key}={value}"] if key != "ckpt" else ["ckpt=/no/such/folder"]) == 2
        assert "takes key=value arguments among" not in capsys.readouterr().err, key
    assert serve_onnx(["backend=onnx"]) == 2
    assert "takes key=value arguments among" in capsys.readouterr().err
