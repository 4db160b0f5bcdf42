"""The server's page in a real browser (headless Chromium over its DevTools protocol; tests/chromium.py).

A server on two SNLI fixture runs (softmax and CoDA) and one on the WikiQA fixture run: the test types a pair as a
user would, waits for the heat-maps and checks what the page shows against the server's own JSON answers: one cell
per token pair with the value /align gives, the predicted label, the two runs side by side, the difference view,
the value on hover, unknown words marked, a link that reproduces the view; for the ranking model, the candidates
ranked as /rank ranks them. A screenshot of each page is kept in the test's temporary folder."""

import json
import urllib.parse

import pytest

httpx = pytest.importorskip("httpx", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("websockets", reason="the dev extra: pip install -e '.[dev]'")

from chromium import Browser, find_chromium  # noqa: E402
from conftest import compose_train  # noqa: E402

from matching.serving.server import serving  # noqa: E402

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: apt-get install chromium (.ci/run does)")

A, B = "A man plays a guitar.", "A zyzzyva makes music."  # zyzzyva: in no fixture vocabulary


@pytest.fixture(scope="module")
def snli_coda_run(tmp_path_factory):
    """A second SNLI fixture run, with the CoDA aligner and the NULL token, to put beside the softmax one (which has
    no NULL token: the difference view matches their cells without it)."""
    from matching.training.run import train

    cfg = compose_train(tmp_path_factory.mktemp("snli_coda"), "trainer.max_epochs=1", "aligner=coda",
                        "model.null_token=true")  # fmt: skip
    train(cfg)
    return cfg.paths.output_dir


@pytest.fixture(scope="module")
def side_by_side(snli_run, snli_coda_run):
    with serving(snli_run[0] / "checkpoints" / "best.ckpt", ["threads=1", f"compare=[{snli_coda_run}]"]) as url:
        yield url


@pytest.fixture
def browser(tmp_path):
    with Browser(CHROMIUM, tmp_path / "profile") as browser:
        yield browser


def _align(url: str, run: str, a: str, b: str) -> dict:
    answer = httpx.post(f"{url}/align", params={"run": run}, json={"a": a, "b": b}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


IDLE = "!document.querySelector('#go').disabled"  # no request under way


def drawn(tables: int) -> str:
    return f"document.querySelectorAll('.run .matrix table.heat').length >= {tables} && {IDLE}"


def cells(selector: str) -> str:
    return f"[...document.querySelectorAll('{selector} td')].map(td => [+td.dataset.i, +td.dataset.j, +td.dataset.v])"


HEATMAPS = """[...document.querySelectorAll('.run')].map(run => ({
    name: run.dataset.run,
    label: run.querySelector('.prediction .label')?.dataset.label,
    box: (r => [r.x, r.y, r.width])(run.getBoundingClientRect()),
    matrices: Object.fromEntries([...run.querySelectorAll('.matrix')].map(m => [m.dataset.matrix, {
        rows: [...m.querySelectorAll('th.rowtok')].map(th => th.textContent),
        cols: [...m.querySelectorAll('th.coltok')].map(th => th.textContent),
        unknown: [...m.querySelectorAll('th.coltok.unknown')].map(th => th.textContent),
        null: [...m.querySelectorAll('th.null')].map(th => th.textContent),
        cells: [...m.querySelectorAll('td')].map(td => [+td.dataset.i, +td.dataset.j, +td.dataset.v]),
    }])),
}))"""


def test_a_typed_pair_through_two_runs_side_by_side(side_by_side, browser, tmp_path):
    url = side_by_side
    info = httpx.get(f"{url}/info").json()
    names = [r["name"] for r in info["runs"]]
    assert names == ["softmax", "coda"]

    browser.goto(url)
    browser.wait_for("document.body.dataset.ready === 'true'")
    assert browser.evaluate("document.querySelectorAll('#examples button').length") >= 3  # the task's examples
    browser.type("#a", A)
    browser.type("#b", B)
    browser.click("#go")
    browser.wait_for(drawn(5))
    shown = browser.evaluate(HEATMAPS)
    browser.screenshot(tmp_path / "page.png")

    assert [run["name"] for run in shown] == names
    (x0, y0, w0), (x1, y1, _) = shown[0]["box"], shown[1]["box"]
    assert abs(y0 - y1) < 1 and x1 >= x0 + w0  # side by side, not one under the other
    for run in shown:
        want = _align(url, run["name"], A, B)
        classified = httpx.post(f"{url}/classify", params={"run": run["name"]},
                                json={"pairs": [{"a": A, "b": B}]}, timeout=60).json()  # fmt: skip
        assert run["label"] == want["label"] == classified["predictions"][0]["label"]
        assert set(run["matrices"]) == set(want["matrices"])
        for name, m in run["matrices"].items():
            assert m["rows"] == want["a_tokens"] and m["cols"] == want["b_tokens"]  # the same axes everywhere
            rows, cols = len(want["a_tokens"]), len(want["b_tokens"])
            assert sorted((i, j) for i, j, _ in m["cells"]) == [(i, j) for i in range(rows) for j in range(cols)]
            for i, j, v in m["cells"]:
                assert v == pytest.approx(want["matrices"][name][i][j], abs=1e-6)
            unknown = [t for t, u in zip(want["b_tokens"], want["unknown"]["b"], strict=True) if u]
            assert "zyzzyva" in unknown and "a" not in unknown and m["unknown"] == unknown  # unknown words marked
    assert set(shown[0]["matrices"]) == {"softmax_a", "softmax_b"}
    assert set(shown[1]["matrices"]) == {"affinity", "gate", "M"}
    assert shown[1]["matrices"]["M"]["null"] == ["<null>", "<null>"] and shown[0]["matrices"]["softmax_a"]["null"] == []

    # The difference view: coda's M − softmax's softmax_a, cell by cell on the same axes (without coda's NULL row
    # and column, which softmax has not)
    diff = browser.evaluate(cells("#difference"))
    m, s = _align(url, "coda", A, B)["matrices"]["M"], _align(url, "softmax", A, B)["matrices"]["softmax_a"]
    assert len(diff) == len(s) * len(s[0]) == (len(m) - 1) * (len(m[0]) - 1)
    said = browser.evaluate("document.querySelector('#difference').textContent")
    assert "NULL token's row and column are left out" in said
    for i, j, v in diff:
        assert v == pytest.approx(m[i + 1][j + 1] - s[i][j], abs=1e-5)

    # Hovering a cell shows its exact value
    browser.hover(".run[data-run=coda] .matrix[data-matrix=M] td[data-i='1'][data-j='2']")
    tip = browser.wait_for("!document.querySelector('#tip').hidden && document.querySelector('#tip').textContent")
    assert "×" in tip and float(tip.rsplit("= ", 1)[1]) == pytest.approx(m[1][2], abs=1e-9)

    # The link reproduces the view: the pair is in the URL
    link = browser.evaluate("document.querySelector('#link').href")
    query = urllib.parse.parse_qs(urllib.parse.urlparse(link).query)
    assert query == {"a": [A], "b": [B]}
    browser.goto(link)
    browser.wait_for("document.body.dataset.ready === 'true'")
    again = browser.evaluate(HEATMAPS)
    assert [r["label"] for r in again] == [r["label"] for r in shown]
    assert browser.evaluate("document.querySelector('#b').value") == B
    # and the JSON download holds the inputs and every run's answer
    download = json.loads(browser.evaluate("fetch(document.querySelector('#download').href).then(r => r.text())"))
    assert download["inputs"] == {"a": A, "b": B}
    assert [r["name"] for r in download["runs"]] == names and download["runs"][1]["answer"]["matrices"]["M"] == m


def test_a_ranking_model_ranks_the_candidates_then_aligns_one(wikiqa_run, browser, tmp_path):
    query = "how are glacier caves formed?"
    candidates = ["The ice facade is 60 m high.", "A glacier cave is a cave formed within the ice of a glacier."]
    with serving(wikiqa_run[0] / "checkpoints" / "best.ckpt", ["threads=1"]) as url:
        browser.goto(url)
        browser.wait_for("document.body.dataset.ready === 'true'")
        assert browser.evaluate("document.querySelector('#rank-input').hidden") is False
        browser.type("#query", query)
        browser.type("#candidates", "\n".join(candidates))
        browser.click("#go")
        browser.wait_for(drawn(3))
        order = browser.evaluate("[...document.querySelectorAll('#ranking tr.cand')].map(tr => +tr.dataset.index)")
        ranked = httpx.post(f"{url}/rank", json={"query": query, "candidates": candidates}, timeout=60).json()
        assert order == [r["index"] for r in ranked["ranking"]]
        top = ranked["ranking"][0]
        shown = browser.evaluate("document.querySelector('.run .prediction .label').textContent")
        assert shown == f"P(match) {top['p_match']:.3f}"  # the best candidate's alignment is shown first
        second = ranked["ranking"][1]
        browser.click(f"#ranking tr.cand[data-index='{second['index']}']")  # the other one
        browser.wait_for(
            f"document.querySelector('#ranking tr.picked')?.dataset.index === '{second['index']}' && {IDLE}"
        )
        cols = browser.evaluate("[...document.querySelectorAll('.run .matrix')[0].querySelectorAll('th.coltok')]"
                                ".map(th => th.textContent)")  # fmt: skip
        assert cols == _align(url, "coda", query, second["candidate"])["b_tokens"]
        browser.screenshot(tmp_path / "ranking.png")


@pytest.fixture(scope="module")
def claims_run(tmp_path_factory):
    """A generic-task run (task=pairs on the claims fixture): it keeps a few of its dev pairs for the page."""
    from conftest import FIXTURES

    from matching.training.run import train

    own = FIXTURES / "own"
    cfg = compose_train(tmp_path_factory.mktemp("claims"), "task=pairs", "trainer.max_epochs=1",
                        f"task.splits.train.path={own / 'claims_train.tsv'}",
                        f"task.splits.dev.path={own / 'claims_dev.tsv'}", "task.columns.a=claim",
                        "task.columns.b=evidence", "task.columns.label=verdict")  # fmt: skip
    train(cfg)
    return cfg.paths.output_dir


def test_a_generic_run_offers_its_own_dev_pairs_and_names_no_path(claims_run, browser, tmp_path):
    from pathlib import Path

    kept = json.loads((Path(claims_run) / "examples.json").read_text())["examples"]
    assert kept and {label for _, _, label in kept} == {"refutes", "supports"}
    with serving(Path(claims_run) / "checkpoints" / "best.ckpt", ["threads=1"]) as url:
        browser.goto(url)
        browser.wait_for("document.body.dataset.ready === 'true'")
        chips = browser.evaluate(
            "[...document.querySelectorAll('#examples button')].map(b => [b.textContent, b.title])"
        )
        said = browser.evaluate("document.querySelector('#examples-from').textContent + ' ' + "
                                "document.querySelector('#runs').textContent")  # fmt: skip
        hints = [browser.evaluate(f"document.querySelector('#{side}-hint').textContent") for side in "ab"]
        browser.click("#examples button")
        browser.wait_for(drawn(1))
        browser.screenshot(tmp_path / "claims.png")
        typed = [browser.evaluate(f"document.querySelector('#{side}').value") for side in "ab"]
        shown = browser.evaluate("document.querySelector('#pair').textContent")
    assert [title for _, title in chips] == [f"a: {a}\nb: {b}\nlabel in the data: {label}" for a, b, label in kept]
    assert len({text for text, _ in chips}) == len(chips)  # no two chips look alike
    assert "SNLI" not in said and "the run's dev data" in said and "trained on claims_train.tsv" in said
    assert "embeddings glove.fixture.20d.txt" in said and str(Path(claims_run).parent) not in said
    assert typed == kept[0][:2]
    assert hints == ["claim", "evidence"] and shown.startswith(f"claim {kept[0][0]}")  # the run's own names


def test_a_model_on_onnx_runtime_shows_its_prediction_and_says_why_no_heat_maps(snli_run, browser, tmp_path):
    with serving(snli_run[0], ["backend=onnx"]) as url:
        browser.goto(url)
        browser.wait_for("document.body.dataset.ready === 'true'")
        browser.click("#examples button")
        browser.wait_for(f"document.querySelector('.run .prediction') !== null && {IDLE}")
        browser.screenshot(tmp_path / "onnx.png")
        label = browser.evaluate("document.querySelector('.run .prediction .label').textContent")
        note = browser.evaluate("document.querySelector('.run p.hint').textContent")
        status = browser.evaluate("document.querySelector('#status').textContent")
        tables = browser.evaluate("document.querySelectorAll('.run .matrix table.heat').length")
    assert label in ("entailment", "neutral", "contradiction")
    assert "runs on onnx" in note and "backend=torch" in note
    assert tables == 0 and "error" not in status.lower()


def test_an_adaptive_studys_csv_verdict_is_its_sequential_decision():
    """study.csv (what the README's tables render from) gives the sequential decision and its look's Holm p, as the
    page's cell does, not the test of every seed a family took."""
    from matching.studies.page import _sequential
    from matching.studies.seeds import RESOLVED, STOPPED, WAITING, Decision, Look, SeedPlan

    look = Look(seeds=3, difference=14.8, p_value=0.0003, p_adjusted=0.027, level=0.000333)
    decisions = [Decision("trecqa", "coda", "softmax", "map", (look,), WAITING),
                 Decision("trecqa", "conflict", "softmax", "map", (look,), STOPPED),
                 Decision("trecqa", "softmax_conflict", "softmax", "map", (look,), RESOLVED),
                 Decision("wikiqa", "coda", "softmax", "map", (look,), RESOLVED)]  # fmt: skip
    plan = SeedPlan([3, 5], [0.000333, 0.05], decisions, {})
    mine = _sequential(plan, "trecqa")
    assert {key[0]: value[1:3] for key, value in mine.items()} == {
        "coda": ("undecided: more seeds asked for", 0.027), "conflict": ("not resolved", 0.027),
        "softmax_conflict": ("resolved", 0.027)}  # fmt: skip
    assert mine[("coda", "softmax", "map")][0].startswith("undecided after 3 seeds a side")
