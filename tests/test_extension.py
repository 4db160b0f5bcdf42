"""The style guide's promise: a new aligner is one class plus one YAML, a new corpus one reader plus one YAML, and
every option of conf/aligner/ and conf/task/ goes through every command with no edit anywhere else."""

import csv
import json
import textwrap
from pathlib import Path

import pytest
from conftest import CONF, compose_train

from matching.evaluate import main as evaluate_main
from matching.export import main as export_main
from matching.predict import main as predict_main
from matching.report import main as report_main
from matching.training.run import train
from matching.visualize import main as visualize_main

THROWAWAY_ALIGNER = '''
from matching.model.aligners import Aligner, Alignment
from matching.model.layers import pair_mask


class UniformAligner(Aligner):
    """Every token aligned to the plain mean of the other sentence's real tokens."""

    def forward(self, a, b, mask_a, mask_b, score_bias=None):
        valid = pair_mask(mask_a, mask_b).float()  # (B, La, Lb)
        weights_a = valid / valid.sum(2, keepdim=True).clamp_min(1.0)
        weights_b = valid / valid.sum(1, keepdim=True).clamp_min(1.0)
        return Alignment(weights_a @ b, weights_b.transpose(1, 2) @ a, {"uniform": weights_a})
'''


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _through_every_command(run_dir: Path, tmp_path: Path, pairs: str, capsys) -> dict[str, list[dict]]:
    """evaluate, predict, visualize (heat-map), export and report on a trained run; what predict and report gave."""
    ckpt = f"ckpt={run_dir / 'checkpoints' / 'best.ckpt'}"
    assert evaluate_main([ckpt, f"out={tmp_path / 'eval.json'}"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "eval.json").read_text())["metrics"]
    (tmp_path / "pairs.tsv").write_text(pairs)
    capsys.readouterr()
    assert predict_main([ckpt, f"input={tmp_path / 'pairs.tsv'}"]) == 0, capsys.readouterr().err
    predictions = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    heatmap = tmp_path / "alignment.png"
    assert visualize_main([ckpt, "a=a man plays", "b=a person plays music", f"out={heatmap}"]) == 0
    assert heatmap.read_bytes().startswith(b"\x89PNG")
    assert export_main([ckpt, "format=torchscript", f"out={tmp_path / 'export'}"]) == 0
    assert (tmp_path / "export" / "model.pt").exists()
    assert report_main([f"runs={run_dir}", f"out={tmp_path}"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "report.csv")))
    return {"predictions": predictions, "report": rows}


def _train_own_option(tmp_path, monkeypatch, module: str, code: str, group: str, option: str, yaml: str) -> Path:
    """Train one epoch with an option of one's own: `code` as `module`.py and `yaml` as conf/<group>/<option>.yaml
    in a folder outside the package, found through hydra.searchpath; the run's directory."""
    (tmp_path / f"{module}.py").write_text(code)
    (tmp_path / "conf" / group).mkdir(parents=True)
    (tmp_path / "conf" / group / f"{option}.yaml").write_text(yaml)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_train(tmp_path, f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"{group}={option}",
                        "trainer.max_epochs=1")  # fmt: skip
    train(cfg)
    return Path(cfg.paths.output_dir)


def test_a_throwaway_aligner_is_one_class_and_one_yaml(tmp_path, monkeypatch, capsys):
    """The class and its YAML live outside the package (a user's own folder, found through hydra.searchpath)."""
    yaml = "# Every token aligned to the mean of the other sentence.\n_target_: throwaway_aligner.UniformAligner\n"
    run_dir = _train_own_option(tmp_path, monkeypatch, "throwaway_aligner", THROWAWAY_ALIGNER, "aligner", "uniform",
                                yaml + "_partial_: true\n")  # fmt: skip
    seen = _through_every_command(run_dir, tmp_path, "A man plays.\tA person plays music.\n", capsys)
    assert len(seen["predictions"]) == 1 and set(seen["predictions"][0]["probs"]) == {
        "entailment", "neutral", "contradiction",
    }  # fmt: skip
    assert {r["aligner"] for r in seen["report"]} == {"uniform"}
    from matching.saved.run_folder import load_run

    run = load_run(run_dir / "checkpoints" / "best.ckpt")
    assert type(run.model.aligner).__name__ == "UniformAligner"


THROWAWAY_WEIGHTING = '''
from matching.model.aligners import weighting
from matching.model.layers import masked_softmax


@weighting("halfmax", formula="softmax(E/2)", each="each {whose} sums to 1", values=(0.0, 1.0))
def halfmax(scores, mask, dim, zero=None):
    """A softmax of half the scores."""
    return masked_softmax(scores / 2, mask, dim, zero=zero)
'''

HALFMAX_YAML = """\
# A softmax of half the dot scores.
_target_: matching.model.aligners.DotAligner
_partial_: true
weighting: throwaway_weighting.halfmax
hidden: ${model.hidden}
dropout: ${model.dropout}
projection: none
center_tokens: true
"""


def test_a_new_weighting_is_one_function_and_one_yaml_and_a_distribution_of_the_design_space(
    tmp_path, monkeypatch, capsys
):
    """A weighting registered outside the package (`@weighting`) is an aligner of its own through one YAML (the
    dot aligner over it) and, with no YAML at all, a distribution of `aligner=attention`, with every compatibility
    function and head count; the matrices' captions and ranges come from what it declares."""
    from matching.model.matrices import matrix_title, value_range
    from matching.saved.run_folder import load_run

    run_dir = _train_own_option(tmp_path, monkeypatch, "throwaway_weighting", THROWAWAY_WEIGHTING, "aligner",
                                "halfmax", HALFMAX_YAML)  # fmt: skip
    seen = _through_every_command(run_dir, tmp_path, "A man plays.\tA person plays music.\n", capsys)
    assert len(seen["predictions"]) == 1 and {r["aligner"] for r in seen["report"]} == {"halfmax"}
    run = load_run(run_dir / "checkpoints" / "best.ckpt")
    assert run.model.aligner.kind == "halfmax"
    assert matrix_title("halfmax_b", run.cfg) == (
        "halfmax_b: weights aligning each b token to a (softmax(E/2); each column sums to 1)"
    )
    cfg = compose_train(tmp_path / "attention", "aligner=attention", "aligner.distribution=throwaway_weighting.halfmax",
                        "aligner.score=general", "aligner.heads=2", "trainer.max_epochs=1")  # fmt: skip
    train(cfg)
    run = load_run(Path(cfg.paths.output_dir) / "checkpoints" / "best.ckpt")
    assert run.model.aligner.distribution.weighting.name == "halfmax"
    assert "(throwaway_weighting.halfmax of general scores; 2 heads, mean; each row sums to 1)" in matrix_title(
        "attention_a", run.cfg
    )
    assert value_range("attention_a", run.cfg) == [0.0, 1.0]


THROWAWAY_READER = '''
from matching.data.pairs import Pair


def read_pipes(path):
    """Lines of `label | first text | second text`."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            label, a, b = (part.strip() for part in line.split("|"))
            yield Pair(a, b, label, line=number)
'''

THROWAWAY_TASK = """\
# A corpus of `label | a | b` lines.
_target_: matching.data.tasks.Task
_convert_: all
name: pipes
kind: classify
reader: {_target_: throwaway_reader.read_pipes, _partial_: true}
labels: [same, different]
splits:
  train: {path: pipes/train.txt}
  dev: {path: pipes/dev.txt}
eval_splits: [dev]
monitor: val/acc
monitor_mode: max
epochs: 1
batch_size: 4
"""


def test_a_throwaway_corpus_is_one_reader_and_one_yaml(tmp_path, monkeypatch, capsys):
    (tmp_path / "throwaway_reader.py").write_text(THROWAWAY_READER)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "pipes.yaml").write_text(THROWAWAY_TASK)
    corpus = tmp_path / "corpora" / "pipes"
    corpus.mkdir(parents=True)
    lines = ["same | a dog runs | a dog is running", "different | a dog runs | the sky is blue",
             "same | a man plays music | a person plays music", "different | a man sleeps | a cat eats"]  # fmt: skip
    (corpus / "train.txt").write_text("\n".join(lines * 3) + "\n")
    (corpus / "dev.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_train(tmp_path, f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "task=pipes",
                        f"paths.data_dir={tmp_path / 'corpora'}")  # fmt: skip
    train(cfg)
    seen = _through_every_command(Path(cfg.paths.output_dir), tmp_path, "a dog runs\ta dog is running\n", capsys)
    assert seen["predictions"][0]["label"] in ("same", "different")
    assert {(r["task"], r["metric"]) for r in seen["report"]} == {("pipes", "acc")}


@pytest.mark.parametrize(
    ("group", "option"),
    [("aligner", name) for name in options("aligner")] + [("task", name) for name in options("task")],
)
def test_every_option_trains_evaluates_predicts_and_reports(group, option, tmp_path, capsys):
    cfg = compose_train(tmp_path, f"{group}={option}", "trainer.max_epochs=1")
    train(cfg)
    pairs = textwrap.dedent("""\
        what does a man play\ta man plays the guitar .
        what does a man play\tthe sky is blue .
    """)
    seen = _through_every_command(Path(cfg.paths.output_dir), tmp_path, pairs, capsys)
    kind = cfg.task.kind
    assert len(seen["predictions"]) == (2 if kind == "classify" else 1)
    row = seen["report"][0]
    # a task trains its own default aligner: the paper's softmax for the benchmarks, CoDA for one's own pairs
    default = "coda" if "CoDA" in str(cfg.aligner._target_) else "softmax"
    assert row["task"] == cfg.task.name and row["aligner"] == (option if group == "aligner" else default)
    assert row["metric"] == cfg.task.report_metrics[0]


THROWAWAY_SOURCE = '''
import zlib

import numpy as np
import torch

from matching.model.embeddings import EmbeddingSource


class TrigramVectors(EmbeddingSource):
    """A word's vector is the sum of random vectors of its character trigrams (hashed): every word of the dev
    splits gets a row of its own, built from its spelling, with no vectors file."""

    def __init__(self, dim: int = 16, buckets: int = 512, freeze: bool = True, normalize: bool = True):
        self.dim, self.buckets, self.freeze, self.normalize = dim, buckets, freeze, normalize
        self.table = np.random.default_rng(0).standard_normal((buckets, dim)).astype(np.float32)

    def identity(self):
        return {"trigrams": self.buckets, "dim": self.dim}

    def extra_words(self, train_words, other_words):
        known = set(train_words)
        return [w for w in dict.fromkeys(other_words) if w not in known]

    def matrix(self, vocab, seed, cache_dir=None):
        def vector(word):
            padded = f"<{word}>"
            grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
            return self.table[[zlib.crc32(g.encode()) % self.buckets for g in grams]].sum(0)

        rows = np.stack([vector(w) for w in vocab.words])
        return torch.from_numpy(vocab.embedding_matrix(rows, np.ones(len(rows), bool), self.dim, seed))
'''


def test_a_throwaway_embedding_source_is_one_class_and_one_yaml(tmp_path, monkeypatch, capsys):
    """A source of word vectors of one's own: its class and YAML outside the package, and every command works."""
    yaml = "# Character-trigram vectors, no file.\n_target_: throwaway_source.TrigramVectors\ndim: 16\nbuckets: 512\n"
    run_dir = _train_own_option(tmp_path, monkeypatch, "throwaway_source", THROWAWAY_SOURCE, "embeddings", "trigrams",
                                yaml + "freeze: true\nnormalize: true\n")  # fmt: skip
    seen = _through_every_command(run_dir, tmp_path, "A man plays.\tA person plays music.\n", capsys)
    assert len(seen["predictions"]) == 1
    from matching.saved.run_folder import load_run

    run = load_run(run_dir / "checkpoints" / "best.ckpt")
    assert type(run.source).__name__ == "TrigramVectors"
    from matching.data.sources import read_split

    pairs = read_split(run.task, "train", run.cfg.paths.data_dir, run.cfg.paths.cache_dir)
    train_words = {w for a, b in run.text.tokenize("train", pairs) for w in (*a, *b)}
    assert set(run.vocab.words) - train_words  # the dev split's words got rows of their own (extra_words)


THROWAWAY_DATA = '''
from matching.training.build import pair_data_module
from matching.training.datamodule import PairDataModule


class EveryOtherTrainingPair(PairDataModule):
    """Trains on every other pair of the training split."""

    def read_pairs(self, name):
        pairs = super().read_pairs(name)
        return pairs[::2] if name == "train" else pairs

    def split_key(self, name):  # what the prepared split is cached by: it holds other pairs than the package's
        return super().split_key(name) | {"every_other": name == "train"}


def every_other_training_pair(**parts):
    made = pair_data_module(**parts)  # the package's parts, built from the nodes
    return EveryOtherTrainingPair(made.task, made.settings, made.vectors, made.vocab, made.miner,
                                  made.training_batches)
'''


def test_a_data_module_of_ones_own_is_named_by_the_datamodule_node(tmp_path, monkeypatch):
    """`datamodule._target_` names a function (or class) outside the package: it is given the task, data and
    embeddings nodes and what the run decides; the run trains on what it reads and saves the node. A module that
    reads other pairs from the same files keys its cached splits apart (`split_key`)."""
    from omegaconf import OmegaConf

    from matching.training.build import build_datamodule

    (tmp_path / "throwaway_data.py").write_text(THROWAWAY_DATA)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_train(tmp_path, "datamodule._target_=throwaway_data.every_other_training_pair",
                        "trainer.max_epochs=1")  # fmt: skip
    train(cfg)
    saved = OmegaConf.load(Path(cfg.paths.output_dir) / "config.yaml")
    assert saved.datamodule._target_ == "throwaway_data.every_other_training_pair"
    half, full = build_datamodule(cfg), build_datamodule(compose_train(tmp_path, "trainer.max_epochs=1"))
    half.setup("fit"), full.setup("fit")  # the same cache folder: half's training split comes from it
    assert type(half).__name__ == "EveryOtherTrainingPair"
    assert len(half.splits["train"]) == (len(full.splits["train"]) + 1) // 2
    assert len(half.splits["dev"]) == len(full.splits["dev"])
