"""Any pair corpus without code (task=pairs, task=pairs_rank, the presets mrpc, qqp, paws): tables in TSV, CSV, JSON
Lines and Parquet, Hugging Face datasets saved to disk or on the hub, their columns named by options or found by
their usual names, label names from the data; and every command on such a run."""

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, compose_train, evaluate
from omegaconf import OmegaConf

from matching.data.encoding import LabelError
from matching.data.pairs import Pair
from matching.data.tables import read_pair_table
from matching.errors import DataFormatError
from matching.training.run import train

OWN = FIXTURES / "own"
CLAIMS = [f"task.splits.train.path={OWN / 'claims_train.tsv'}", f"task.splits.dev.path={OWN / 'claims_dev.tsv'}",
          "task.columns.a=claim", "task.columns.b=evidence", "task.columns.label=verdict"]  # fmt: skip


def trained(tmp_path: Path, *overrides: str) -> tuple[Path, dict]:
    cfg = compose_train(tmp_path, *overrides, "trainer.max_epochs=2")
    return Path(cfg.paths.output_dir), train(cfg)


def test_a_tsv_with_its_own_column_names_trains_and_every_command_uses_the_run(tmp_path, capsys):
    from matching import Matcher
    from matching.export import main as export_main
    from matching.predict import main as predict_main
    from matching.report import main as report_main
    from matching.visualize import main as visualize_main

    run, metrics = trained(tmp_path, "task=pairs", *CLAIMS)
    assert 0 <= metrics["val/acc"] <= 1
    saved = OmegaConf.load(run / "config.yaml")
    assert list(saved.task.labels) == ["refutes", "supports"]  # the values of the training split, sorted
    assert saved.task.reader._target_ == "matching.data.tables.read_pair_table" and saved.task.reader.a == "claim"
    ckpt = run / "checkpoints" / "best.ckpt"
    assert evaluate(ckpt)["val/acc"] == pytest.approx(metrics["val/acc"])
    pairs = tmp_path / "new.tsv"
    pairs.write_text("The shop is open.\tThe shop is closed.\n")
    assert predict_main([f"ckpt={ckpt}", f"input={pairs}", f"output={tmp_path / 'out.jsonl'}"]) == 0
    answer = json.loads((tmp_path / "out.jsonl").read_text())
    assert answer["label"] in ("refutes", "supports") and set(answer["probs"]) == {"refutes", "supports"}
    assert visualize_main([f"ckpt={ckpt}", "a=A dog sleeps.", "b=An animal rests.", f"out={tmp_path / 'v.png'}"]) == 0
    assert export_main([f"ckpt={ckpt}", "format=hub", f"out={tmp_path / 'shared'}"]) == 0
    shared = Matcher.load(tmp_path / "shared").predict([("The shop is open.", "The shop is closed.")])
    assert shared[0]["probs"] == pytest.approx(answer["probs"], abs=1e-5)
    assert report_main([f"runs={run}", f"out={tmp_path / 'report'}"]) == 0
    assert "| claims |" in (tmp_path / "report" / "report.md").read_text()  # the task is named by its file
    capsys.readouterr()


def test_a_json_lines_ranking_corpus_with_a_group_column(tmp_path):
    run, metrics = trained(
        tmp_path, "task=pairs_rank", f"task.splits.train.path={OWN / 'ranking_train.jsonl'}",
        f"task.splits.dev.path={OWN / 'ranking_dev.jsonl'}", "task.columns.a=query_text",
        "task.columns.b=candidate_text", "task.columns.label=relevant",
    )  # fmt: skip
    assert 0 < metrics["val/map"] <= 1 and 0 < metrics["val/mrr"] <= 1
    assert list(OmegaConf.load(run / "config.yaml").task.labels) == ["0", "1"]  # numeric order: "1" is the match
    pairs = list(read_pair_table(OWN / "ranking_dev.jsonl", a="query_text", b="candidate_text", label="relevant"))
    assert [p.group for p in pairs] == ["v0", "v0", "v1", "v1", "v1"]  # the qid column, found by its name


def test_a_hugging_face_dataset_saved_to_disk_takes_its_classlabel_names(tmp_path, caplog):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["yes", "maybe", "no"])})  # fmt: skip
    rows = [json.loads(line) for line in (FIXTURES / "snli" / "snli_1.0_train.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["gold_label"] != "-"]
    names = {"entailment": 0, "neutral": 1, "contradiction": 2}
    table = {
        "premise": [r["sentence1"] for r in rows] + ["An unlabelled pair."],
        "hypothesis": [r["sentence2"] for r in rows] + ["GLUE's test rows look like this."],
        "label": [names[r["gold_label"]] for r in rows] + [-1],
    }
    dataset = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(table, features=features), "validation": datasets.Dataset.from_dict(
            {k: v[:6] for k, v in table.items()}, features=features)}
    )  # fmt: skip
    dataset.save_to_disk(str(tmp_path / "nli"))
    with caplog.at_level("INFO"):
        run, metrics = trained(
            tmp_path, "task=pairs", f"task.splits.train.path={tmp_path / 'nli' / 'train'}",
            f"task.splits.dev.path={tmp_path / 'nli' / 'validation'}",
        )  # fmt: skip
    assert list(OmegaConf.load(run / "config.yaml").task.labels) == ["yes", "maybe", "no"]  # declared, not sorted
    assert f"read {len(rows)} pairs" in caplog.text and "dropped 1 without a label" in caplog.text
    with pytest.raises(DataFormatError, match=r"holds a dataset with the splits \['train', 'validation'\]"):
        list(read_pair_table(tmp_path / "nli"))


@pytest.mark.parametrize(("task", "labels"), [("mrpc", ["not_equivalent", "equivalent"]),
                                              ("qqp", ["not_duplicate", "duplicate"])])  # fmt: skip
def test_the_glue_presets_read_the_hubs_parquet_files_with_their_label_names(tmp_path, task, labels):
    """The fixtures are Parquet files as the hub holds them (features, ClassLabel included, in the schema's
    metadata); GLUE's test rows have no label (−1), so the presets have no test split."""
    pytest.importorskip("pyarrow")
    run, metrics = trained(tmp_path, f"task={task}")
    saved = OmegaConf.load(run / "config.yaml")
    assert list(saved.task.labels) == labels and saved.task.test_splits == [] and "val/acc" in metrics
    test = FIXTURES / "glue" / task / "test-00000-of-00001.parquet"
    assert list(read_pair_table(test)) == []  # every row unlabelled: dropped


def test_the_paws_preset_reads_the_original_release(tmp_path):
    run, metrics = trained(tmp_path, "task=paws")
    assert list(OmegaConf.load(run / "config.yaml").task.labels) == ["0", "1"] and "val/acc" in metrics


def test_a_dataset_on_the_hub_by_name(tmp_path, monkeypatch):
    """task.hub.name: the splits come from datasets.load_dataset (here a stand-in: nothing downloads in tests),
    columns found by their usual names, labels from its ClassLabel."""
    datasets = pytest.importorskip("datasets")
    from matching.data import sources

    features = datasets.Features({"question1": datasets.Value("string"), "question2": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["not_duplicate", "duplicate"])})  # fmt: skip
    rows = {"question1": ["How do I learn Python?", "What is the capital of France?", "How old is the moon?"] * 3,
            "question2": ["What is the best way to learn Python?", "How tall is Everest?", "What age is the moon?"] * 3,
            "label": [1, 0, 1] * 3}  # fmt: skip
    asked = []

    def load_dataset(name, config=None, split=None, cache_dir=None):
        asked.append((name, config, split))
        return datasets.Dataset.from_dict(rows, features=features)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(sources, "check_reachable", lambda: None)
    run, metrics = trained(tmp_path, "task=pairs", f"paths.data_dir={tmp_path}", "task.hub.name=someone/questions",
                           "task.hub.config=pairs")  # fmt: skip
    assert ("someone/questions", "pairs", "train") in asked and ("someone/questions", "pairs", "validation") in asked
    assert list(OmegaConf.load(run / "config.yaml").task.labels) == ["not_duplicate", "duplicate"]


def test_columns_are_found_by_their_usual_names_else_the_first_two_text_columns(tmp_path):
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('Sentence1,Sentence2,Label\n"A man, tall, sleeps.",A person rests.,1\n')
    assert list(read_pair_table(csv_file)) == [Pair("A man, tall, sleeps.", "A person rests.", "1", None, 2)]
    other = tmp_path / "other.tsv"
    other.write_text("n\tleft side\tright side\tgold\n7\tA dog runs in the park.\tAn animal moves.\t1.0\n")
    assert list(read_pair_table(other, label="gold")) == [Pair("A dog runs in the park.", "An animal moves.", "1")]


def test_a_missing_column_names_the_columns_there_are():
    with pytest.raises(DataFormatError, match=r"no column 'answer' \(task.columns.b\); the columns are "
                       r"\['pair_id', 'claim', 'evidence', 'verdict'\]"):  # fmt: skip
        list(read_pair_table(OWN / "claims_train.tsv", a="claim", b="answer", label="verdict"))


def test_an_unknown_label_value_names_the_file_and_row(tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text((OWN / "claims_dev.tsv").read_text().replace("refutes", "unsure", 1))
    cfg = compose_train(tmp_path, "task=pairs", *CLAIMS, f"task.splits.dev.path={dev}", "trainer.max_epochs=1")
    with pytest.raises(LabelError, match=rf"{dev}, line 3: label 'unsure' is outside the task's label space"):
        train(cfg)


def test_a_run_without_files_says_how_to_give_them(tmp_path):
    from matching.data.sources import CorpusNotFoundError

    with pytest.raises(CorpusNotFoundError, match=r"task=pairs reads your own pairs: point task.splits.train.path"):
        train(compose_train(tmp_path, "task=pairs", f"paths.data_dir={tmp_path}"))
