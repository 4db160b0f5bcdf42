"""How a served pair's keys, and a row of `predict`'s file, become the model's (a, b): by one rule
(matching.data.tables.pair_of_mapping / new_pair_columns), so both are tried here on a run with its own names
(claim, evidence). A row naming one of a pair's texts without the other is refused, naming the missing one and the
keys it got; no row is read with its texts in another order than the model's (issue 103)."""

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, compose_train

httpx = pytest.importorskip("httpx", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from matching.matcher import Matcher  # noqa: E402
from matching.predict import main as predict_main  # noqa: E402
from matching.serving.server import serving  # noqa: E402

OWN = FIXTURES / "own"
CLAIM, EVIDENCE = "The bridge was closed for repairs last week.", "The bridge stayed open all week."


@pytest.fixture(scope="module")
def claims(tmp_path_factory):
    """A one-epoch run whose texts are its own columns, claim (a) and evidence (b), served: (run dir, base URL)."""
    from matching.training.run import train

    cfg = compose_train(
        tmp_path_factory.mktemp("claims"), "task=pairs", f"task.splits.train.path={OWN / 'claims_train.tsv'}",
        f"task.splits.dev.path={OWN / 'claims_dev.tsv'}", "task.columns.a=claim", "task.columns.b=evidence",
        "task.columns.label=verdict", "trainer.max_epochs=1",
    )  # fmt: skip
    train(cfg)
    run = Path(cfg.paths.output_dir)
    with serving(run / "checkpoints" / "best.ckpt", ["threads=1"]) as url:
        yield run, url


def _classify(url: str, row: dict) -> httpx.Response:
    return httpx.post(f"{url}/classify", json={"pairs": [row]}, timeout=60)


HALVES = [  # (a row, the missing text the refusal names, the keys it lists)
    ({"b": EVIDENCE, "text": CLAIM}, "'a'", "['b', 'text']"),  # issue 103: answered 200 with the texts swapped
    ({"text": CLAIM, "b": EVIDENCE}, "'a'", "['text', 'b']"),
    ({"a": CLAIM, "text": EVIDENCE}, "'b'", "['a', 'text']"),
    ({"evidence": EVIDENCE, "text": CLAIM}, "'claim'", "['evidence', 'text']"),  # the run's own names
    ({"claim": CLAIM, "text": EVIDENCE}, "'evidence'", "['claim', 'text']"),  # right order by luck: still refused
    ({"claim": CLAIM, "a": CLAIM, "b": EVIDENCE}, "'evidence'", "['claim', 'a', 'b']"),  # a/b would drop claim
    ({"hypothesis": EVIDENCE, "text": CLAIM}, "'premise'", "['hypothesis', 'text']"),
    ({"question": CLAIM, "text": EVIDENCE}, "'answer' or 'sentence'", "['question', 'text']"),
    ({"evidence": EVIDENCE}, "'claim'", "['evidence']"),
]


@pytest.mark.parametrize(("row", "missing", "keys"), HALVES)
def test_a_pair_naming_one_text_alone_is_refused_naming_the_other(claims, row, missing, keys):
    _, url = claims
    answer = _classify(url, row)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error.startswith("invalid request: pairs[0]: cannot tell which columns hold the two texts"), error
    assert f"there is no {missing} for the" in error and f"the columns are {keys}" in error
    assert '{"claim": "first text", "evidence": "second text"}' in error  # what to send, in the model's names


def test_a_pair_is_read_in_the_model_s_order_whatever_its_keys_order(claims):
    """The run's own names, a/b and a usual pair, each with its keys in either order: every one answers as the
    pair (claim, evidence); the swapped pair answers otherwise, so a swap would show."""
    run, url = claims
    matcher = Matcher.load(run)
    (right,) = matcher.predict([(CLAIM, EVIDENCE)])
    (swapped,) = matcher.predict([(EVIDENCE, CLAIM)])
    assert right["probs"] != pytest.approx(swapped["probs"], abs=1e-6)
    rows = [{"claim": CLAIM, "evidence": EVIDENCE}, {"evidence": EVIDENCE, "claim": CLAIM},
            {"b": EVIDENCE, "a": CLAIM}, {"hypothesis": EVIDENCE, "premise": CLAIM, "id": 7},
            {"question": CLAIM, "answer": EVIDENCE}]  # fmt: skip
    answer = httpx.post(f"{url}/classify", json={"pairs": rows}, timeout=60)
    assert answer.status_code == 200, answer.text
    for row, served in zip(rows, answer.json()["predictions"], strict=True):
        assert served["probs"] == pytest.approx(right["probs"], abs=1e-5), row


def test_matcher_reads_a_dict_by_the_same_rule(claims):
    from matching.errors import DataFormatError

    run, _ = claims
    with pytest.raises(DataFormatError, match=r"'evidence' names the second text of a pair and there is no 'claim'"):
        Matcher.load(run).predict([{"evidence": EVIDENCE, "text": CLAIM}])


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        (
            "half.jsonl",
            "\n".join(
                json.dumps(r) for r in [{"claim": CLAIM, "evidence": EVIDENCE}, {"evidence": EVIDENCE, "text": CLAIM}]
            ),  # fmt: skip
            ["line 2: cannot tell which columns hold the two texts", "there is no 'claim' for the first"],
        ),
        (
            "half.tsv",
            f"evidence\ttext\n{EVIDENCE}\t{CLAIM}\n",  # a header naming one text: no pair, no position
            ["cannot tell which columns hold the two texts", "there is no 'claim'", "['evidence', 'text']"],
        ),
        ("usual.csv", f"b,text\n{EVIDENCE},{CLAIM}\n", ["there is no 'a' for the first", "['b', 'text']"]),
    ],
)
def test_predict_refuses_a_file_naming_one_text_alone(claims, tmp_path, capsys, name, text, words):
    run, _ = claims
    path = tmp_path / name
    path.write_text(text + "\n", encoding="utf-8")
    code = predict_main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"input={path}"])
    captured = capsys.readouterr()
    assert code != 0 and not captured.out.strip(), captured.out
    for word in words:
        assert word in captured.err, captured.err


def test_predict_reads_a_file_in_the_model_s_order_whatever_its_columns_order(claims, tmp_path, capsys):
    run, _ = claims
    (right,) = Matcher.load(run).predict([(CLAIM, EVIDENCE)])
    path = tmp_path / "reversed.jsonl"
    path.write_text(json.dumps({"evidence": EVIDENCE, "claim": CLAIM}) + "\n" + json.dumps({"b": EVIDENCE, "a": CLAIM})
                    + "\n", encoding="utf-8")  # fmt: skip
    tsv = tmp_path / "reversed.tsv"
    tsv.write_text(f"evidence\tclaim\n{EVIDENCE}\t{CLAIM}\n", encoding="utf-8")
    for given in (path, tsv):
        assert predict_main([f"ckpt={run / 'checkpoints' / 'best.ckpt'}", f"input={given}"]) == 0
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert records and all(r["probs"] == pytest.approx(right["probs"], abs=1e-5) for r in records), given
