"""benchmarks/cross_encoder.py's comparison of our runs' seeds with the CrossEncoder's (no CrossEncoder is trained
here: score files are written as runs and the benchmark writes them)."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import load_by_path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cross_encoder.py"


@pytest.fixture(scope="module")
def bench():
    return load_by_path("cross_encoder_bench", SCRIPT)


def _write_run(folder: Path, ap: np.ndarray, minutes: float, ours: bool) -> None:
    """A run's dev score file (questions with one positive among 5 candidates, so every one is in the filtered
    protocol) and its metrics.json, in the form our runs (train_seconds) or the CrossEncoder's (train_minutes) have."""
    (folder / "scores").mkdir(parents=True)
    with open(folder / "scores" / "val.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["unit", "question", "candidates", "positives", "ap", "rr"])
        writer.writeheader()
        for i, value in enumerate(ap):
            writer.writerow({"unit": f"Q{i}", "question": f"q{i}", "candidates": 5, "positives": 1,
                             "ap": float(value), "rr": float(value)})  # fmt: skip
        writer.writerow({"unit": "Qall", "question": "no negative", "candidates": 2, "positives": 2, "ap": 1, "rr": 1})
    metrics = {"train_seconds": 60 * minutes} if ours else {"train_minutes": minutes}
    (folder / "metrics.json").write_text(json.dumps(metrics))


def test_each_family_against_the_cross_encoders_seeds_holm_adjusted(bench, tmp_path):
    rng = np.random.default_rng(0)
    questions = 120
    base = rng.choice([1.0, 0.5, 1 / 3, 0.25], size=questions)
    out = tmp_path / "cross_encoder"
    for seed in (1, 2, 3):
        _write_run(out / f"seed{seed}", base * rng.uniform(0.97, 1.0, questions), 25.0, ours=False)
        better = np.minimum(1.0, base * 1.6 * rng.uniform(0.97, 1.0, questions))
        _write_run(tmp_path / "study" / "coda_n2" / "embeddings.trainable_layers=2" / f"seed{seed}", better, 12.0, True)
        _write_run(tmp_path / "study" / "coda_n0" / "default" / f"seed{seed}", base * rng.uniform(0.97, 1.0, questions),
                   2.0, True)  # fmt: skip
    globs = dict(bench.named_glob(spec) for spec in (
        f"n2={tmp_path}/study/coda_n2/*/seed*", f"{tmp_path}/study/coda_n0/*/seed*"))  # fmt: skip
    assert set(globs) == {"n2", "ours"}
    assert bench.named_glob(f"{tmp_path}/x/a=b/seed*") == ("ours", f"{tmp_path}/x/a=b/seed*")

    table = bench.compare(globs, out, [1, 2, 3])
    rows = {row["name"]: row for row in table["compared"]}
    better, level = rows["n2"], rows["ours"]
    assert better["seeds"] == 3 and better["questions"] == questions  # the all-positive question is not counted
    assert better["verdict"] == "resolved" and better["low"] > 0
    assert level["verdict"] == "not resolved" and level["low"] < 0 < level["high"]
    for row in (better, level):
        assert row["p_holm"] >= row["p"]
        assert row["difference"] == pytest.approx(row["map"]["mean"] - table["cross_encoder"]["map"]["mean"])
    assert better["train_minutes"] == pytest.approx(12.0) and table["cross_encoder"]["train_minutes"] == 25.0
    assert len(better["map"]["values"]) == 3 and not math.isnan(better["map"]["std"])

    markdown = bench.comparison_markdown(table)
    assert markdown.splitlines()[-1].startswith("| CrossEncoder | 3 |")
    assert f"{better['difference']:+.2f}" in markdown


def test_a_glob_that_finds_nothing_is_named(bench, tmp_path):
    out = tmp_path / "cross_encoder"
    _write_run(out / "seed1", np.ones(3), 1.0, ours=False)
    with pytest.raises(ValueError, match="n2: no run folders"):
        bench.compare({"n2": str(tmp_path / "nothing" / "seed*")}, out, [1])


def test_the_study_page_publishes_the_cross_encoders_small_files_and_its_table_says_what_is_missing(bench, tmp_path):
    from matching.results.publish import page_data, push
    from matching.studies.published.fine_tuning import table as fine_tuning_table

    source = tmp_path / "outputs" / "studies" / "fine_tuning"
    out = source / "cross_encoder" / "wikiqa"
    _write_run(out / "seed1", np.array([1.0, 0.5, 0.25]), 20.0, ours=False)
    (out / "seed1" / "model").mkdir()
    (out / "seed1" / "model" / "model.safetensors").write_bytes(b"weights")
    (out / "comparison.json").write_text(json.dumps({"cross_encoder": {}, "compared": []}))
    push("fine_tuning", root=tmp_path, source=source)
    target = tmp_path / "docs" / "studies" / "fine_tuning"
    published = target / "cross_encoder" / "wikiqa"
    assert (published / "seed1" / "scores" / "val.csv").is_file() and (published / "seed1" / "metrics.json").is_file()
    assert not (published / "seed1" / "model").exists()  # the weights stay in outputs/
    assert page_data(target) == [published / "comparison.json"]  # no study.csv: nothing run yet
    table = fine_tuning_table(target)
    assert table.count("not run yet") == 2  # WikiQA and TrecQA


def test_the_headline_gives_each_compared_task_its_best_fine_tuned_family(tmp_path):
    from matching.studies.published.fine_tuning import headline as fine_tuning_headline
    from matching.studies.spec import Primary

    def row(name, mean, low, high):
        return {"name": name, "map": {"mean": mean, "std": 0.5}, "seeds": 3, "difference": mean - 70.0, "low": low,
                "high": high, "verdict": "resolved" if low > 0 else "not resolved", "p_holm": 0.04,
                "train_minutes": 8.0}  # fmt: skip

    assert "not run yet" in fine_tuning_headline(tmp_path)
    ce = {"map": {"mean": 70.0, "std": 1.0}, "seeds": 3, "train_minutes": 50.0}
    for task, compared in (("trecqa", [row("coda_frozen", 75.0, 1, 9), row("coda_n2", 73.0, 1, 5)]),
                           ("wikiqa", [row("coda_n1", 72.5, -1, 6), row("coda_n2", 71.0, -2, 4)])):  # fmt: skip
        (tmp_path / "cross_encoder" / task).mkdir(parents=True)
        (tmp_path / "cross_encoder" / task / "comparison.json").write_text(
            json.dumps({"cross_encoder": ce, "compared": compared})
        )
    headline = fine_tuning_headline(tmp_path, primary={})  # no declared comparison: the best on dev, said so
    wikiqa, trecqa = headline.split(" TrecQA clean-dev: ")
    assert (
        wikiqa.startswith(
            "coda_n1 (selected: the fine-tuned family with the best dev MAP, reported on the same dev questions): "
            "WikiQA dev MAP **72.50 ± 0.50** against 70.00 ± 1.00"
        )
        and "not resolved" in wikiqa
    )
    assert (
        trecqa.startswith("coda_n2, MAP **73.00 ± 0.50**") and "+3.00 [+1.00, +5.00], resolved" in trecqa
    )  # frozen: not a fine-tuned family
    declared = {task: Primary("coda_n2", "cross_encoder") for task in ("wikiqa", "trecqa")}
    headline = fine_tuning_headline(tmp_path, primary=declared)  # the declared family, whatever its dev score
    assert headline.startswith("coda_n2 (the study's primary comparison, declared before its runs): WikiQA dev MAP "
                               "**71.00 ± 0.50**")  # fmt: skip


def test_the_cross_encoders_score_file_ranks_ties_by_the_projects_rule(bench):
    """A CrossEncoder's per-question AP and RR are matching's own (`question_scores`): a tie puts the incorrect
    candidate first, as our runs' score files do, so the two sides are scored alike."""
    questions = [("tied", ["right", "wrong"], [1, 0]), ("clear", ["wrong", "right"], [0, 1]), ("none", ["a"], [0])]
    scores = [np.array([0.5, 0.5]), np.array([0.1, 0.9]), np.array([0.3])]
    rows = bench.question_rows(["Q1", "Q2", "Q3"], questions, scores)
    assert [(r["unit"], r["candidates"], r["positives"], r["ap"], r["rr"]) for r in rows] == [
        ("Q1", 2, 1, 0.5, 0.5), ("Q2", 2, 1, 1.0, 1.0), ("Q3", 1, 0, 0.0, 0.0)]  # fmt: skip


def test_the_rerank_benchmark_reads_a_task_split_as_the_runs_do(monkeypatch, tmp_path):
    """bench_rerank.py --task: a ranking task's dev split through matching's own reader gives the questions, their
    candidates and labels that the same corpus's file gives read as a table; a classification task is refused."""
    monkeypatch.chdir(tmp_path)  # the reader's cache goes under the working folder's data/cache
    rerank = load_by_path("bench_rerank", SCRIPT.parent / "bench_rerank.py")
    fixtures = Path(__file__).parent / "fixtures"
    ids, questions = rerank.ranking_questions("wikiqa", "dev", fixtures)
    table = rerank.read_questions(
        fixtures / "wikiqa" / "WikiQA-dev.tsv", ["Question", "Sentence", "QuestionID", "Label"], 0
    )
    assert len(ids) == len(set(ids)) == len(questions) > 0
    assert questions == table
    _, trec = rerank.ranking_questions("trecqa", "dev", fixtures)
    assert trec and all(len(candidates) == len(labels) and set(labels) <= {0, 1} for _, candidates, labels in trec)
    with pytest.raises(SystemExit, match="ranking task"):
        rerank.ranking_questions("snli", "dev", fixtures)


def test_dev_selection_keeps_the_dev_best_epoch_and_its_weights(bench, tmp_path):
    """--select best: dev is scored after every epoch (sentence-transformers calls the evaluator), each epoch's
    figures go to epochs.jsonl, and the dev-best epoch's weights and score rows are kept (a tie keeps the earlier)."""
    import torch

    questions = [(f"q{i}", ["right", "wrong"], [1, 0]) for i in range(4)]
    ids = [f"Q{i}" for i in range(4)]

    class Model:  # a CrossEncoder as the evaluator sees it: predict() and the module's weights
        def __init__(self):
            self.model = torch.nn.Linear(1, 1)
            self.right = 0

        def predict(self, pairs, **kwargs):  # the first `right` questions rank their answer first
            question = int(pairs[0][0][1:])
            return [1.0, 0.0] if question < self.right else [0.0, 1.0]

    model, selection = Model(), bench.DevSelection((ids, questions), tmp_path)
    for epoch, (right, weight) in enumerate([(1, 1.0), (3, 2.0), (2, 3.0), (3, 4.0)]):
        model.right = right
        with torch.no_grad():
            model.model.weight.fill_(weight)
        selection(model, epoch=epoch, train_minutes=float(epoch))
    assert [e["epoch"] for e in selection.epochs] == [1, 2, 3, 4]
    assert [round(e["val/map"], 3) for e in selection.epochs] == [0.625, 0.875, 0.75, 0.875]
    assert selection.best["epoch"] == 2 and float(selection.best_state["weight"]) == 2.0
    assert [r["ap"] for r in selection.best_rows] == [1.0, 1.0, 1.0, 0.5]
    lines = (tmp_path / "epochs.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3, 4]


def _tiny_cross_encoder(folder: Path):
    """A CrossEncoder over a two-layer BERT of width 16 with a 40-word vocabulary, built from a config (nothing
    downloaded)."""
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    if not (folder / "config.json").is_file():
        words = "a man dog cat plays runs sleeps on the guitar sofa park what who is does where music".split()
        folder.mkdir(parents=True)
        (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
        BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
        config = BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=64, num_labels=1)  # fmt: skip
        torch.manual_seed(0)
        BertForSequenceClassification(config).save_pretrained(folder)
    return CrossEncoder(str(folder), num_labels=1, device="cpu", max_length=32)


def _fine_tuning_setup(bench, folder: Path, seed: int = 1):
    """What train_seed builds before fine-tuning: the seeds, the model, the shuffled loader."""
    from sentence_transformers import InputExample
    from torch.utils.data import DataLoader

    _tiny_cross_encoder(folder / "start")  # written once, before the seeds (building it draws random numbers)
    torch.manual_seed(seed)
    questions = ["what plays music", "who runs in the park", "where does the cat sleep"]
    answers = ["a man plays the guitar", "the dog runs", "the cat sleeps on the sofa", "a man is in the park"]
    examples = [InputExample(texts=[q, a], label=float((i + j) % 3 == 0)) for i, q in enumerate(questions)
                for j, a in enumerate(answers)]  # fmt: skip
    model = _tiny_cross_encoder(folder / "start")
    loader = DataLoader(examples, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed))
    return model, loader


def test_fine_tune_is_sentence_transformers_fit_step_for_step(bench, tmp_path):
    """The seeds trained with sentence-transformers' own fit and those trained by fine_tune are the same recipe:
    from one seed, the same weights to the bit."""
    pytest.importorskip("sentence_transformers")
    theirs, loader = _fine_tuning_setup(bench, tmp_path)
    theirs.old_fit(loader, epochs=3, warmup_steps=int(0.1 * 3 * len(loader)), optimizer_params={"lr": 2e-5},
                   save_best_model=False, show_progress_bar=False)  # fmt: skip
    ours, loader = _fine_tuning_setup(bench, tmp_path)
    recipe = {"epochs": 3}
    bench.fine_tune(ours, loader, 3, None, tmp_path / "resume.pt", recipe)
    start = _tiny_cross_encoder(tmp_path / "start").model.state_dict()
    for name, weight in theirs.model.state_dict().items():
        assert torch.equal(weight, ours.model.state_dict()[name]), name
    assert any(not torch.equal(w, start[n]) for n, w in ours.model.state_dict().items())


def test_a_seed_stopped_between_epochs_continues_with_the_numbers_of_an_unbroken_run(bench, tmp_path):
    """A sitting ends during epoch 2 (here: the selection is interrupted while scoring it, after epoch 1's resume
    file): the same command continues from epoch 1 and ends with the weights, the per-epoch record and the kept
    epoch of a run never stopped; a resume file of another recipe is not used."""
    pytest.importorskip("sentence_transformers")
    ids, dev = ["Q0", "Q1"], [("what plays music", ["a man plays the guitar", "the dog runs"], [1, 0]),
                              ("who runs", ["the cat sleeps", "the dog runs in the park"], [0, 1])]  # fmt: skip
    recipe = {"epochs": 3}

    def run(folder: Path, stop_at: int | None = None):
        folder.mkdir(exist_ok=True)
        model, loader = _fine_tuning_setup(bench, tmp_path)
        if stop_at is not None:
            stopping = _stopping(bench, (ids, dev), folder, stop_at)
            with pytest.raises(KeyboardInterrupt):
                bench.fine_tune(model, loader, 3, stopping, folder / "resume.pt", recipe)
            return None
        selection = bench.DevSelection((ids, dev), folder)
        bench.fine_tune(model, loader, 3, selection, folder / "resume.pt", recipe)
        return model, selection

    unbroken_model, unbroken = run(tmp_path / "unbroken")
    run(tmp_path / "stopped", stop_at=1)
    assert torch.load(tmp_path / "stopped" / "resume.pt", weights_only=False)["epoch"] == 1
    resumed_model, resumed = run(tmp_path / "stopped")
    for name, weight in unbroken_model.model.state_dict().items():
        assert torch.equal(weight, resumed_model.model.state_dict()[name]), name
    assert [e["val/map"] for e in resumed.epochs] == [e["val/map"] for e in unbroken.epochs]
    assert resumed.best["epoch"] == unbroken.best["epoch"]
    assert (tmp_path / "stopped" / "epochs.jsonl").read_text().count("\n") == 3

    other = tmp_path / "other"
    run(other, stop_at=2)
    bench.fine_tune(*_fine_tuning_setup(bench, tmp_path), 4, bench.DevSelection((ids, dev), other),
                    other / "resume.pt", {"epochs": 4})  # fmt: skip
    assert (other / "epochs.jsonl").read_text().count("\n") == 4  # started again: its 2 epochs were not reused


def _stopping(bench, dev, folder: Path, stop_at: int):
    """The benchmark's dev selection, interrupted (a sitting's end) while it scores epoch `stop_at` (from 0)."""

    class Stopping(bench.DevSelection):
        def __call__(self, model, epoch, train_minutes):
            if epoch == stop_at:
                raise KeyboardInterrupt
            return super().__call__(model, epoch, train_minutes)

    return Stopping(dev, folder)
