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
