"""matching-serve: real servers on free local ports, spoken to over HTTP.

Answers equal `predict`'s on the same pairs; every class of bad request gets its 4xx JSON answer and the server
goes on serving; a burst of concurrent requests (some of them bad) is answered request by request."""

import asyncio
import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch
from conftest import compose_train

httpx = pytest.importorskip("httpx", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from matching.data.pairs import Pair  # noqa: E402
from matching.matcher import Matcher  # noqa: E402
from matching.predict import predict  # noqa: E402
from matching.saved.run_folder import load_run  # noqa: E402
from matching.serve import main as serve_main  # noqa: E402
from matching.serving.server import free_port, serving  # noqa: E402

LIMITS = ["limits.max_pairs=6", "limits.max_candidates=5", "limits.max_text_tokens=30",
          "limits.max_request_bytes=20000", "threads=1"]  # fmt: skip

NLI = [
    ("A man plays a guitar.", "A person makes music."),
    ("Two dogs run in a field.", "The cats sleep."),
    ("A woman is reading a book.", "Somebody reads."),
    ("Kids play soccer outside.", "Children are inside."),
]
QUERY = "how are glacier caves formed?"
CANDIDATES = ["A glacier cave is a cave formed within the ice of a glacier.", "The ice facade is 60 m high.",
              "Glacier caves are often called ice caves.", "Caves form by melting water."]  # fmt: skip


@pytest.fixture(scope="module")
def servers(snli_run, wikiqa_run):
    """A classification (SNLI) and a ranking (WikiQA, CoDA) server, started side by side; their base URLs."""
    runs = {"snli": snli_run[0], "wikiqa": wikiqa_run[0]}
    with ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        managers = [serving(run / "checkpoints" / "best.ckpt", LIMITS) for run in runs.values()]
        yield dict(zip(runs, pool.map(stack.enter_context, managers), strict=True))


def _predict(run_dir, pairs: list[tuple[str, str]]) -> list[dict]:
    out = io.StringIO()
    predict(Matcher.load(run_dir), [Pair(a, b, "", None, i + 1) for i, (a, b) in enumerate(pairs)], out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _post(url: str, path: str, body, **kw) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=60, **kw)


def test_classify_answers_as_predict_does(servers, snli_run):
    answer = _post(servers["snli"], "/classify", {"pairs": [{"a": a, "b": b} for a, b in NLI]})
    assert answer.status_code == 200, answer.text
    got = answer.json()["predictions"]
    want = _predict(snli_run[0], NLI)
    assert len(got) == len(want) == len(NLI)
    for g, w in zip(got, want, strict=True):
        assert g["label"] == w["label"]
        assert set(g["probs"]) == {"entailment", "neutral", "contradiction"}
        for label, p in w["probs"].items():
            assert g["probs"][label] == pytest.approx(p, abs=1e-6)


def test_rank_orders_candidates_as_predict_does(servers, wikiqa_run):
    answer = _post(servers["wikiqa"], "/rank", {"query": QUERY, "candidates": CANDIDATES})
    assert answer.status_code == 200, answer.text
    ranking = answer.json()["ranking"]
    (want,) = _predict(wikiqa_run[0], [(QUERY, c) for c in CANDIDATES])
    assert [r["candidate"] for r in ranking] == [w["b"] for w in want["ranking"]]
    assert [r["index"] for r in ranking] == [w["line"] - 1 for w in want["ranking"]]
    for r, w in zip(ranking, want["ranking"], strict=True):
        assert r["score"] == pytest.approx(w["score"], abs=1e-5)
        assert r["p_match"] == pytest.approx(w["p_match"], abs=1e-6)
    assert [r["score"] for r in ranking] == sorted((r["score"] for r in ranking), reverse=True)


def test_align_returns_what_visualize_draws(servers, wikiqa_run):
    answer = _post(servers["wikiqa"], "/align", {"a": QUERY, "b": CANDIDATES[0]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    aligned = Matcher.load(wikiqa_run[0]).align(QUERY, CANDIDATES[0])
    tokens_a, tokens_b, matrices = aligned["a_tokens"], aligned["b_tokens"], aligned["matrices"]
    assert body["a_tokens"] == tokens_a and body["b_tokens"] == tokens_b
    assert set(body["matrices"]) == set(matrices)
    for name, m in matrices.items():
        assert torch.tensor(body["matrices"][name]) == pytest.approx(torch.from_numpy(m), abs=1e-5)
    assert body["label"] in ("0", "1") and set(body["probs"]) == {"0", "1"}


def test_health_and_info(servers, wikiqa_run):
    assert httpx.get(f"{servers['wikiqa']}/health").text == "ok"
    info = httpx.get(f"{servers['wikiqa']}/info").json()["model"]
    assert info["task"] == "wikiqa" and info["kind"] == "rank" and info["labels"] == ["0", "1"]
    assert info["aligner"] == "coda" and info["checkpoint"].endswith("best.ckpt")
    assert info["vocabulary_size"] == len(load_run(wikiqa_run[0] / "checkpoints" / "best.ckpt").vocab)
    assert info["limits"]["max_pairs"] == 6 and "/rank" in info["endpoints"]
    assert "/rank" not in httpx.get(f"{servers['snli']}/info").json()["model"]["endpoints"]


BAD = [  # (endpoint, body as sent, extra httpx arguments, status, words the message must hold)
    ("/classify", b'{"pairs": [', {"headers": {"Content-Type": "application/json"}}, 400, "not valid JSON"),
    ("/classify", b'{"pairs": []}', {}, 415, "Content-Type: application/json"),
    ("/classify", {"pair": [{"a": "x", "b": "y"}]}, {}, 422, "pairs: Field required"),
    ("/classify", {"pairs": [{"a": "x"}]}, {}, 422, "pairs[0]: cannot tell which columns hold the two texts"),
    ("/classify", {"pairs": [{"a": "x", "b": 3}]}, {}, 422, "pairs[0]: 'a' and 'b' must be strings"),
    ("/classify", {"pairs": [["x", "y"]]}, {}, 422, "pairs[0]: Input should be a valid dictionary"),
    ("/classify", {"pairs": []}, {}, 422, "pairs is empty"),
    ("/classify", {"pairs": [{"a": "x", "b": ""}]}, {}, 422, "pairs[0].b is empty"),
    ("/classify", {"pairs": [{"a": "   ", "b": "y"}]}, {}, 422, "pairs[0].a is empty"),
    ("/classify", {"pairs": [{"a": "x", "b": "y"}] * 7}, {}, 413, "limit of 6 (limits.max_pairs)"),
    ("/classify", {"pairs": [{"a": "x", "b": "word " * 31}]}, {}, 413, "31 tokens, over this server's limit of 30"),
    ("/classify", {"pairs": [{"a": "x" * 30000, "b": "y"}]}, {}, 413, "Payload too large"),
    ("/rank", {"query": "q", "candidates": ["c"] * 6}, {}, 413, "limit of 5 (limits.max_candidates)"),
    ("/rank", {"query": "q", "candidates": "just one"}, {}, 422, "candidates: Input should be a valid list"),
    ("/align", {"a": "x"}, {}, 422, "b: Field required"),
]


@pytest.mark.parametrize(("path", "body", "extra", "status", "words"), BAD)
def test_bad_requests_get_a_4xx_that_says_what_was_wrong(servers, path, body, extra, status, words):
    url = servers["wikiqa"]
    if isinstance(body, bytes):
        answer = httpx.post(f"{url}{path}", content=body, timeout=60, **extra)
    else:
        answer = _post(url, path, body, **extra)
    assert answer.status_code == status, answer.text
    if status != 413 or words != "Payload too large":
        error = answer.json()
        assert error["status"] == status and words in error["error"], error
    assert _post(url, "/classify", {"pairs": [{"a": "x", "b": "y"}]}).status_code == 200  # still serving


def test_a_ranking_request_to_a_classification_model(servers):
    answer = _post(servers["snli"], "/rank", {"query": "q", "candidates": ["a", "b"]})
    assert answer.status_code == 400
    said = answer.json()["error"]
    assert "it does not rank" in said and "/classify" in said and "pairs_rank, pairs_positives" in said


def test_a_burst_of_concurrent_requests_is_answered_request_by_request(servers, snli_run):
    """48 concurrent single-pair requests, every sixth one with an empty text: each good answer equals predict's
    for its own pair, each bad one gets its own 422, and the batches they share are not failed by them."""
    words = ["a", "man", "dog", "plays", "runs", "music", "field", "woman", "reads", "book", "cat", "sleeps"]
    pairs = [(" ".join(words[(i + k) % len(words)] for k in range(2 + i % 5)), " ".join(words[i % 7 : i % 7 + 3]))
             for i in range(48)]  # fmt: skip
    want = _predict(snli_run[0], pairs)

    async def burst():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=48)) as http:
            bodies = [{"pairs": [{"a": a if i % 6 else "", "b": b}]} for i, (a, b) in enumerate(pairs)]
            return await asyncio.gather(*(http.post(f"{servers['snli']}/classify", json=body) for body in bodies))

    answers = asyncio.run(burst())
    for i, answer in enumerate(answers):
        if i % 6 == 0:
            assert answer.status_code == 422 and "pairs[0].a is empty" in answer.json()["error"]
            continue
        assert answer.status_code == 200, answer.text
        (got,) = answer.json()["predictions"]
        assert got["label"] == want[i]["label"]
        assert got["probs"] == pytest.approx(want[i]["probs"], abs=1e-6)


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory):
    """A CoDA fixture run at the real hidden width (200), 2 epochs (in fp32, as every fixture run: the weights do not
    depend on the machine). At the fixtures' width of 16 no answer moves with its batch in bf16; at 200 a few of 300
    do, as the full-size models' answers do."""
    from matching.training.run import train

    cfg = compose_train(tmp_path_factory.mktemp("wide"), "trainer.max_epochs=2", "model.hidden=200", "aligner=coda")
    train(cfg)
    return Path(cfg.paths.output_dir)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_a_served_answer_is_matchers_within_the_tolerance_of_its_dtype(wide_run, dtype):
    """Issue 46 item 8. The server's worker answers 300 single-pair requests one batch each (as at concurrency 1) and
    eight to a batch; each answer is within `precision.answer_tolerance` of Matcher.predict over all 300 at once. A
    pair's answer moves with its batch (its size and padding), in bf16 by more than fp32's 1e-5 (here up to 3e-4 on
    an AMX CPU): the server and Matcher compute alike, and the tolerance is bf16's, not fp32's."""
    from omegaconf import OmegaConf

    from matching.cli import compose_config
    from matching.inference import load
    from matching.inference.queries import ClassifyQuery, Limits
    from matching.model import precision
    from matching.serving.batcher import Job, Worker, WorkerSettings

    checkpoint = wide_run / "checkpoints" / "best.ckpt"
    matcher = Matcher.load(wide_run, dtype=dtype)
    words = sorted(w for w in matcher.vocab.words if w.isalpha())
    rng = random.Random(0)
    pairs = [(" ".join(rng.choices(words, k=rng.randint(3, 12))), " ".join(rng.choices(words, k=rng.randint(3, 30))))
             for _ in range(300)]  # fmt: skip
    reference = matcher.predict(pairs)

    served = compose_config("serve", [f"ckpt={checkpoint}", f"dtype={dtype}"])
    threads = torch.get_num_threads()
    try:  # one torch thread, as the server's worker has by default (one thread on a 2-core machine)
        served_run = Matcher(
            load(str(checkpoint), config=OmegaConf.create(OmegaConf.to_container(served, resolve=True)))
        )
        worker = Worker(served_run, WorkerSettings(Limits(), 1, 1, 60.0))  # loaded as the server loads it
        jobs = [Job(i, ClassifyQuery((pair,)), time.monotonic()) for i, pair in enumerate(pairs)]
        alone = [answer for job in jobs for answer in worker.answer([job])]
        in_eights = [answer for start in range(0, len(jobs), 8) for answer in worker.answer(jobs[start : start + 8])]
    finally:
        torch.set_num_threads(threads)

    tolerance = precision.answer_tolerance(precision.DTYPES[dtype])
    for answers in (alone, in_eights):
        assert [job_id for job_id, _ in answers] == list(range(len(pairs)))
        got = [answer.pairs[0].as_dict() for _, answer in answers if hasattr(answer, "pairs")]
        assert len(got) == len(pairs)
        worst = max(abs(g["probs"][label] - r["probs"][label])
                    for g, r in zip(got, reference, strict=True) for label in matcher.labels)  # fmt: skip
        assert worst <= tolerance.probability, f"{dtype}: a served probability is {worst:.2e} from Matcher's"


def test_command_line_mistakes_are_reported_before_anything_starts(snli_run, tmp_path, capsys):
    ckpt = snli_run[0] / "checkpoints" / "best.ckpt"
    assert serve_main([f"ckpt={tmp_path / 'none.ckpt'}"]) == 2
    assert "no checkpoint file" in capsys.readouterr().err
    assert serve_main([f"ckpt={ckpt}", "limits.max_pairs=0"]) == 2
    assert "limits.max_pairs must be a positive whole number" in capsys.readouterr().err
    assert serve_main([f"ckpt={ckpt}", "port=0"]) == 2
    assert "port must be a positive whole number" in capsys.readouterr().err
    assert serve_main([f"ckpt={ckpt}", "limts.max_pairs=3"]) == 2
    assert "limts" in capsys.readouterr().err


def _start(ckpt, port: int):
    """A server as a user starts it (its own process group, so that the test can find every process it made)."""
    cmd = [sys.executable, "-m", "matching.serve", f"ckpt={ckpt}", f"port={port}", "threads=1"]
    said = tempfile.TemporaryFile()  # what it says (read by a failing test: `_said`)
    proc = subprocess.Popen(cmd, stdout=said, stderr=subprocess.STDOUT, start_new_session=True)
    proc.said = said
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).text == "ok":
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the server did not get ready")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _gone(pgid: int, port: int, within: float = 15.0) -> bool:
    """No process of the group is left and the port refuses connections."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
        except httpx.ConnectError:
            if not _group_alive(pgid):
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def test_a_killed_server_leaves_no_process_holding_its_port(snli_run):
    """SIGKILL (the OOM killer, kill -9) gives the server no chance to stop its workers: they, its HTTP process and
    its manager (which all inherit the listening socket) notice and end by themselves."""
    port = free_port()
    proc = _start(snli_run[0] / "checkpoints" / "best.ckpt", port)
    try:
        proc.kill()
        proc.wait(timeout=10)
        assert _gone(proc.pid, port), "processes of the killed server live on"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _said(proc) -> str:
    """The end of what a server of `_start` has said (its stop's report where the stop got stuck)."""
    proc.said.seek(0)
    return proc.said.read().decode(errors="replace")[-6000:]


@pytest.mark.slow
def test_sigterm_shuts_down_as_ctrl_c_does(snli_run):
    port = free_port()
    proc = _start(snli_run[0] / "checkpoints" / "best.ckpt", port)
    try:
        proc.terminate()
        try:
            status = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running 60 s after SIGTERM; it said:\n{_said(proc)}") from None
        assert status == 0, _said(proc)
        assert _gone(proc.pid, port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


SUPERVISED = """
import multiprocessing, os, signal, sys, time
from omegaconf import OmegaConf
from matching.errors import RunError
from matching.serving import server


def worker(cfg, ready, workers):  # the first serves at once; the second still loads, or dies as it loads
    name = multiprocessing.current_process().name
    if name.endswith("1"):
        ready.put((name, "ready"))
        print("serving", flush=True)
    elif sys.argv[1] == "dies":
        os._exit(9)
    time.sleep(600)


if __name__ == "__main__":
    server._worker_process = worker
    try:
        server.supervise(OmegaConf.create({"host": "127.0.0.1", "port": server.free_port()}), 2)
        print("handlers back", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
    except RunError as err:
        print(err, flush=True)
        sys.exit(2)
"""


@pytest.mark.parametrize("second", ["loads", "dies"])
def test_the_supervisor_stops_or_fails_while_a_server_process_still_loads(second, tmp_path):
    """workers=N: SIGTERM while a process still loads (its first sibling serving already) stops them all at once;
    a process that dies as it loads, without a word, fails the start with its status. (The supervisor waited
    ten minutes for the loading process's "ready", and forever for the dead one's.)"""
    script = tmp_path / "supervised.py"
    script.write_text(SUPERVISED)
    proc = subprocess.Popen([sys.executable, str(script), second], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)  # fmt: skip
    try:
        if second == "loads":
            assert proc.stdout.readline().strip() == "serving"
            proc.terminate()
            assert proc.wait(timeout=20) == 0
            assert proc.stdout.read().strip() == "handlers back True"
            assert _gone(proc.pid, 1)
        else:
            assert proc.wait(timeout=30) == 2
            said = proc.stdout.read()
            assert "a server process could not start: matching-serve worker 2 ended with status 9" in said, said
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


HUNG_STOP = """
import contextlib, sys, time
from fastapi import FastAPI
from omegaconf import OmegaConf
from matching.serving import server

server.STOP_DEADLINE_S = 2

@contextlib.asynccontextmanager
async def lifespan(app):
    yield
    time.sleep(600)  # a stop that never ends: the event loop blocked in the app's shutdown

sock = server._listen("127.0.0.1", 0)
print(sock.getsockname()[1], flush=True)
settings = OmegaConf.create({"log_level": "warning", "access_log": False})
server.Server(FastAPI(lifespan=lifespan), [], sock, settings).run()
"""


SERVED_AND_ON = """
import os, signal, threading, time
import httpx
from fastapi import FastAPI
from omegaconf import OmegaConf
from matching.serving import server

server.STOP_DEADLINE_S = 1
sock = server._listen("127.0.0.1", 0)
url = f"http://127.0.0.1:{sock.getsockname()[1]}"


def stop_when_served():
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=stop_when_served, daemon=True).start()
settings = OmegaConf.create({"log_level": "warning", "access_log": False})
server.Server(FastAPI(), [], sock, settings).run()
time.sleep(2.5)  # past the stop's deadline and its alarm: neither may end this session
print("went on", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
"""


def test_a_python_session_that_served_goes_on_after_the_stop_with_its_own_signal_handlers():
    done = subprocess.run([sys.executable, "-c", SERVED_AND_ON], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "went on True", done.stderr[-3000:]


def test_a_stop_that_hangs_ends_within_its_deadline_with_every_threads_stack():
    """A server whose stop is stuck (here the app's shutdown, blocking the event loop) does not hold its port for
    good after SIGTERM: at the deadline it says so, prints what each thread waits on and exits with status 1."""
    proc = subprocess.Popen([sys.executable, "-c", HUNG_STOP], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        deadline = time.monotonic() + 60
        while True:  # uvicorn takes the signals once it serves (a 404: nothing is routed)
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 404:
                    break
            time.sleep(0.1)
        proc.terminate()
        assert proc.wait(timeout=30) == 1
        said = proc.stderr.read()
        assert "still running 2 s after SIGTERM: its stop is stuck, which is a bug of ours" in said
        assert "Current thread" in said and " in lifespan\n" in said  # where it waits
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_runs_to_compare_that_cannot_be_served_beside_the_first_are_reported_before_anything_starts(
    snli_run, wikiqa_run, tmp_path, capsys
):
    ckpt = snli_run[0] / "checkpoints" / "best.ckpt"
    assert serve_main([f"ckpt={ckpt}", f"compare=[{wikiqa_run[0]}]"]) == 2
    said = capsys.readouterr().err
    assert "must all classify or all rank" in said and "(wikiqa, rank)" in said
    assert serve_main([f"ckpt={ckpt}", f"compare=[{tmp_path / 'nowhere'}]"]) == 2
    assert "no run directory, checkpoint or shared model folder at" in capsys.readouterr().err


def _answer_validator(url: str, name: str):
    """A validator of the schema GET /openapi.json publishes for `name`, its $refs resolved in the document."""
    jsonschema = pytest.importorskip("jsonschema")
    document = httpx.get(f"{url}/openapi.json", timeout=60).json()
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)


def test_rerank_answers_are_what_openapi_json_publishes(servers):
    """Issue 103: the /rerank answer is built from the models /openapi.json publishes. Real answers (documents
    returned or not, as objects or as Infinity's texts, top_n, a document cut) each validate against the published
    schema, which allows no field it does not name."""
    url = servers["wikiqa"]
    validator = _answer_validator(url, "RerankAnswer")
    long = " ".join(["glacier", "ice", "cave"] * 20)  # over the server's 30 tokens: cut
    bodies = [
        {"query": QUERY, "documents": CANDIDATES},
        {"query": QUERY, "documents": CANDIDATES, "top_n": 2, "return_documents": True},
        {"query": QUERY, "documents": [{"id": f"d{i}", "text": c} for i, c in enumerate(CANDIDATES)],
         "return_documents": True, "model": "rerank-english-v3.0"},
        {"query": QUERY, "documents": CANDIDATES, "return_documents": True, "raw_scores": True, "top_n": 3},
        {"query": QUERY, "documents": [*CANDIDATES[:2], long], "return_documents": True},
        {"query": QUERY, "documents": [*CANDIDATES[:2], long], "max_chunks_per_doc": 3, "return_documents": True},
        {"query": QUERY, "documents": [*CANDIDATES[:2], long], "max_tokens_per_doc": 4, "top_n": 1},
    ]  # fmt: skip
    for path, body in zip(["/rerank", "/v1/rerank", "/v2/rerank", "/rerank", "/v2/rerank", "/v1/rerank",
                           "/v1/rerank"], bodies, strict=True):  # fmt: skip
        answer = _post(url, path, body)
        assert answer.status_code == 200, answer.text
        given = answer.json()
        assert not list(validator.iter_errors(given)), (body, [e.message for e in validator.iter_errors(given)])
        assert len(given["results"]) == body.get("top_n", len(body["documents"]))
        assert all(("document" in r) == body.get("return_documents", False) for r in given["results"])
        chunked = "max_chunks_per_doc" in body  # the long document read whole, as two chunks: the best one named
        cut = ("max_tokens_per_doc" in body or long in body["documents"]) and not chunked
        assert ("truncated" in given["meta"]) == cut
        assert all(("chunk" in r) == (chunked and r["index"] == 2) for r in given["results"])
    assert given["meta"]["truncated"] and given["meta"]["warnings"]
    assert list(validator.iter_errors({**given, "surprise": 1})), "the schema names every field of the answer"


def test_classify_and_rank_answers_are_what_openapi_json_publishes(servers):
    for name, path, url, body in [
        ("ClassifyAnswer", "/classify", servers["snli"], {"pairs": [{"a": a, "b": b} for a, b in NLI]}),
        ("RankAnswer", "/rank", servers["wikiqa"], {"query": QUERY, "candidates": CANDIDATES}),
    ]:
        answer = _post(url, path, body)
        assert answer.status_code == 200, answer.text
        assert not list(_answer_validator(url, name).iter_errors(answer.json()))
