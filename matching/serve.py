"""`matching-serve ckpt=<path> [compare=[<run>, ...]] [port=8000]` (conf/serve.yaml): trained models behind HTTP.

The server needs the run directories alone (offline: no corpus, no vectors file). At `/` it serves a page to look
at what an aligner does: type a pair (or a query and candidates), see each run's prediction and alignment
matrices as heat-maps, several runs side by side (`compare=`) and their difference. It answers JSON:

- `POST /classify` `{"pairs": [{"a": ..., "b": ...}, ...]}` -> `{"predictions": [{"label", "probs"}, ...]}` (a
  ranking model: `{"score", "p_match"}` per pair), in the order of the pairs;
- `POST /rank` `{"query": ..., "candidates": [...]}` -> `{"ranking": [{"index", "candidate", "score", "p_match"}]}`
  by decreasing score (the logit margin, as `predict` ranks), for models trained on a ranking task;
- `POST /align` `{"a": ..., "b": ...}` -> both sides' tokens, the prediction and every alignment matrix (what
  `visualize` draws), with which tokens are unknown words and what each matrix is;
- `POST /rerank` (also `/v1/rerank`, `/v2/rerank`) `{"query": ..., "documents": [...], "top_n": n}` -> `{"results":
  [{"index", "relevance_score"}, ...]}`: the rerank API of Cohere, Jina and Infinity, for their clients unchanged;
- `GET /health` ("ok" while every run's batcher runs) and `GET /info` (each run's task, labels, aligner,
  checkpoint, vocabulary size, the limits).

`?run=<name>` sends a request to another run than the first (names: GET /info). The server is FastAPI and uvicorn
(their documented APIs) with each run's model in the same process (matching/serving/batcher.py): a batcher takes the
requests of concurrent clients (`max_batch_size` requests, waiting at most `batch_timeout` seconds) and runs them in
the run's model thread within its memory budget (`data.batch_tokens`, `data.batch_cells`), through the same
tokenisation, vocabulary and inference path as `predict`; `workers=N` (one per core by default) runs N such processes
on the port. A bad request gets a 4xx answer `{"error": <what was wrong and what to do>, "status": <code>}` and the
server goes on serving; the limits (pairs, candidates and tokens per text, bytes per request and of headers) are
`limits.*` in conf/serve.yaml, the guards of a server on localhost (JSON only, a Host allow-list, no CORS by default)
docs/how-to/serving.md's.
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from matching.cli import command
from matching.errors import RunError
from matching.serving.server import run_server


def serve(cfg: DictConfig) -> None:
    """The `serve` command on a composed config (conf/serve.yaml over the run's saved config): this machine's
    processes (`engine=uvicorn`), or a Ray Serve deployment (`engine=ray`)."""
    engine = cfg.get("engine", "uvicorn")
    if engine == "ray":
        from matching.serving.ray_serve import run_on_ray

        run_on_ray(cfg)
    elif engine == "uvicorn":
        run_server(cfg)
    else:
        raise RunError(f"engine must be uvicorn (this machine's processes) or ray (Ray Serve), got {engine!r}")


main = command("serve", serve, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
