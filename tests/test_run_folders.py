"""Runs a user can find: a generic task's runs are named by their data, a new run that fails before its first
checkpoint leaves the runs tree (so that the latest folder there is always a run), and what a run writes for others
(the model card of export format=hub, the server's /info) names no path of the machine it was trained on."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURE_VECTORS, FIXTURES, compose_train
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from matching.data.tables import DataFormatError
from matching.saved.run_names import data_name, hub_name
from matching.training.run import train

OWN = FIXTURES / "own"
CLAIMS = [f"task.splits.train.path={OWN / 'claims_train.tsv'}", f"task.splits.dev.path={OWN / 'claims_dev.tsv'}",
          "task.columns.a=claim", "task.columns.b=evidence", "task.columns.label=verdict"]  # fmt: skip


@pytest.mark.parametrize(("path", "name"), [
    ("claims_train.tsv", "claims"), ("/data/claims/train.jsonl.gz", "claims"), ("WikiQA-train.tsv", "WikiQA"),
    ("snli_1.0_train.jsonl", "snli_1.0"), ("train_claims_2024.csv", "claims_2024"), ("para_dev.csv", "para"),
    ("/corpora/my set/train", "my-set"), ("dev.tsv", ""),
])  # fmt: skip
def test_a_table_is_named_by_its_file_less_extensions_and_split_words(path, name):
    assert data_name(path) == name


def _hydra_config(tmp_path: Path, *overrides: str):
    from conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"paths.output_root={tmp_path}", *overrides], return_hydra_config=True)


@pytest.mark.parametrize(("overrides", "name"), [
    (CLAIMS, "claims"),
    ([*CLAIMS, "task.name=verdicts"], "verdicts"),
    (["task.hub.name=nyu-mll/glue", "task.hub.config=rte"], "glue-rte"),
    ([], "pairs"),
])  # fmt: skip
def test_a_generic_task_is_named_by_its_data_and_its_runs_land_under_that_name(tmp_path, overrides, name):
    from hydra.core.hydra_config import HydraConfig

    cfg = _hydra_config(tmp_path, "task=pairs", "aligner=coda", *overrides)
    HydraConfig.instance().set_config(cfg)
    assert cfg.task.name == name
    assert Path(cfg.hydra.run.dir).parent == tmp_path / "runs" / name / "coda"
    assert hub_name("someone/questions", None) == "questions"
    rank = _hydra_config(tmp_path, "task=pairs_rank", f"task.splits.train.path={OWN / 'ranking_train.jsonl'}")
    assert rank.task.name == "ranking" and _hydra_config(tmp_path, "task=pairs_rank").task.name == "pairs_rank"
    assert _hydra_config(tmp_path, "task=wikiqa").task.name == "wikiqa"


def _into_runs_tree(cfg, root: Path, time: str):
    with open_dict(cfg):
        cfg.paths.output_root = str(root)
        cfg.paths.output_dir = str(root / "runs" / "claims" / "coda" / time)  # task=pairs: CoDA
    return cfg


def test_a_run_that_fails_before_its_first_checkpoint_leaves_the_runs_tree_with_its_log(tmp_path):
    root = tmp_path / "outputs"
    good = _into_runs_tree(compose_train(tmp_path, "task=pairs", *CLAIMS, "trainer.max_epochs=1"), root, "2026-01-01")
    train(good)
    bad = _into_runs_tree(compose_train(tmp_path, "task=pairs", *CLAIMS, "task.columns.b=answer"), root, "2026-01-02")
    Path(bad.paths.output_dir).mkdir(parents=True)
    (Path(bad.paths.output_dir) / "train.log").write_text("what Hydra's log handler wrote\n")
    with pytest.raises(DataFormatError, match="no column 'answer'"):
        train(bad)
    # the README's "latest run", as written, is the good one
    latest = sorted(Path(root / "runs" / "claims" / "coda").iterdir())[-1]
    assert latest == Path(good.paths.output_dir) and (latest / "checkpoints" / "best.ckpt").is_file()
    failed = root / "failed" / "claims" / "coda" / "2026-01-02"
    assert (failed / "train.log").read_text() == "what Hydra's log handler wrote\n"
    assert "failed before its first checkpoint: DataFormatError" in (failed / "failed.txt").read_text()
    assert "no column 'answer'" in (failed / "failed.txt").read_text()


def test_a_failed_run_in_a_folder_of_the_users_choice_is_marked_where_it_is(tmp_path):
    cfg = compose_train(tmp_path, "task=pairs", *CLAIMS, "task.columns.b=answer")
    with pytest.raises(DataFormatError):
        train(cfg)
    assert (Path(cfg.paths.output_dir) / "failed.txt").is_file()
    retried = compose_train(tmp_path, "task=pairs", *CLAIMS, "trainer.max_epochs=1")
    train(retried)  # the same folder, used again: no longer marked
    assert not (Path(retried.paths.output_dir) / "failed.txt").exists()


def _paths_in(text: str, *places: Path) -> list[str]:
    return [str(p) for p in places if str(p) in text]


def test_the_model_card_and_info_of_a_run_trained_from_absolute_paths_name_none_of_them(tmp_path):
    """Trained from absolute paths (the split files, the vectors, the cache and output folders), with the overrides
    Hydra records in .hydra/overrides.yaml: the shared folder's every file, and /info, name files only."""
    from matching.export import main as export_main
    from matching.inference import load
    from matching.matcher import Matcher

    cfg = compose_train(tmp_path, "task=pairs", *CLAIMS, "trainer.max_epochs=1")
    train(cfg)
    run = Path(cfg.paths.output_dir)
    typed = [*CLAIMS, f"embeddings.path={FIXTURE_VECTORS}", f"paths.cache_dir={tmp_path / 'cache'}"]
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["task=pairs", *typed]))
    places = (FIXTURES, tmp_path, Path.home())

    out = tmp_path / "shared"
    assert export_main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", "format=hub", f"out={out}"]) == 0
    for file in out.iterdir():
        if file.suffix != ".safetensors":
            assert _paths_in(file.read_text(encoding="utf-8"), *places) == [], file.name
    card = (out / "README.md").read_text()
    provenance = json.loads((run / "provenance.json").read_text())
    for words in ("# claims · coda", "task.splits.train.path=claims_train.tsv", "`claims_train.tsv`",
                  "embeddings.path=glove.fixture.20d.txt", provenance["data"]["train"]["sha256"][:16],
                  provenance["embeddings"]["sha256"][:16], "## Examples from its dev data",
                  "| claim | evidence | verdict |"):  # fmt: skip
        assert words in card, words  # the last: the examples' table, headed with the run's own column names
    assert json.loads((out / "examples.json").read_text()) == json.loads((run / "examples.json").read_text())

    info = Matcher(load(run / "checkpoints" / "best.ckpt")).description
    assert _paths_in(json.dumps(info), *places) == []
    assert info["embeddings"] == "glove.fixture.20d.txt" and info["data"] == {"train": "claims_train.tsv",
                                                                               "dev": "claims_dev.tsv"}  # fmt: skip
    # the checkpoint by a path that exists in the run (its checkpoints/ folder), never by one of the machine
    assert info["checkpoint"].endswith("/run/checkpoints/best.ckpt") and len(info["checkpoint_sha256"]) == 64
    assert info["examples_from"] == "the run's dev data" and info["examples"] == json.loads(
        (run / "examples.json").read_text())["examples"]  # fmt: skip


def test_embeddings_are_named_by_the_file_used_not_the_config_option(tmp_path):
    """`embeddings=glove` (the default option) with `embeddings.path=<another file>` is that file."""
    from matching.saved.provenance import embeddings_name

    other = tmp_path / "minilm-static-300d.txt"
    other.write_text(FIXTURE_VECTORS.read_text())
    cfg = compose_train(tmp_path, "task=pairs", *CLAIMS, f"embeddings.path={other}", "trainer.max_epochs=1")
    train(cfg)
    saved = OmegaConf.load(Path(cfg.paths.output_dir) / "config.yaml")
    provenance = json.loads((Path(cfg.paths.output_dir) / "provenance.json").read_text())
    assert saved.choices.embeddings == "glove"
    assert embeddings_name(saved, provenance) == "minilm-static-300d.txt" == provenance["embeddings"]["file"]
    assert embeddings_name(saved, {}) == "minilm-static-300d.txt"  # a run from before provenance.json


def test_a_runs_config_keeps_the_data_modules_references_so_that_a_setting_given_to_the_run_reaches_it(snli_run):
    """config.yaml holds the `datamodule` node as written (${task}, ${data}, ${embeddings}), not resolved copies of
    those nodes: a setting given to the saved run (`data.eval_batch_size=7`) is the one its data module reads."""
    from matching.saved.run_folder import load_run
    from matching.training.build import evaluation_data

    run_dir, _ = snli_run
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert {k: saved["datamodule"][k] for k in ("task", "data", "embeddings")} == {
        "task": "${task}", "data": "${data}", "embeddings": "${embeddings}"}  # fmt: skip
    trained = load_run(run_dir / "checkpoints" / "best.ckpt", settings={"data.eval_batch_size": 7})
    assert evaluation_data(trained).settings.eval_batch_size == 7


def test_moving_a_runs_folders_moves_every_value_under_them_and_nothing_else():
    from matching.saved.run_folder import moved

    saved = OmegaConf.create({
        "paths": {"data_dir": "/old/corpora", "cache_dir": "/old/corpora/cache", "output_dir": "/old/corpora/runs/x"},
        "data": {"data_dir": "/old/corpora", "cache_dir": "/old/corpora/cache"},
        "embeddings": {"path": "/old/corpora/embeddings/v.txt.gz"},
        "task": {"splits": {"dev": {"path": "snli/snli_1.0_dev.jsonl"}}, "note": "/old/corpora-2/x"},
        "runs": ["/old/corpora/cache/rows.npy"],
    })  # fmt: skip
    out = moved(saved, {"paths.data_dir": "/new/here"})
    assert out.paths.data_dir == out.data.data_dir == "/new/here"
    assert out.embeddings.path == "/new/here/embeddings/v.txt.gz"
    # the cache lies under the longest folder that holds it, its own, which did not move
    assert out.paths.cache_dir == out.data.cache_dir == "/old/corpora/cache"
    assert out.runs == ["/old/corpora/cache/rows.npy"]
    assert out.paths.output_dir == "/old/corpora/runs/x"  # the run's own folder, not one of its inputs
    assert out.task.splits.dev.path == "snli/snli_1.0_dev.jsonl" and out.task.note == "/old/corpora-2/x"  # not under it
    assert moved(saved, {"paths.data_dir": "/old/corpora"}) is saved  # nothing to move
    published = OmegaConf.create({"paths": {"data_dir": "<paths.data_dir>"}, "data": {"data_dir": "<paths.data_dir>"}})
    assert moved(published, {"paths.data_dir": "/corpora"}).data.data_dir == "/corpora"  # a published run's copy


def test_a_run_whose_corpora_moved_is_evaluated_where_the_command_says_they_are(snli_run, tmp_path, capsys):
    """A run copied to another machine, or whose corpora moved: `paths.data_dir=` on the command reaches the run's
    data module (its config holds the training machine's folder, resolved), with the same metrics."""
    import shutil

    from matching.evaluate import main as evaluate_main

    run_dir, _ = snli_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    gone = str(tmp_path / "corpora-before")
    text = (copy / "config.yaml").read_text().replace(str(config["paths"]["data_dir"]), gone)
    (copy / "config.yaml").write_text(text)
    (tmp_path / "corpora" / "snli").mkdir(parents=True)
    shutil.copy(FIXTURES / "snli" / "snli_1.0_dev.jsonl", tmp_path / "corpora" / "snli")
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    assert evaluate_main([f"ckpt={copy}", f"out={tmp_path / 'before.json'}", cache]) == 2
    assert "dev split not found" in capsys.readouterr().err
    assert evaluate_main([f"ckpt={copy}", f"paths.data_dir={tmp_path / 'corpora'}", f"out={tmp_path / 'now.json'}",
                          cache]) == 0  # fmt: skip
    assert evaluate_main([f"ckpt={run_dir}", f"out={tmp_path / 'original.json'}", cache]) == 0
    now, original = (json.loads((tmp_path / f"{n}.json").read_text())["metrics"] for n in ("now", "original"))
    assert now == original
