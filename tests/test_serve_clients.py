"""The rerank clients people call a reranker from, installed from the package index (the `clients` extra), driven
against a real `matching-serve` on a small WikiQA ranker: Cohere's SDK (v1 and v2 clients, sync and async),
LangChain's CohereRerank, Haystack's CohereRanker, infinity_client and LlamaIndex's Cohere and Jina rerankers. Each
with and without top_n, return_documents and its length option; its order and scores equal `/rank`'s.

What each client posts is also captured by a recording server and compared with tests/fixtures/rerank_clients.json,
the bodies the default suite replays without the clients (tests/test_serve_hostile.py): when a client starts to send
something new, this test says so. `python tests/test_serve_clients.py` rewrites that file from the installed clients.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest

# Haystack sends anonymous usage telemetry unless told not to (read when it is imported): nothing leaves a test.
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "rerank_clients.json"
QUERY = "how are glacier caves formed?"
DOCUMENTS = ["A glacier cave is a cave formed within the ice of a glacier.", "The ice facade is 60 m high.",
             "Caves form by melting water.", "Glaciers move slowly down the valley.",
             " ".join(["the ice of a glacier melts and water forms a cave"] * 500)]  # fmt: skip
LONG = len(DOCUMENTS) - 1  # 5,000 words: over the server's 512-token limit, cut


def _version(package: str) -> str:
    return metadata.version(package)


# -- each client's call: (client name, its package, a function of (base URL, top_n, return_documents, length)) ---------
def _cohere_v1(url, top_n, documents, length):
    import cohere

    client = cohere.Client(api_key="unused", base_url=url)
    answer = client.rerank(model="rerank-english-v3.0", query=QUERY, documents=DOCUMENTS, top_n=top_n,
                           return_documents=documents, max_chunks_per_doc=length)  # fmt: skip
    return [(r.index, r.relevance_score, r.document.text if r.document else None) for r in answer.results]


def _cohere_v2(url, top_n, documents, length):
    import cohere

    client = cohere.ClientV2(api_key="unused", base_url=url)
    answer = client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCUMENTS, top_n=top_n,
                           max_tokens_per_doc=length)  # fmt: skip
    return [(r.index, r.relevance_score, None) for r in answer.results]


def _cohere_v2_async(url, top_n, documents, length):
    import cohere

    async def call():
        client = cohere.AsyncClientV2(api_key="unused", base_url=url)
        return await client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCUMENTS, top_n=top_n,
                                   max_tokens_per_doc=length)  # fmt: skip

    return [(r.index, r.relevance_score, None) for r in asyncio.run(call()).results]


def _langchain(url, top_n, documents, length):
    from langchain_cohere import CohereRerank

    reranker = CohereRerank(model="rerank-v3.5", base_url=url, cohere_api_key="unused",
                            top_n=top_n or len(DOCUMENTS))  # fmt: skip
    ranked = reranker.rerank(DOCUMENTS, QUERY, max_tokens_per_doc=length)
    return [(r["index"], r["relevance_score"], None) for r in ranked]


def _haystack(url, top_n, documents, length):
    from haystack import Document
    from haystack.utils import Secret
    from haystack_integrations.components.rankers.cohere import CohereRanker

    ranker = CohereRanker(model="rerank-v3.5", api_base_url=url, api_key=Secret.from_token("unused"),
                          top_k=top_n or len(DOCUMENTS), max_tokens_per_doc=length or 4096)  # fmt: skip
    given = [Document(content=text, id=str(i)) for i, text in enumerate(DOCUMENTS)]
    ranked = ranker.run(query=QUERY, documents=given)["documents"]
    return [(int(d.id), d.score, d.content if documents else None) for d in ranked]


def _infinity(url, top_n, documents, length):
    from infinity_client import Client
    from infinity_client.api.default import rerank
    from infinity_client.models import RerankInput

    body = RerankInput(query=QUERY, documents=DOCUMENTS, return_documents=documents, raw_scores=bool(length),
                       **({"top_n": top_n} if top_n else {}))  # fmt: skip
    answer = rerank.sync(client=Client(base_url=url), body=body)
    assert answer.usage.total_tokens > 0
    return [(r.index, r.relevance_score, r.document if documents else None) for r in answer.results]


def _llama_index(kind):
    def call(url, top_n, documents, length):
        from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

        if kind == "cohere":
            from llama_index.postprocessor.cohere_rerank import CohereRerank

            reranker = CohereRerank(api_key="unused", model="rerank-v3.5", top_n=top_n or len(DOCUMENTS), base_url=url)
        else:
            from llama_index.postprocessor.jinaai_rerank import JinaRerank

            reranker = JinaRerank(api_key="unused", model="jina-reranker-v2-base-multilingual",
                                  top_n=top_n or len(DOCUMENTS), base_url=url)  # fmt: skip
        nodes = [NodeWithScore(node=TextNode(text=text, id_=str(i))) for i, text in enumerate(DOCUMENTS)]
        ranked = reranker.postprocess_nodes(nodes, query_bundle=QueryBundle(QUERY))
        return [(int(n.node.node_id), n.score, n.node.get_content() if documents else None) for n in ranked]

    return call


#: name -> (the package that must be installed, the call). `length`: the client's own length option (None: unset).
CLIENTS = {
    "cohere v1": ("cohere", _cohere_v1, "max_chunks_per_doc"),
    "cohere v2": ("cohere", _cohere_v2, "max_tokens_per_doc"),
    "cohere v2 async": ("cohere", _cohere_v2_async, "max_tokens_per_doc"),
    "langchain-cohere": ("langchain-cohere", _langchain, "max_tokens_per_doc"),
    "cohere-haystack": ("cohere-haystack", _haystack, "max_tokens_per_doc"),
    "infinity_client": ("infinity_client", _infinity, "raw_scores"),
    "llama-index cohere": ("llama-index-postprocessor-cohere-rerank", _llama_index("cohere"), None),
    "llama-index jina": ("llama-index-postprocessor-jinaai-rerank", _llama_index("jina"), None),
}


def _installed(package: str) -> bool:
    try:
        _version(package)
    except metadata.PackageNotFoundError:
        return False
    return True


def _needs(name: str):
    package = CLIENTS[name][0]
    return pytest.mark.skipif(not _installed(package), reason=f"{package} is not installed (the clients extra)")


@pytest.fixture(scope="module")
def server(wikiqa_run):
    pytest.importorskip("fastapi", reason="the serve extra")
    from conftest import serve_process

    with serve_process(wikiqa_run[0]) as served:
        yield served[0]


@pytest.fixture(scope="module")
def ranked(server):
    """/rank's answer for the query and documents, the long one cut as /rerank cuts it (to the server's limit)."""
    import httpx

    def rank(raw: bool, max_tokens: int | None = None):
        cut = [" ".join(d.split()[: max_tokens or 512]) for d in DOCUMENTS]
        ranking = httpx.post(f"{server}/rank", json={"query": QUERY, "candidates": cut}, timeout=60).json()["ranking"]
        return [(r["index"], r["score"] if raw else r["p_match"]) for r in ranking]

    return rank


CASES = [(None, False, None), (2, True, None), (3, False, "length")]


@pytest.mark.parametrize("name", [pytest.param(n, marks=_needs(n)) for n in CLIENTS])
@pytest.mark.parametrize(("top_n", "documents", "length"), CASES)
def test_the_client_reranks_as_rank_ranks(server, ranked, name, top_n, documents, length):
    _, call, option = CLIENTS[name]
    if length and option is None:
        pytest.skip(f"{name} has no length option")
    value = {"max_chunks_per_doc": 1, "max_tokens_per_doc": 200, "raw_scores": True}.get(option) if length else None
    results = call(server, top_n, documents, value)
    expected = ranked(raw=option == "raw_scores" and bool(length),
                      max_tokens=200 if length and option == "max_tokens_per_doc" else None)  # fmt: skip
    top = top_n or len(DOCUMENTS)
    assert [r[0] for r in results] == [e[0] for e in expected][:top], name
    assert [r[1] for r in results] == pytest.approx([e[1] for e in expected][:top], abs=1e-6), name
    if documents and name not in ("cohere v2", "cohere v2 async", "langchain-cohere"):
        assert [r[2] for r in results] == [DOCUMENTS[r[0]] for r in results], name


# -- what each client posts --------------------------------------------------------------------------------------------
class _Recorder(http.server.BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802 - the handler's name in http.server
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.bodies.append({"path": self.path, "body": json.loads(body)})
        answer = json.dumps({"id": "1", "model": "m", "results": [{"index": 0, "relevance_score": 0.5}], "meta": {},
                             "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def captured_bodies() -> dict:
    """What each installed client posts for a two-document rerank with its defaults (top_n 2 where it takes one),
    recorded by a local server that answers every post alike."""
    recorder = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    global DOCUMENTS
    kept, DOCUMENTS = DOCUMENTS, DOCUMENTS[:2]
    out = {}
    try:
        for name, (package, call, _) in CLIENTS.items():
            if not _installed(package):
                continue
            _Recorder.bodies.clear()
            try:
                call(url, 2, False, None)
            except Exception:  # noqa: BLE001 - the recorder's answer need not satisfy every client: the body counts
                pass
            out[name] = {"client": f"{package} {_version(package)}", **_Recorder.bodies[0]}
    finally:
        DOCUMENTS = kept
        recorder.shutdown()
    return out


@pytest.mark.skipif(not all(_installed(p) for p, _, _ in CLIENTS.values()), reason="the clients extra")
def test_the_replayed_bodies_are_what_the_clients_send():
    replayed = json.loads(FIXTURE.read_text())
    now = captured_bodies()
    for name, seen in now.items():
        assert {k: seen[k] for k in ("path", "body")} == {k: replayed[name][k] for k in ("path", "body")}, (
            f"{seen['client']} now posts {seen}; run python tests/test_serve_clients.py to refresh {FIXTURE.name}"
        )


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(captured_bodies(), indent=2) + "\n")
    print(f"wrote {FIXTURE}", file=sys.stderr)
