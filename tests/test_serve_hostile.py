"""matching-serve tried as a hostile user and a browser would: answers of any size under concurrency, a request that
would poison its batch, limits while streaming, guessing on the wire, the browser cases, and the rerank API that
third-party clients call. A real server on a free local port, its own process, spoken to over HTTP and raw sockets."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the serve extra: pip install -e '.[serve]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from conftest import serve_process  # noqa: E402

from matching.matcher import Matcher  # noqa: E402
from matching.serving.server import free_port  # noqa: E402

WORDS = ["a", "man", "dog", "plays", "runs", "music", "field", "woman", "reads", "book", "cat", "sleeps", "the"]


def _text(n: int, shift: int = 0) -> str:
    return " ".join(WORDS[(i * 7 + shift) % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def server(wikiqa_run):
    """A WikiQA (CoDA, ranking) server at the default limits in one process (whose memory a test reads), started as
    a user starts it: (base URL, its pid)."""
    with serve_process(wikiqa_run[0]) as served:
        yield served


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_answers_of_any_size_under_concurrency_and_health_stays_ok(server, wikiqa_run):
    """The answer that stopped the old server for good (over 16 KB through its pipe): 256-pair /classify requests
    (~40 KB each) and /align of two 120-token texts (~1 MB of matrices), 24 at once, three rounds."""
    url, _ = server
    pairs = [{"a": _text(6, i), "b": _text(20, i + 3)} for i in range(256)]
    want = Matcher.load(wikiqa_run[0]).predict([(p["a"], p["b"]) for p in pairs])

    async def rounds():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=32)) as http:
            for _ in range(3):
                calls = [http.post(f"{url}/classify", json={"pairs": pairs}) for _ in range(16)]
                calls += [http.post(f"{url}/align", json={"a": _text(120, k), "b": _text(120, k + 1)})
                          for k in range(8)]  # fmt: skip
                answers = await asyncio.gather(*calls)
                assert [a.status_code for a in answers] == [200] * 24, [a.text[:300] for a in answers]
                assert len(answers[-1].content) > 16384 and len(answers[0].content) > 12000
                got = answers[0].json()["predictions"]
                assert [g["p_match"] for g in got] == pytest.approx([w["p_match"] for w in want], abs=1e-5)
                assert (await http.get(f"{url}/health")).text == "ok"

    asyncio.run(rounds())


def test_a_lone_surrogate_answers_for_itself_and_poisons_no_batch(server, wikiqa_run):
    """One request holding "\\ud800" among 30 good ones sent at once: one 422 naming the field, 30 right answers."""
    url, _ = server
    pairs = [(_text(4 + i % 5, i), _text(10 + i % 7, i + 2)) for i in range(30)]
    want = Matcher.load(wikiqa_run[0]).predict(pairs)
    good = [json.dumps({"pairs": [{"a": a, "b": b}]}).encode() for a, b in pairs]
    poisoned = b'{"pairs": [{"a": "a man \\ud800 plays", "b": "music"}]}'
    raw_bytes = b'{"pairs": [{"a": "a man \xed\xa0\x80 plays", "b": "music"}]}'  # the UTF-8-like bytes of one

    async def burst():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=40)) as http:
            bodies = [*good[:15], poisoned, *good[15:], raw_bytes]
            calls = [http.post(f"{url}/classify", content=body, headers={"Content-Type": "application/json"})
                     for body in bodies]  # fmt: skip
            return await asyncio.gather(*calls)

    answers = asyncio.run(burst())
    bad, surrogate_bytes = answers.pop(15), answers.pop()
    assert bad.status_code == 422 and "pairs[0].a holds a lone surrogate" in bad.json()["error"], bad.text
    assert surrogate_bytes.status_code == 422 and "lone surrogate" in surrogate_bytes.json()["error"]
    for answer, w in zip(answers, want, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json()["predictions"][0]["p_match"] == pytest.approx(w["p_match"], abs=1e-5)


def test_a_huge_chunked_body_is_refused_while_it_streams(server):
    """100 MB sent chunked (no length declared): a 413 once 4 MB have passed, the server growing by < 10 MB."""
    url, pid = server
    port = int(url.rsplit(":", 1)[1])
    before = _rss_kib(pid)
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    chunk = b"10000\r\n" + b'{"pairs": [' + b" " * (0x10000 - 11) + b"\r\n"
    sent = 0
    try:
        while sent < 100_000_000:
            sock.sendall(chunk)
            sent += 0x10000
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = b""
    try:
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    except (ConnectionResetError, TimeoutError):
        pass
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"status": 413' in answer and b"limits.max_request_bytes" in answer
    assert sent < 100_000_000, "the server read the whole body"
    grown = (_rss_kib(pid) - before) / 1024
    assert grown < 10, f"the server grew by {grown:.1f} MB"
    assert httpx.get(f"{url}/health").text == "ok"


@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (b"[" * 10000 + b"]" * 10000, {}, 400, "nests deeper than 32 levels"),
        (b'{"pairs": [{"a": "x", "b": ' + b"[" * 30 + b"]" * 30 + b"}]}", {}, 400, "nests deeper than 32 levels"),
        (b'{"pairs": [{"a": "x", "b": NaN}]}', {}, 400, "not valid JSON"),
        (b'{"pairs": [{"a": "x", "b": ' + b"9" * 5000 + b"}]}", {}, 400, "not valid JSON"),
        (b'{"pairs": [{"a": "x", "b": "y"}]}', {"Content-Type": "text/plain; a=json"}, 415, "application/json"),
        (b'{"pairs": [{"a": "x", "b": "y"}]}', {"Content-Type": "application/jsonp"}, 415, "application/json"),
        (b'{"pairs": [{"first": "x", "id": "7"}]}', {}, 422, "cannot tell which columns hold the two texts"),
        (b'{"pairs": [{"a": "x", "b": "y", "premise": "p", "hypothesis": "h"}]}', {}, 422, "two pairs of texts"),
        (b'{"pairs": [{"x": "1", "y": "2", "z": "3"}]}', {}, 422, "more than two columns could be the texts"),
        (b'{"pairs": [{"a": 1, "b": "y"}]}', {}, 422, "must be strings"),
        (b'{"query": "q", "documents": ["d"], "top_n": 0}', {"path": "/rerank"}, 422, "top_n must be a positive"),
        (
            b'{"query": "q", "documents": ["d"], "max_tokens_per_doc": 0}',
            {"path": "/rerank"},
            422,
            "max_tokens_per_doc must be a positive",
        ),
        (
            b'{"query": "q", "documents": [{"text": "d"}], "rank_fields": ["x"]}',
            {"path": "/rerank"},
            422,
            "documents[0] has no string 'x'",
        ),
        (b'{"query": "q", "documents": [{"txt": "d"}, 5]}', {"path": "/rerank"}, 422, "documents[1]: a document is"),
        (
            b'{"query": "q", "documents": ["d"], "return_embeddings": true}',
            {"path": "/rerank"},
            422,
            "return_embeddings: Extra inputs",
        ),
    ],
)
def test_malformed_and_guessed_bodies_get_a_json_4xx(server, body, headers, status, words):
    url, _ = server
    headers = {"Content-Type": "application/json", **headers}
    path = headers.pop("path", "/classify")
    answer = httpx.post(f"{url}{path}", content=body, headers=headers, timeout=30)
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["status"] == status and words in error["error"], error


def test_the_usual_names_and_a_charset_are_taken(server):
    url, _ = server
    answer = httpx.post(f"{url}/classify", content=json.dumps({"pairs": [{"question": "q", "answer": "an answer"}]}),
                        headers={"Content-Type": "application/json; charset=utf-8"}, timeout=30)  # fmt: skip
    assert answer.status_code == 200, answer.text


def test_a_pair_with_an_id_and_a_label_scores_as_predict_reads_it(server, wikiqa_run):
    """/classify reads a pair by the rule of a file of pairs: other keys (an id, a label) are ignored, and the same
    texts score the same under any of the names a file may give them."""
    url, _ = server
    texts = ("who wrote hamlet", "shakespeare wrote the play hamlet")
    rows = [{"id": "p1", "question": texts[0], "answer": texts[1], "label": 1},
            {"a": texts[0], "b": texts[1], "qid": "Q9"},
            {"first": texts[0], "second": texts[1], "pair_id": 3}]  # fmt: skip
    answer = httpx.post(f"{url}/classify", json={"pairs": rows}, timeout=30)
    assert answer.status_code == 200, answer.text
    predictions = answer.json()["predictions"]
    expected = Matcher.load(wikiqa_run[0]).predict([texts])[0]
    for prediction in predictions:
        assert prediction["p_match"] == pytest.approx(expected["p_match"], abs=1e-6)


def test_the_openapi_schema_describes_every_endpoint(server):
    url, _ = server
    document = httpx.get(f"{url}/openapi.json", timeout=30).json()
    for path in ("/classify", "/rank", "/rerank", "/v1/rerank", "/v2/rerank", "/align"):
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].rsplit("/", 1)[1] in document["components"]["schemas"], path
    rerank = document["components"]["schemas"]["RerankRequest"]["properties"]
    assert {"query", "documents", "top_n", "max_tokens_per_doc", "raw_scores", "truncation", "rank_fields"} <= set(
        rerank
    )
    answer = document["paths"]["/rerank"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["$ref"].endswith("/RerankAnswer")


def test_headers_hosts_and_the_browser(server, tmp_path):
    url, _ = server
    big = {f"x-filler-{i}": "v" * 1000 for i in range(40)}
    answer = httpx.get(f"{url}/info", headers=big, timeout=30)
    assert answer.status_code == 431 and "headers" in answer.json()["error"]
    answer = httpx.get(f"{url}/info", headers={"Host": "attacker.example"}, timeout=30)
    assert answer.status_code == 400 and "allowed_hosts=" in answer.json()["error"]
    for host in ("localhost", f"127.0.0.1:{url.rsplit(':', 1)[1]}"):
        assert httpx.get(f"{url}/health", headers={"Host": host}).status_code == 200
    answer = httpx.post(f"{url}/classify", json={"pairs": [{"a": "x", "b": "y"}]},
                        headers={"Origin": "https://attacker.example"})  # fmt: skip
    assert "access-control-allow-origin" not in answer.headers
    page = httpx.get(f"{url}/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    for method, path, status in [("GET", "/nowhere", 404), ("GET", "/classify", 405), ("DELETE", "/info", 405)]:
        answer = httpx.request(method, f"{url}{path}")
        assert answer.status_code == status and answer.json()["status"] == status, answer.text
    info = httpx.get(f"{url}/info").json()["model"]
    assert not info["run_dir"].startswith("/") and not info["checkpoint"].startswith("/")


def test_a_run_label_is_never_a_whole_path(tmp_path, monkeypatch):
    from matching.inference.description import run_label

    monkeypatch.chdir(tmp_path)
    assert run_label(tmp_path.parent) == tmp_path.parent.name
    assert run_label(__import__("pathlib").Path("/tmp")) == "tmp"


# What the rerank clients post (cohere v1/v2, langchain-cohere, cohere-haystack, infinity_client, LlamaIndex's Cohere
# and Jina rerankers), captured from the real clients by tests/test_serve_clients.py, which also drives the clients
# themselves when the clients extra is installed.
RERANK_CLIENTS = json.loads((Path(__file__).resolve().parent / "fixtures" / "rerank_clients.json").read_text())


@pytest.mark.parametrize("client", RERANK_CLIENTS)
def test_rerank_answers_what_each_client_posts_as_rank_ranks(server, client):
    url, _ = server
    path, body = RERANK_CLIENTS[client]["path"], RERANK_CLIENTS[client]["body"]
    answer = httpx.post(f"{url}{path}", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    given = answer.json()
    results = given["results"]
    ranked = httpx.post(f"{url}/rank", json={"query": body["query"], "candidates": body["documents"]}).json()["ranking"]
    top = body.get("top_n") or len(body["documents"])
    assert [r["index"] for r in results] == [r["index"] for r in ranked][:top]
    score = "score" if body.get("raw_scores") else "p_match"
    assert [r["relevance_score"] for r in results] == pytest.approx([r[score] for r in ranked][:top])
    assert given["usage"]["total_tokens"] > 0 and given["meta"]["billed_units"] == {"search_units": 1}
    if body.get("return_documents"):
        assert [r["document"]["text"] for r in results] == [body["documents"][r["index"]] for r in results]
    else:
        assert all("document" not in r for r in results)


def test_a_long_document_is_cut_and_the_answer_says_so(server):
    """One 5,000-word document among ten: cut to the server's 512 tokens (limits.max_text_tokens) and named in
    meta.truncated and meta.warnings; Jina's truncation=false refuses it; max_tokens_per_doc cuts shorter."""
    url, _ = server
    documents = [_text(8, shift) for shift in range(9)]
    documents.insert(4, _text(5000))
    body = {"query": _text(4), "documents": documents, "return_documents": True}
    answer = httpx.post(f"{url}/v2/rerank", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    meta = answer.json()["meta"]
    assert meta["truncated"] == [4] and "cut to the first 512" in meta["warnings"][0]
    cut = [_text(5000).split()[:512] and " ".join(_text(5000).split()[:512]) if i == 4 else d
           for i, d in enumerate(documents)]  # fmt: skip
    ranked = httpx.post(f"{url}/rank", json={"query": body["query"], "candidates": cut}).json()["ranking"]
    results = answer.json()["results"]
    assert [r["index"] for r in results] == [r["index"] for r in ranked]
    assert [r["relevance_score"] for r in results] == pytest.approx([r["p_match"] for r in ranked])
    assert next(r for r in results if r["index"] == 4)["document"]["text"] == documents[4]  # given back whole
    refused = httpx.post(f"{url}/rerank", json={**body, "truncation": False}, timeout=60)
    assert refused.status_code == 413 and "documents[4] has 5000 tokens" in refused.json()["error"]
    short = httpx.post(f"{url}/rerank", json={**body, "max_tokens_per_doc": 6}, timeout=60).json()
    assert short["meta"]["truncated"] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert "cut to the first 6 tokens" in short["meta"]["warnings"][0] or "cut to the first 6" in str(short["meta"])
    plain = httpx.post(f"{url}/rerank", json={"query": body["query"], "documents": documents[:4]}).json()
    assert "truncated" not in plain["meta"] and "warnings" not in plain["meta"]


def test_document_objects_rank_fields_and_raw_scores(server):
    """Objects with an id and a title, read by their text or by rank_fields (values joined by a newline), given back
    whole; raw_scores answers /rank's logit margin."""
    url, _ = server
    documents = [{"id": f"d{i}", "title": _text(2, i), "text": _text(6, i)} for i in range(4)]
    query = _text(3)
    answer = httpx.post(f"{url}/v1/rerank", json={"query": query, "documents": documents, "return_documents": True})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["document"] for r in results] == [documents[r["index"]] for r in results]
    ranked = httpx.post(f"{url}/rank", json={"query": query, "candidates": [d["text"] for d in documents]}).json()
    assert [r["index"] for r in results] == [r["index"] for r in ranked["ranking"]]
    fields = httpx.post(f"{url}/v1/rerank", json={"query": query, "documents": documents,
                                                  "rank_fields": ["title", "text"]}).json()["results"]  # fmt: skip
    joined = [f"{d['title']}\n{d['text']}" for d in documents]
    by_fields = httpx.post(f"{url}/rank", json={"query": query, "candidates": joined}).json()["ranking"]
    assert [r["relevance_score"] for r in fields] == pytest.approx([r["p_match"] for r in by_fields])
    raw = httpx.post(f"{url}/rerank", json={"query": query, "documents": joined, "raw_scores": True}).json()
    assert [r["relevance_score"] for r in raw["results"]] == pytest.approx([r["score"] for r in by_fields])


def test_two_server_processes_answer_alike_and_end_with_their_supervisor(snli_run):
    """workers=2: two processes on one port (SO_REUSEPORT), each with its model; 40 connections at once all get
    Matcher's answers; kill -9 of the supervisor leaves no process and frees the port."""
    port = free_port()
    cmd = [sys.executable, "-m", "matching.serve", f"ckpt={snli_run[0]}", f"port={port}", "threads=1", "workers=2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"{url}/health", timeout=2).text == "ok":
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert httpx.get(f"{url}/info").json()["server"]["workers"] == 2
        pairs = [(_text(3 + i % 6, i), _text(4 + i % 5, i + 5)) for i in range(40)]
        want = Matcher.load(snli_run[0]).predict(pairs)

        async def burst():
            clients = [httpx.AsyncClient(timeout=60) for _ in pairs]  # one connection each: spread over both
            try:
                return await asyncio.gather(*(c.post(f"{url}/classify", json={"pairs": [{"a": a, "b": b}]})
                                              for c, (a, b) in zip(clients, pairs, strict=True)))  # fmt: skip
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))

        for answer, w in zip(asyncio.run(burst()), want, strict=True):
            assert answer.status_code == 200, answer.text
            assert answer.json()["predictions"][0]["probs"] == pytest.approx(w["probs"], abs=1e-5)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.3)
        else:
            raise AssertionError("server processes outlived their supervisor")
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=2)
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_the_app_on_a_local_ray_serve_answers_as_the_server_does(server, wikiqa_run):
    """engine=ray: the same app as a Ray Serve deployment (2 replicas) on a Ray instance started on this machine
    answers /classify, /rank, /rerank and /info as the single-process server does, bad requests included."""
    pytest.importorskip("ray.serve", reason="the ray-serve extra: pip install -e '.[ray-serve]'")
    url, _ = server
    port = free_port()
    cmd = [sys.executable, "-m", "matching.serve", f"ckpt={wikiqa_run[0]}", f"port={port}", "threads=1", "engine=ray",
           "ray.replicas=2", "ray.cpus_per_replica=0.5"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    ray_url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() - started < 300, "Ray Serve did not get ready in 5 minutes"
            try:
                if httpx.get(f"{ray_url}/health", timeout=5).text == "ok":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        print(f"Ray Serve ready in {time.monotonic() - started:.1f} s")
        requests = [
            ("/classify", {"pairs": [{"a": _text(5, i), "b": _text(12, i + 1)} for i in range(20)]}),
            ("/rank", {"query": _text(5), "candidates": [_text(8, k) for k in range(10)]}),
            (RERANK_CLIENTS["cohere v1"]["path"], RERANK_CLIENTS["cohere v1"]["body"]),
            ("/classify", {"pairs": [{"first": "x", "second": "y"}]}),
        ]
        for path, body in requests:
            mine, theirs = httpx.post(f"{ray_url}{path}", json=body, timeout=60), httpx.post(f"{url}{path}", json=body)
            assert mine.status_code == theirs.status_code, (path, mine.text)
            a, b = mine.json(), theirs.json()
            a.pop("id", None), b.pop("id", None)
            assert a == b, path
        assert httpx.get(f"{ray_url}/info").json()["model"]["checkpoint_sha256"] == httpx.get(
            f"{url}/info").json()["model"]["checkpoint_sha256"]  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
