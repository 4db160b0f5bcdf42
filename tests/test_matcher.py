"""The Python API: `Matcher` answers as `matching-predict` does, takes tuples, dicts and Pairs, keeps to the memory
budget, and says what is wrong with a bad path or a bad input in one sentence."""

import json

import numpy as np
import pytest
import torch

from matching import Matcher
from matching.data.pairs import Pair
from matching.data.preparation import BatchTooLargeError
from matching.errors import DataFormatError, RunError
from matching.predict import main as predict_main

NLI = [("A man plays a guitar.", "A person makes music."), ("Two dogs run in a field.", "The cats sleep."),
       ("A woman is reading a book.", "Somebody reads."), ("Kids play soccer outside today.", "Children.")]  # fmt: skip
QUERY = "how big is the moon"
CANDIDATES = ["The Moon is the fifth largest moon.", "Paris is in France.", "Its diameter is 3,474 km.",
              "The moon is Earth's only natural satellite and it is large."]  # fmt: skip


def predict_command(ckpt, pairs, tmp_path, capsys) -> list[dict]:
    """`matching-predict` on `pairs` (a JSON Lines file), its records."""
    file = tmp_path / "pairs.jsonl"
    file.write_text("".join(json.dumps({"a": a, "b": b}) + "\n" for a, b in pairs))
    capsys.readouterr()
    assert predict_main([f"ckpt={ckpt}", f"input={file}"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_predict_equals_the_predict_command_and_the_runs_logits(snli_run, tmp_path, capsys):
    run_dir, _ = snli_run
    matcher = Matcher.load(run_dir)
    answers = matcher.predict(NLI)
    expected = predict_command(run_dir / "checkpoints" / "best.ckpt", NLI, tmp_path, capsys)
    assert [a["label"] for a in answers] == [e["label"] for e in expected]
    for answer, record in zip(answers, expected, strict=True):
        assert answer["probs"] == pytest.approx(record["probs"], abs=1e-6)
        assert all(type(p) is float for p in answer["probs"].values())  # plain Python out
    from matching.inference import load

    logits = load(run_dir / "checkpoints" / "best.ckpt").logits([Pair(a, b, "") for a, b in NLI])
    direct = torch.softmax(torch.from_numpy(logits), dim=-1)
    got = np.array([[a["probs"][label] for label in matcher.labels] for a in answers])
    np.testing.assert_allclose(got, direct.numpy(), atol=1e-6)
    assert matcher.kind == "classify" and matcher.labels == ["entailment", "neutral", "contradiction"]


def test_rank_equals_the_predict_commands_ranking(wikiqa_run, tmp_path, capsys):
    run_dir, _ = wikiqa_run
    matcher = Matcher.load(run_dir / "checkpoints" / "best.ckpt")
    ranked = matcher.rank(QUERY, CANDIDATES)
    (expected,) = predict_command(run_dir / "checkpoints" / "best.ckpt", [(QUERY, c) for c in CANDIDATES], tmp_path,
                                  capsys)  # fmt: skip
    assert [r["index"] for r in ranked] == [e["line"] - 1 for e in expected["ranking"]]
    assert [r["candidate"] for r in ranked] == [e["b"] for e in expected["ranking"]]
    for r, e in zip(ranked, expected["ranking"], strict=True):
        assert r["score"] == pytest.approx(e["score"], abs=1e-6)
        assert r["p_match"] == pytest.approx(e["p_match"], abs=1e-6)
    assert matcher.rank(QUERY, CANDIDATES, top_k=2) == ranked[:2]
    assert matcher.rank(QUERY, []) == []
    scores = matcher.predict([(QUERY, c) for c in CANDIDATES])
    assert [s["score"] for s in scores] == [r["score"] for r in sorted(ranked, key=lambda r: r["index"])]
    logits = matcher.logits([(QUERY, c) for c in CANDIDATES])
    assert logits.dtype == np.float32 and logits.shape == (4, 2)
    np.testing.assert_allclose(logits[:, 1] - logits[:, 0], [s["score"] for s in scores], atol=1e-6)


def test_pairs_as_tuples_dicts_and_pairs_give_the_same_answers(snli_run):
    matcher = Matcher.load(snli_run[0])
    a, b = NLI[0]
    forms = [[(a, b)], [{"a": a, "b": b}], [{"premise": a, "hypothesis": b}], [Pair(a, b, "")], [[a, b]]]
    answers = [matcher.predict(form) for form in forms]
    assert all(answer == answers[0] for answer in answers)
    assert matcher.predict((a, b)) == answers[0][0]  # one pair, one answer
    assert matcher.predict(iter([(a, b)])) == answers[0]  # any iterable


@pytest.mark.parametrize(
    "pairs, words",
    [([("a", "b"), "just one string"], "pairs[1]: expected a pair of texts"),
     ([("a", "b"), {"text": "x"}], "pairs[1]: cannot tell which columns hold the two texts"),
     ([("a", "")], "pairs[0]: the second text is empty"),
     ([("a", 3)], "pairs[0]: expected a pair of texts")],
)  # fmt: skip
def test_a_bad_pair_is_named_by_its_position(snli_run, pairs, words):
    with pytest.raises(DataFormatError, match=words.replace("[", r"\[").replace("]", r"\]")):
        Matcher.load(snli_run[0]).predict(pairs)


def test_the_batch_budget_is_the_runs_and_can_be_set(snli_run):
    long = " ".join(["word"] * 30)
    pairs = [*NLI, (long, "A person makes music."), ("Kids.", long)]
    default = Matcher.load(snli_run[0])
    small = Matcher.load(snli_run[0], batch_tokens=64, batch_cells=1000)
    assert small._predictor.text.budget.tokens == 64 and default._predictor.text.budget.tokens == 65_536
    np.testing.assert_allclose(small.logits(pairs), default.logits(pairs), atol=1e-6)  # other batches, same scores
    with pytest.raises(BatchTooLargeError, match="pair 2 has 30 x 30 tokens"):
        Matcher.load(snli_run[0], batch_cells=500).predict([("a", "b"), (long, long)])
    cut = Matcher.load(snli_run[0], overrides={"data.max_length": 5})
    cut.predict([(long, "b")])
    assert cut.truncated == 1


def test_align_gives_tokens_matrices_and_the_prediction(wikiqa_run):
    matcher = Matcher.load(wikiqa_run[0])
    aligned = matcher.align(QUERY, CANDIDATES[0])
    assert aligned["a_tokens"] == ["how", "big", "is", "the", "moon"]
    assert set(aligned["matrices"]) == {"affinity", "gate", "M"}
    assert all(m.shape == (5, 8) and isinstance(m, np.ndarray) for m in aligned["matrices"].values())
    ((score,),) = [[r["p_match"] for r in matcher.rank(QUERY, CANDIDATES[:1])]]
    assert aligned["probs"]["1"] == pytest.approx(score, abs=1e-6)
    predicted = matcher.predict((QUERY, CANDIDATES[0]))  # a ranking model's answer, as predict gives it
    assert aligned["p_match"] == pytest.approx(predicted["p_match"], abs=1e-6)
    assert aligned["score"] == pytest.approx(predicted["score"], abs=1e-5)


def test_load_errors_say_what_to_give(snli_run, tmp_path):
    with pytest.raises(RunError, match="no run directory, checkpoint or shared model folder at"):
        Matcher.load(tmp_path / "nowhere")
    with pytest.raises(RunError, match="not a run directory with checkpoints/best.ckpt"):
        Matcher.load(tmp_path)
    with pytest.raises(RunError, match="has no key 'data.no_such_key'"):
        Matcher.load(snli_run[0], overrides={"data.no_such_key": 1})
    with pytest.raises(RunError, match="device must be cpu, cuda"):
        Matcher.load(snli_run[0], device="gpu")
    with pytest.raises(RunError, match="it does not rank.*pairs_rank, pairs_positives"):
        Matcher.load(snli_run[0]).rank("a", ["b"])
    if not torch.cuda.is_available():
        with pytest.raises(RunError, match="torch sees no CUDA GPU"):
            Matcher.load(snli_run[0], device="cuda")


def test_a_ranking_keeps_the_given_order_among_equal_scores():
    """`rank`'s order: best first, and candidates of the same score in the order they were given (what a client
    paging through results, or a test of a run's ranking, relies on)."""
    from matching.inference.predictor import ranking

    answers = [{"score": s, "p_match": 0.5} for s in (0.1, 0.7, 0.1, 0.7, -2.0)]
    order = [r["index"] for r in ranking(["a", "b", "c", "d", "e"], answers)]
    assert order == [1, 3, 0, 2, 4]
