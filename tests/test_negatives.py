"""Negatives mined from the corpus for a ranking task of positive pairs alone (matching.data.negatives), and a run
on such a file (task=pairs_positives) through train, evaluate, predict (rank), export and serve."""

import json
import math

import numpy as np
import pytest
from conftest import FIXTURES, compose_train

from matching.data.negatives import BM25, Negatives, bm25_scorer, mine, normalized, words
from matching.data.pairs import Pair
from matching.errors import ConfigError

POSITIVES = FIXTURES / "pairs_positives"


def _pairs():
    rows = [json.loads(line) for line in (POSITIVES / "train.jsonl").read_text().splitlines()]
    return [Pair(r["query"], r["positive"], "1", r["query_id"]) for r in rows]


def test_bm25_by_hand():
    documents = [["a", "b", "a"], ["b", "c"], ["c"]]
    index = BM25(documents, k1=1.2, b=0.75)
    average = 2.0
    idf_a = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    idf_b = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    norm0 = 1.2 * (1 - 0.75 + 0.75 * 3 / average)
    expected0 = idf_a * 2 * 2.2 / (2 + norm0) + idf_b * 1 * 2.2 / (1 + norm0)
    norm1 = 1.2 * (1 - 0.75 + 0.75 * 2 / average)
    expected1 = idf_b * 1 * 2.2 / (1 + norm1)
    np.testing.assert_allclose(index.scores(["a", "b", "zzz"]), [expected0, expected1, 0.0])
    assert words("  The Eiffel-Tower, 330 m! ") == ["the", "eiffel", "tower", "330", "m"]


def test_mined_negatives_are_never_a_positive_of_their_query():
    pairs = _pairs()
    # a near-duplicate of a positive (case and spaces) is the same text: it must not be drawn for q7
    pairs.append(Pair("how tall is the eiffel tower", "water boils AT 100 degrees  celsius at sea level.", "1", "q1"))
    mined = mine(pairs, 5, Negatives(k=5, rank_max=None), bm25_scorer, "0", "1")
    positives = {}
    for p in pairs:
        positives.setdefault(p.group, set()).add(normalized(p.b))
    assert mined and all(normalized(m["b"]) not in positives[m["group"]] for m in mined)
    assert all(m["label"] == "0" for m in mined)
    assert {m["group"] for m in mined} == {p.group for p in pairs}
    assert all(sum(m["group"] == g for m in mined) == 5 for g in positives)
    # the two spellings of one answer are one candidate: never twice for a query
    for group in positives:
        texts = [normalized(m["b"]) for m in mined if m["group"] == group]
        assert len(texts) == len(set(texts))


def test_mining_respects_the_rank_range_and_the_margin():
    pairs = _pairs()
    everything = mine(pairs, 100, Negatives(k=100, rank_max=None), bm25_scorer, "0", "1")
    ranked = mine(pairs, 3, Negatives(k=3, rank_min=2, rank_max=6), bm25_scorer, "0", "1")
    for group in {p.group for p in pairs}:
        full = [m["b"] for m in everything if m["group"] == group]  # every candidate, best first
        assert [m["b"] for m in ranked if m["group"] == group] == full[2:5]
        assert [m["rank"] for m in ranked if m["group"] == group] == [2, 3, 4]
    wide = mine(pairs, 100, Negatives(k=100, rank_max=None, margin=0.5), bm25_scorer, "0", "1")
    index = {normalized(t): i for i, t in enumerate(dict.fromkeys(p.b for p in pairs))}
    for p in pairs:
        texts = list(dict.fromkeys(q.b for q in pairs))
        scores = bm25_scorer([p.a], texts)[0]
        lowest = min(scores[index[normalized(q.b)]] for q in pairs if q.group == p.group)
        assert all(m["score"] <= lowest - 0.5 for m in wide if m["group"] == p.group)


def test_random_sampling_is_seeded():
    pairs = _pairs()
    draw = lambda seed: mine(pairs, 3, Negatives(k=3, sampling="random", seed=seed, rank_max=8), bm25_scorer, "0", "1")  # noqa: E731
    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    within = mine(pairs, 100, Negatives(k=100, rank_max=8), bm25_scorer, "0", "1")
    allowed = {(m["group"], m["b"]) for m in within}
    assert all((m["group"], m["b"]) in allowed for m in draw(3))  # drawn from the rank range only


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"method": "dense"}, "task.negatives.method"),
        ({"rank_min": 5, "rank_max": 5}, "rank_min"),
        ({"k": 0}, "task.negatives.k"),
        ({"method": "ckpt"}, "task.negatives.ckpt=<run dir"),
    ],
)
def test_settings_are_checked(settings, words):
    with pytest.raises(ConfigError, match=words.replace(".", r"\.").replace("<", ".")):
        Negatives(**settings)


def _mined_file(run_dir, split):
    header, *rows = (run_dir / "negatives" / f"{split}.jsonl").read_text().splitlines()
    return json.loads(header), [json.loads(r) for r in rows]


@pytest.fixture(scope="module")
def positives_run(tmp_path_factory):
    """A 2-epoch listwise run on the positives-only JSON Lines fixture: (run directory, metrics)."""
    from matching.training.run import train

    cfg = compose_train(
        tmp_path_factory.mktemp("positives"), "task=pairs_positives", "trainer.max_epochs=2", "loss=listwise",
        f"task.splits.train.path={POSITIVES / 'train.jsonl'}", f"task.splits.dev.path={POSITIVES / 'dev.jsonl'}",
    )  # fmt: skip
    return cfg.paths.output_dir, train(cfg)


def test_a_positives_only_run_trains_on_mined_negatives_and_keeps_them(positives_run):
    from pathlib import Path

    run_dir, metrics = Path(positives_run[0]), positives_run[1]
    header, train_rows = _mined_file(run_dir, "train")
    assert header["source"] == "bm25" and header["pairs"] == len(train_rows) == 12 * 4
    _, dev_rows = _mined_file(run_dir, "dev")
    assert len(dev_rows) == 8 * 7  # each of the 8 dev queries among the other 7 dev texts
    assert metrics["val/questions"] == 8 and 0 < metrics["val/mrr10"] <= 1
    # the dev positives ranked among the mined candidates, saved with their scores
    pairs = (run_dir / "scores" / "val_pairs.csv").read_text().splitlines()
    assert len(pairs) == 1 + 8 + 56 and pairs[0].startswith("unit,")
    examples = json.loads((run_dir / "examples.json").read_text())["examples"]
    assert examples  # the server's page offers dev questions with their mined candidates


def test_evaluate_predict_export_and_serve_a_positives_only_run(positives_run, tmp_path, capsys):
    from pathlib import Path

    from conftest import evaluate

    from matching import Matcher
    from matching.export import main as export_main
    from matching.predict import main as predict_main

    run_dir = Path(positives_run[0])
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    dev = evaluate(ckpt)  # the dev split again, its mined candidates from the run's folder
    for name in ("mrr10", "ndcg10", "map", "p1"):
        assert dev[f"val/{name}"] == pytest.approx(positives_run[1][f"val/{name}"])
    labelled = FIXTURES / "pairs_rank" / "dev.tsv"  # a labelled ranking file: ranked as it is
    scored = evaluate(ckpt, overrides=[f"input={labelled}"], out=tmp_path / "scored.json")
    assert scored["input/questions"] == 2 and {"input/mrr10", "input/ndcg10", "input/p1"} <= set(scored)

    query, candidates = "who wrote hamlet", ["Hamlet is a tragedy by William Shakespeare.", "Jupiter is large."]
    lines = [json.dumps({"query": query, "positive": c}) for c in candidates]
    (tmp_path / "new.jsonl").write_text("\n".join(lines) + "\n")
    assert predict_main([f"ckpt={ckpt}", f"input={tmp_path / 'new.jsonl'}", f"output={tmp_path / 'out.jsonl'}"]) == 0
    (ranked,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    expected = Matcher.load(run_dir).rank(query, candidates)
    assert [r["b"] for r in ranked["ranking"]] == [e["candidate"] for e in expected]

    assert export_main([f"ckpt={ckpt}", "format=torchscript", f"out={tmp_path / 'export'}"]) == 0
    assert (tmp_path / "export" / "model.pt").is_file()

    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from matching.serving.server import serving

    with serving(ckpt, ["threads=1"]) as url:
        answer = httpx.post(f"{url}/rank", json={"query": query, "candidates": candidates}, timeout=60)
    assert answer.status_code == 200, answer.text
    served = answer.json()["ranking"]
    assert [r["candidate"] for r in served] == [e["candidate"] for e in expected]
    assert [r["score"] for r in served] == pytest.approx([e["score"] for e in expected], abs=1e-5)


@pytest.mark.parametrize("method", ["vectors", "ckpt"])
def test_mining_by_static_vectors_or_by_a_trained_run(positives_run, tmp_path, method):
    from pathlib import Path

    from matching.training.build import build_datamodule

    extra = [f"task.negatives.ckpt={positives_run[0]}"] if method == "ckpt" else []
    cfg = compose_train(
        tmp_path, "task=pairs_positives", f"task.negatives.method={method}", "task.negatives.k=2", *extra,
        f"task.splits.train.path={POSITIVES / 'train.jsonl'}", f"task.splits.dev.path={POSITIVES / 'dev.jsonl'}",
    )  # fmt: skip
    build_datamodule(cfg).prepare_splits(["train"])
    header, rows = _mined_file(Path(cfg.paths.output_dir), "train")
    assert header["source"] == method and len(rows) == 12 * 2
    positives = {(p.group, normalized(p.b)) for p in _pairs()}
    assert not any((r["group"], normalized(r["b"])) in positives for r in rows)
    if method == "vectors":  # cosines, best first within each query
        for group in {r["group"] for r in rows}:
            scores = [r["score"] for r in rows if r["group"] == group]
            assert scores == sorted(scores, reverse=True) and all(-1 <= s <= 1 for s in scores)


def test_vectors_need_static_vectors(tmp_path):
    from matching.training.build import build_datamodule

    cfg = compose_train(
        tmp_path, "task=pairs_positives", "task.negatives.method=vectors", "embeddings=random",
        f"task.splits.train.path={POSITIVES / 'train.jsonl'}", f"task.splits.dev.path={POSITIVES / 'dev.jsonl'}",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="static word vectors"):
        build_datamodule(cfg).prepare_splits(["train"])


def test_every_run_keeps_and_logs_its_own_mined_lists_with_a_shared_cache(tmp_path, caplog):
    """Two runs with the same settings and cache folder: the second mines again (or reads its own folder), keeps the
    lists in its folder and logs them; a prepared corpus in the shared cache would have skipped all three."""
    import logging

    from matching.training.build import build_datamodule

    folders = []
    for name in ("first", "second"):
        cfg = compose_train(
            tmp_path, "task=pairs_positives",
            f"task.splits.train.path={POSITIVES / 'train.jsonl'}", f"task.splits.dev.path={POSITIVES / 'dev.jsonl'}",
        )  # fmt: skip
        run_dir = tmp_path / name
        with caplog.at_level(logging.INFO, logger="matching.data.negatives"):
            caplog.clear()
            build_datamodule(cfg, run_dir=run_dir).setup("fit")
        assert "train: 48 negatives mined by bm25" in caplog.text
        folders.append(run_dir)
    first, second = (_mined_file(f, "train") for f in folders)
    assert first == second and first[0]["pairs"] == 48


def test_a_run_finds_its_mined_lists_when_the_candidate_corpus_is_copied_and_mines_again_when_it_changes(
    tmp_path, caplog
):
    """The candidate corpus is named by its content in the mined lists' key: a copy elsewhere with new times (a
    cluster node's scratch disk) reads the run's lists back; a corpus with other texts mines them again."""
    import logging
    import os
    import shutil

    from matching.training.build import build_datamodule

    texts = [json.loads(line)["positive"] for line in (POSITIVES / "train.jsonl").read_text().splitlines()]
    original = tmp_path / "here" / "candidates.txt"
    original.parent.mkdir()
    original.write_text("\n".join(texts + ["the moon orbits the earth", "paris is in france"]) + "\n")
    copy = tmp_path / "there" / "candidates.txt"
    copy.parent.mkdir()
    shutil.copyfile(original, copy)
    os.utime(copy, ns=(original.stat().st_mtime_ns + 10**10,) * 2)
    changed = tmp_path / "changed" / "candidates.txt"
    changed.parent.mkdir()
    changed.write_text("\n".join(texts + ["an entirely different text about rivers"]) + "\n")

    def mined(corpus):
        cfg = compose_train(
            tmp_path, "task=pairs_positives", f"task.negatives.corpus={corpus}",
            f"task.splits.train.path={POSITIVES / 'train.jsonl'}", f"task.splits.dev.path={POSITIVES / 'dev.jsonl'}",
        )  # fmt: skip
        with caplog.at_level(logging.INFO, logger="matching.data.negatives"):
            caplog.clear()
            build_datamodule(cfg, run_dir=tmp_path / "run").setup("fit")
        return "train: 48 negatives from the cache" in caplog.text, "train: 48 negatives mined" in caplog.text

    assert mined(original) == (False, True)
    assert mined(copy) == (True, False)
    assert mined(changed) == (False, True)
