"""Every option of every config group composes and instantiates."""

import pytest
import torch
from conftest import CONF
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate

from matching.configs import build
from matching.model.aligners import Aligner
from matching.model.assembly import build_model, build_task
from matching.training.build import build_datamodule
from matching.training.callbacks import build_callbacks


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("name", options("aligner"))
def test_aligner_options(make_cfg, name):
    cfg = make_cfg(f"aligner={name}")
    aligner = instantiate(cfg.aligner)(dim=16)
    assert isinstance(aligner, Aligner)


@pytest.mark.parametrize("name", options("intra"))
def test_intra_options_build_a_model(make_cfg, name):
    cfg = make_cfg(f"intra={name}")
    model = build_model(cfg, torch.randn(30, 20), num_classes=3)
    assert (model.intra is None) == (name == "none")


@pytest.mark.parametrize("name", options("task"))
def test_task_options_read_their_fixtures(make_cfg, name):
    cfg = make_cfg(f"task={name}")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    assert len(dm.splits["train"]) > 0 and dm.eval_splits[0] == "dev"
    ranked_by = {"ubuntu": "val/top1", "pairs_positives": "val/mrr10"}.get(name, "val/map")  # a reranker: MRR@10
    expected = {"classify": "val/acc", "rank": ranked_by}[cfg.task.kind]
    assert cfg.callbacks.checkpoint.monitor == expected


@pytest.mark.parametrize("name", options("embeddings"))
def test_embeddings_options(make_cfg, name, tmp_path, tiny_encoder):
    cfg = make_cfg(f"embeddings={name}")
    if name == "minilm_contextual":  # the default encoder is a download (or the minilm extra): the tiny one here
        cfg.embeddings.model = str(tiny_encoder)
        dm = build_datamodule(cfg)
        dm.setup("fit")
        assert build(cfg.embeddings).matrix(dm.vocab, cfg.seed).shape == (2, 16)  # padding and NULL
        assert dm.splits["train"].source_data is not None
        return
    if name != "random":  # the pretrained options name real files; point them at the fixture vectors
        cfg.embeddings.path = str(CONF.parent / "tests/fixtures/vectors/glove.fixture.20d.txt")
        cfg.embeddings.format = "glove"
    cfg.embeddings.dim = 20
    dm = build_datamodule(cfg)
    dm.setup("fit")
    matrix = build(cfg.embeddings).matrix(dm.vocab, cfg.seed)
    assert matrix.shape == (len(dm.vocab), 20)


@pytest.mark.parametrize("name", options("task/reader"))
def test_reader_options_are_reader_functions(make_cfg, name):
    """Every reader option builds a reader of the task (a `_partial_` function of a path)."""
    task = {"trecqa": "trecqa", "ubuntu": "ubuntu", "wikiqa": "wikiqa", "dnli": "dnli", "scitail": "scitail",
            "pair": "pairs"}  # fmt: skip
    cfg = make_cfg(f"task={task.get(name.split('_')[0], 'snli')}", f"task/reader={name}")
    task = build_task(cfg.task)
    assert callable(task.reader) and task.reader.func.__name__.startswith("read_")


def test_callbacks_are_config_nodes(make_cfg):
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    callbacks = build_callbacks(make_cfg("callbacks.early_stopping.patience=3"))
    assert isinstance(callbacks["checkpoint"], ModelCheckpoint) and callbacks["early_stopping"].patience == 3
    assert isinstance(callbacks["early_stopping"], EarlyStopping)
    assert "early_stopping" not in build_callbacks(make_cfg("callbacks.early_stopping=null"))


@pytest.mark.parametrize(
    ("override", "message"),
    [("task.kind=sort", "task.kind"), ("task=wikiqa task.train_questions=some", "train_questions"),
     ("task.eval_splits=[dev,nope]", "nope"), ("++task.train_questions=answered", "ranking")],
)  # fmt: skip
def test_a_bad_task_setting_is_a_clear_error(make_cfg, override, message):
    with pytest.raises(ValueError, match=message):
        build_task(make_cfg(*override.split()).task)


@pytest.mark.parametrize("name", options("optim"))
def test_optim_options(make_cfg, name):
    cfg = make_cfg(f"optim={name}")
    optimizer = instantiate(cfg.optim)([torch.nn.Parameter(torch.zeros(2))])
    assert optimizer.defaults["lr"] == cfg.optim.lr


@pytest.mark.parametrize("name", options("trainer"))
def test_trainer_options_compose(make_cfg, name):
    cfg = make_cfg(f"trainer={name}")
    assert cfg.trainer.max_epochs == cfg.task.epochs
    if name == "cpu":
        trainer = instantiate(cfg.trainer, logger=False)
        assert trainer.max_epochs == cfg.task.epochs


@pytest.mark.parametrize("name", options("logger"))
def test_logger_options(make_cfg, name, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    cfg = make_cfg(f"logger={name}")
    assert list(cfg.logger) == [name]  # one node per logger, so that several can run at once
    logger = instantiate(cfg.logger[name])
    where = logger.save_dir if name in ("wandb", "mlflow") else logger.log_dir
    assert str(cfg.paths.output_dir) in str(where) or name == "mlflow"


@pytest.mark.parametrize("group", ["experiment", "debug"])
def test_experiment_and_debug_options_compose(make_cfg, group):
    for name in options(group):
        cfg = make_cfg(f"{group}={name}")
        assert cfg.task.name


def test_model_option_and_paper_defaults(make_cfg):
    cfg = make_cfg(small=False)
    assert (cfg.model.hidden, cfg.model.dropout, cfg.optim.lr, cfg.data.batch_size) == (200, 0.2, 3e-4, 64)
    assert cfg.task.epochs == 50 and cfg.aligner.hidden == 200
    assert make_cfg("task=scitail", small=False).data.batch_size == 32


def test_unknown_option_lists_the_valid_choices(make_cfg):
    with pytest.raises(ConfigCompositionException, match="Available options") as err:
        make_cfg("aligner=nope")
    assert "coda" in str(err.value) and "softmax_conflict" in str(err.value)


def test_data_dir_follows_the_environment_variable(monkeypatch, tmp_path):
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("MATCHING_DATA_DIR", str(tmp_path))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train")
    assert cfg.paths.data_dir == str(tmp_path)


@pytest.mark.parametrize(
    ("experiment", "grid"),
    [
        ("coda_centering", {"aligner.center_e": "false,true", "aligner.gate": "none,center", "seed": "1,2,3"}),
        ("coda_activations", {"aligner.phi_e": "tanh,sigmoid", "aligner.phi_n": "sigmoid,tanh,arctan,algebraic",
                              "seed": "1,2,3"}),
    ],
)  # fmt: skip
def test_paper_ablations_are_one_multirun_each(experiment, grid):
    """Tables 8 and 9 of the CoDA paper: the experiment config carries its own sweep over valid CoDA options."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    assert cfg.task.name == "wikiqa" and cfg.aligner._target_.endswith("CoDAAligner")
    assert dict(cfg.hydra.sweeper.params) == grid
    for key, values in grid.items():
        if key.startswith("aligner."):
            for value in values.split(","):
                instantiate(
                    cfg.aligner, **{key.split(".")[1]: value if value not in ("true", "false") else value == "true"}
                )(dim=8)


#: The tasks that read a user's own pairs: task=pairs and every task built on it (conf/task/: `defaults: [pairs]`, or
#: built on one that is).
def _own_pairs_tasks() -> list[str]:
    import yaml

    bases = {name: (yaml.safe_load((CONF / "task" / f"{name}.yaml").read_text()) or {}).get("defaults") or []
             for name in options("task")}  # fmt: skip

    def own(name: str) -> bool:
        return name == "pairs" or any(isinstance(d, str) and d in bases and own(d) for d in bases[name])

    return [name for name in options("task") if own(name)]


OWN_PAIRS_TASKS = _own_pairs_tasks()


def _run_dir_aligner(*overrides: str) -> tuple[object, str]:
    """The composed train config and the aligner folder of its run directory (outputs/runs/<task>/<aligner>/<time>)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg, Path(cfg.hydra.run.dir).parent.name


def test_own_pairs_tasks_are_the_ones_the_docs_name():
    assert set(OWN_PAIRS_TASKS) == {"pairs", "pairs_rank", "pairs_positives", "mrpc", "qqp", "paws"}


@pytest.mark.parametrize("task", OWN_PAIRS_TASKS)
def test_own_pairs_train_coda_centred_by_default_and_the_command_line_still_chooses(task):
    """conf/task/pairs.yaml: a user's own pairs default to CoDA with token centring (the controlled comparison's
    winner, docs/results/index.md); `aligner=<x>` given, in either order, wins; the run folder says which was used."""
    cfg, folder = _run_dir_aligner(f"task={task}")
    assert cfg.aligner._target_.endswith(".CoDAAligner") and cfg.aligner.center_tokens is True
    assert cfg.hydra.runtime.choices.aligner == "coda" and folder == "coda"
    for overrides in ([f"task={task}", "aligner=softmax"], ["aligner=softmax", f"task={task}"]):
        cfg, folder = _run_dir_aligner(*overrides)
        assert cfg.aligner._target_.endswith(".SoftmaxAligner") and cfg.aligner.center_tokens is False
        assert cfg.hydra.runtime.choices.aligner == "softmax" and folder == "softmax"
    cfg, folder = _run_dir_aligner(f"task={task}", "aligner=conflict", "aligner.center_tokens=true")
    assert cfg.aligner._target_.endswith(".ConflictAligner") and cfg.aligner.center_tokens is True
    assert folder == "conflict"


@pytest.mark.parametrize("task", sorted(set(options("task")) - set(OWN_PAIRS_TASKS)))
def test_benchmarks_keep_the_paper_s_softmax_baseline(task):
    cfg, folder = _run_dir_aligner(f"task={task}")
    assert cfg.aligner._target_.endswith(".SoftmaxAligner") and cfg.aligner.center_tokens is False
    assert folder == "softmax"


def _sweep_jobs(*overrides: str) -> list[tuple[tuple[str, ...], object]]:
    """The jobs of `matching-train -m <overrides>`: its grid as Hydra's basic sweeper expands it (the config's
    hydra.sweeper.params, then the command line), each with its train config composed as the job composes it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from matching.training.sweeps import grid

    parser = OverridesParser.create()
    single = [o for o in overrides if not parser.parse_override(o).is_sweep_override()]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=single, return_hydra_config=True)
        params = [f"{key}={value}" for key, value in (cfg.hydra.sweeper.params or {}).items()]
        jobs = grid(parser.parse_overrides([*params, *overrides]))
        return [(job, compose("train", overrides=list(job))) for job in jobs]


def _given(job: tuple[str, ...]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in job)


@pytest.mark.parametrize(("crossed", "cells"), [([], {True}), (["aligner.center_tokens=true,false"], {True, False})])
def test_the_controlled_experiment_trains_every_aligner_with_the_same_centring(tmp_path, crossed, cells):
    """experiment=controlled_f holds token centring as it holds F: in each (F, centring) cell every aligner it sweeps
    has the same aligner.center_tokens (the aligners' own defaults differ: CoDA centres, softmax does not), and the
    report puts the runs in rows that compare only with the baseline's row of the same cell."""
    import json

    import yaml

    from matching.results.discovery import find_runs
    from matching.results.tables import summarise

    jobs = _sweep_jobs("experiment=controlled_f", *crossed)
    swept = {_given(job)["aligner"] for job, _ in jobs}
    assert swept == {"softmax", "coda", "softmax_conflict"}
    for aligner in swept:  # every aligner swept has the option
        assert "center_tokens" in yaml.safe_load((CONF / "aligner" / f"{aligner}.yaml").read_text())
    centring: dict[tuple[str, str], dict[str, set[bool]]] = {}
    for n, (job, cfg) in enumerate(jobs):
        given = _given(job)
        cell = (given["aligner.projection"], given.get("aligner.center_tokens", "unset").lower())  # it writes True
        assert cfg.aligner.projection == cell[0]
        centring.setdefault(cell, {}).setdefault(given["aligner"], set()).add(cfg.aligner.center_tokens)
        run = tmp_path / "multirun" / f"{n}"  # the job's run folder, as report reads it
        (run / ".hydra").mkdir(parents=True)
        aligner = {key: cfg.aligner[key] for key in ("projection", "center_tokens")}
        task = {"name": "wikiqa", "monitor": "val/map", "report_metrics": ["map"]}
        config = {"task": task, "aligner": aligner, "seed": cfg.seed, "choices": {"aligner": given["aligner"]}}
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        (run / "metrics.json").write_text(json.dumps({"val/map": 0.6 + n / 1000}))
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(job)))
    assert len(centring) == 2 * len(cells)
    for (_, value), by_aligner in centring.items():
        assert set(by_aligner) == swept and all(held == {value == "true"} for held in by_aligner.values())
    assert {value == "true" for _, value in centring} == cells
    rows = summarise(find_runs([tmp_path / "multirun"]))
    assert {r.n for r in rows} == {3} and len(rows) == 3 * len(centring)  # one row per aligner and cell, 3 seeds each
    baselines = {r.variant for r in rows if r.aligner == "softmax"}
    assert all(r.variant in baselines and "aligner.center_tokens=" in r.variant for r in rows)


def _make_sweep_overrides() -> list[str]:
    """The overrides of the Makefile's `sweep` target (its `-m` command line, TASK=wikiqa, no ARGS)."""
    import re
    import shlex

    recipe = re.search(r"^sweep:.*\n\t(.*)$", (CONF.parent / "Makefile").read_text(), re.MULTILINE).group(1)
    command = shlex.split(recipe.replace("$(TASK)", "wikiqa").replace("$(ARGS)", ""))
    return [o for o in command[command.index("matching.train") + 1 :] if o != "-m"]


def _demo_overrides(tmp_path) -> list[str]:
    """The overrides of the demo's training sweep (matching.demo.train_command with conf/demo.yaml's aligners)."""
    from omegaconf import OmegaConf

    from matching.demo import train_command

    demo = OmegaConf.load(CONF / "demo.yaml")
    command = train_command(OmegaConf.create({"aligners": list(demo.aligners), "seeds": [1], "train": ""}), tmp_path)
    return [o for o in command if o != "-m" and not o.startswith("hydra.")]


@pytest.mark.parametrize("sweep", ["make sweep", "make demo"])
def test_every_sweep_that_compares_aligners_centres_them_alike(tmp_path, sweep):
    """`make sweep` (aligner=softmax,coda,conflict) and the demo's sweep (softmax, coda) train every aligner with
    the same aligner.center_tokens, not each with its own default (CoDA on, softmax and conflict off)."""
    overrides = _make_sweep_overrides() if sweep == "make sweep" else _demo_overrides(tmp_path)
    jobs = _sweep_jobs(*overrides)
    aligners = {_given(job)["aligner"] for job, _ in jobs}
    assert len(aligners) > 1 and "coda" in aligners and "softmax" in aligners
    assert {cfg.aligner.center_tokens for _, cfg in jobs} == {True}


def test_the_controlled_study_centres_every_family_alike():
    """study=controlled_f (experiment=controlled_f as a study) trains every family, conflict included, with the same
    aligner.center_tokens."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from matching.studies.spec import read_spec, selection_runs

    spec = read_spec(OmegaConf.load(CONF / "study" / "controlled_f.yaml"), ["wikiqa"])
    centring = {}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for run in (r for r in selection_runs(spec) if r.seed == 1):
            overrides = [o for o in run.overrides(spec) if not o.startswith("hydra.")]
            centring[run.family] = compose("train", overrides=overrides).aligner.center_tokens
    assert set(centring) == set(spec.families) and "conflict" in centring
    assert set(centring.values()) == {True}
