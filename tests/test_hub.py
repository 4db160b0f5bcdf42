"""Shared model folders (`matching-export format=hub`): written, loaded offline with identical scores, never
unpickled, refused when their config names other code, uploaded to and downloaded from a local stand-in of the
Hugging Face hub (nothing goes over the network)."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from matching import Matcher
from matching.errors import RunError
from matching.export import main as export_main
from tests.conftest import FIXTURES

PAIRS = [("A man plays a guitar.", "A person makes music."), ("how big is the moon", "Its diameter is 3,474 km."),
         ("Two dogs run in a field.", "The cats sleep."), ("a qwzx zorblat", "Ｔｈｅ ｃａｔ sleeps")]  # fmt: skip


def export_hub(run_dir: Path, out: Path, *extra: str) -> Path:
    assert export_main([f"ckpt={run_dir / 'checkpoints' / 'best.ckpt'}", "format=hub", f"out={out}", *extra]) == 0
    return out


@pytest.mark.parametrize("run_name", ["snli_run", "wikiqa_run"])
def test_a_shared_folder_loads_offline_with_identical_scores(run_name, request, tmp_path):
    run_dir, _ = request.getfixturevalue(run_name)
    folder = export_hub(run_dir, tmp_path / "shared")
    names = {"config.yaml", "vocab.txt", "model.safetensors", "tokenizer.json", "serving.json", "README.md"}
    assert names <= {p.name for p in folder.iterdir()}
    shared, original = Matcher.load(folder), Matcher.load(run_dir)
    assert shared.logits(PAIRS).tobytes() == original.logits(PAIRS).tobytes()  # bit for bit
    assert shared.predict(PAIRS) == original.predict(PAIRS)
    assert shared.align(*PAIRS[1])["a_tokens"] == original.align(*PAIRS[1])["a_tokens"]
    saved = dict(shared._predictor.backend.model.state_dict())
    for name, tensor in original._predictor.backend.model.state_dict().items():  # the frozen vectors table included
        assert saved[name].dtype == tensor.dtype and torch.equal(saved[name], tensor), name
    assert (folder / "vocab.txt").read_text() == (run_dir / "vocab.txt").read_text()
    spec = json.loads((folder / "serving.json").read_text())
    assert spec["format"] == "hub" and spec["labels"] == original.labels and "checkpoint" not in spec


def test_loading_a_shared_folder_never_unpickles(snli_run, tmp_path, request):
    folder = export_hub(snli_run[0], tmp_path / "shared")
    expected = Matcher.load(folder).predict(PAIRS)
    request.getfixturevalue("no_unpickling")
    assert Matcher.load(folder).predict(PAIRS) == expected
    with pytest.raises(RunError, match="something was unpickled"):  # the guard bites: a checkpoint is a pickle
        Matcher.load(snli_run[0])


@pytest.mark.parametrize(
    "edit, words",
    [(lambda cfg: OmegaConf.update(cfg, "aligner._target_", "os.system"), "names 'os.system'"),
     (lambda cfg: OmegaConf.update(cfg, "model._target_", "matching.files.write_json"), "matching.files.write_json"),
     (lambda cfg: OmegaConf.update(cfg, "aligner._target_", "matching.model.aligners.NoSuchAligner"), "NoSuchAligner"),
     (lambda cfg: OmegaConf.update(cfg, "task.trim_a", {"_target_": "subprocess.run", "args": ["ls"]}), "subprocess"),
     (lambda cfg: OmegaConf.update(cfg, "data.max_length", "${oc.env:HOME}"), "data.max_length is an interpolation")],
)  # fmt: skip
def test_a_shared_config_that_names_other_code_is_refused(snli_run, tmp_path, edit, words):
    folder = export_hub(snli_run[0], tmp_path / "shared")
    cfg = OmegaConf.load(folder / "config.yaml")
    edit(cfg)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    with pytest.raises(RunError, match=words.replace(".", r"\.")):
        Matcher.load(folder)


def test_the_model_card_says_what_the_model_is_and_how_it_was_trained(wikiqa_run, tmp_path):
    run_dir, metrics = wikiqa_run
    folder = export_hub(run_dir, tmp_path / "shared")
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: sentence-matching" in card
    for words in ("# wikiqa · coda", "`coda`", "rank", "glove.fixture.20d.txt", f"{metrics['val/map']:.4f}",
                  "pip install 'sentence-matching[hub]'",
                  "python -m matching.train task=wikiqa aligner=coda", "no pickle"):  # fmt: skip
        assert words in card, words
    assert str(FIXTURES) not in (folder / "config.yaml").read_text()  # no path of the training machine
    assert json.loads((folder / "metrics.json").read_text())["val/map"] == pytest.approx(metrics["val/map"])
    # how long it really trained and in what arithmetic, not the config's maximum alone
    epochs, best = metrics["epochs"], metrics["best_epoch"]
    trained = f"| training | {epochs} epochs of at most 2, the best checkpoint's epoch {best}; `dtype=fp32`: fp32 where"
    assert trained in card


def test_a_shared_folder_carries_the_runs_dtype_and_no_split_it_never_read(snli_run, tmp_path):
    from omegaconf import OmegaConf

    run_dir, _ = snli_run
    assert "test" in OmegaConf.load(run_dir / "config.yaml").task.test_splits  # SNLI has a test split, unread here
    cfg = OmegaConf.load(export_hub(run_dir, tmp_path / "shared") / "config.yaml")
    assert cfg.dtype == OmegaConf.load(run_dir / "config.yaml").dtype
    assert cfg.task.splits.test is None and list(cfg.task.test_splits) == []
    assert set(k for k, v in cfg.task.splits.items() if v is not None) == {"train", "dev"}


def test_a_shared_config_names_no_path_of_the_training_machine():
    """The demo's run (its split files in the package, the vectors' download text naming their path): by name only."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from matching import DEMO_DATA
    from matching.cli import compose_config
    from matching.configs import build
    from matching.saved.shared_folder import KEPT, shared_config

    composed = compose_config("train", ["experiment=demo", "paths.data_dir=/home/alice/corpora"])
    nodes = {k: composed[k] for k in KEPT if k in composed}  # resolved, as train saves them
    saved = OmegaConf.create({k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                              for k, v in nodes.items()})  # fmt: skip
    assert str(DEMO_DATA) in OmegaConf.to_yaml(saved) and "/home/alice" in OmegaConf.to_yaml(saved)
    source = build(saved.embeddings)  # the run's embedding source (its file is not read)
    shared = OmegaConf.to_yaml(shared_config(SimpleNamespace(cfg=saved, source=source, run_dir=DEMO_DATA)))
    assert str(DEMO_DATA) not in shared and "/home/alice" not in shared
    assert "path: snli_sample_train.jsonl.gz" in shared and "path: minilm-static-300d.sample.txt.gz" in shared


def test_push_to_hub_and_load_by_repo_id(snli_run, tmp_path, fake_hub, capsys):
    folder = export_hub(snli_run[0], tmp_path / "shared", "push_to_hub=true", "repo_id=alice/snli-softmax")
    assert fake_hub.uploads == ["alice/snli-softmax"]
    assert "uploaded to https://huggingface.co/alice/snli-softmax" in capsys.readouterr().out
    downloaded = Matcher.load("alice/snli-softmax")
    assert downloaded.origin != folder and downloaded.predict(PAIRS) == Matcher.load(folder).predict(PAIRS)
    with pytest.raises(RunError, match="no folder alice/missing here, and cannot get the model 'alice/missing'.*404"):
        Matcher.load("alice/missing")


def test_push_mistakes_are_one_paragraph(snli_run, tmp_path, fake_hub, monkeypatch, capsys):
    ckpt = snli_run[0] / "checkpoints" / "best.ckpt"
    assert export_main([f"ckpt={ckpt}", "format=hub", f"out={tmp_path}", "push_to_hub=true"]) == 2
    assert "give format=hub and repo_id=<owner/name>" in capsys.readouterr().err

    def unauthorized(**kwargs):
        raise PermissionError("401 Client Error: Unauthorized")

    monkeypatch.setattr(fake_hub, "upload_folder", unauthorized)
    assert export_main([f"ckpt={ckpt}", "format=hub", f"out={tmp_path}", "push_to_hub=true", "repo_id=a/b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot upload") and "hf auth login" in err and "Traceback" not in err
    assert (tmp_path / "model.safetensors").is_file()  # the folder is written before the upload


def test_evaluating_a_shared_folder_says_it_needs_the_run_and_what_to_do_instead(snli_run, tmp_path, capsys):
    """A shared folder keeps the model and its text preparation, not the run's training settings that evaluation
    reads a split through: `evaluate` says so in one paragraph (it used to say the folder was not a shared folder)."""
    from matching.evaluate import main as evaluate_main

    folder = export_hub(snli_run[0], tmp_path / "shared")
    assert evaluate_main([f"ckpt={folder}"]) == 2
    err = capsys.readouterr().err
    assert "is a shared model folder" in err and "matching-predict" in err and "Traceback" not in err
