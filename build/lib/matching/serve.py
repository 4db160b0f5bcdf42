"""`matching-serve ckpt=<path> [port=8000]` (conf/serve.yaml): a trained model behind HTTP, with LitServe.

The server needs the run directory alone (offline: no corpus, no vectors file) and answers JSON:

- `POST /classify` `{"pairs": [{"a": ..., "b": ...}, ...]}` -> `{"predictions": [{"label", "probs"}, ...]}`, in the
  order of the pairs;
- `POST /rank` `{"query": ..., "candidates": [...]}` -> `{"ranking": [{"index", "candidate", "score", "p_match"}]}`
  by decreasing score (the logit margin, as `predict` ranks), for models trained on a ranking task;
- `POST /align` `{"a": ..., "b": ...}` -> both sides' tokens, the prediction and every alignment matrix (what
  `visualize` draws), for debugging one prediction;
- `GET /health` ("ok" once the model is loaded) and `GET /info` (task, labels, aligner, checkpoint, vocabulary
  size, the limits).

Requests from concurrent clients are batched (`max_batch_size` requests, waiting at most `batch_timeout` seconds)
and run in batches within the run's memory budget (`data.batch_tokens`, `data.batch_cells`), through the same
tokenisation, vocabulary and `predict_step` as `predict`. A bad request gets a 4xx answer
`{"error": <what was wrong and what to do>, "status": <code>}` and the server goes on serving; the limits
(pairs, candidates and tokens per text, bytes per request) are `limits.*` in conf/serve.yaml.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from omegaconf import DictConfig, OmegaConf

from matching.cli import command
from matching.extras import require
from matching.runs import RunError, load_trained


def build_server(cfg: DictConfig) -> Any:
    """The LitServer of a composed serve config; the run is loaded here first, so that a wrong ckpt= or override is
    reported before any worker starts."""
    require("litserve", "serve", "serving a model over HTTP")
    from fastapi.exceptions import RequestValidationError

    from matching.endpoints import AlignAPI, ClassifyAPI, Limits, PipeQueueServer, RankAPI, invalid_request, model_info

    limits = Limits(**OmegaConf.to_container(cfg.limits, resolve=True))
    for key in ("max_batch_size", "port", "api_servers"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise RunError(f"{key} must be a positive whole number, got {cfg[key]!r}")
    if not isinstance(cfg.batch_timeout, (int, float)) or cfg.batch_timeout < 0:
        raise RunError(f"batch_timeout must be a number of seconds >= 0, got {cfg.batch_timeout!r}")
    if cfg.accelerator not in ("cpu", "cuda", "auto"):
        raise RunError(f"accelerator must be cpu, cuda or auto, got {cfg.accelerator!r}")
    run = load_trained(cfg.ckpt, cfg)
    config = OmegaConf.to_container(cfg, resolve=True)
    apis = [
        api(str(cfg.ckpt), config, limits, int(cfg.threads), int(cfg.max_batch_size), float(cfg.batch_timeout))
        for api in (ClassifyAPI, RankAPI)
    ]
    apis.append(AlignAPI(str(cfg.ckpt), config, limits, int(cfg.threads), 1, 0.0))
    server = PipeQueueServer(
        apis,
        accelerator=cfg.accelerator,
        devices=1,
        timeout=float(cfg.timeout),
        max_payload_size=limits.max_request_bytes,
        model_metadata=model_info(run, limits),
    )
    server.app.add_exception_handler(RequestValidationError, invalid_request)
    return server


def _on_sigterm(server_pid: int) -> Any:
    """SIGTERM's handler: the server shuts down as on Ctrl+C (LitServe stops its workers on KeyboardInterrupt); its
    forked HTTP processes, which inherit the handler, just end."""

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() == server_pid:
            raise KeyboardInterrupt
        raise SystemExit(0)

    return handler


def serve(cfg: DictConfig) -> None:
    server = build_server(cfg)
    signal.signal(signal.SIGTERM, _on_sigterm(os.getpid()))  # kill, docker stop, systemd: as Ctrl+C
    gc.collect()
    gc.freeze()  # what is loaded now (torch, the app) is shared with the forked HTTP process and never collected
    print(f"serving {cfg.ckpt} on http://{cfg.host}:{cfg.port} (POST /classify /rank /align, GET /health /info)",
          file=sys.stderr)  # fmt: skip
    server.run(
        host=cfg.host,
        port=int(cfg.port),
        num_api_servers=int(cfg.api_servers),
        log_level=cfg.log_level,
        generate_client_file=False,
        access_log=bool(cfg.access_log),
    )


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(ckpt: str | os.PathLike, overrides: Sequence[str] = (), port: int | None = None,
            start_timeout: float = 180.0) -> Iterator[str]:  # fmt: skip
    """`matching-serve` in a child process on 127.0.0.1 (a free port unless given), for tests, benchmarks and
    notebooks: yields its base URL once GET /health answers "ok", and stops the server and its workers on exit.
    A server that fails to start raises RuntimeError with the end of its output."""
    port = port or free_port()
    log = tempfile.TemporaryFile()
    cmd = [sys.executable, "-m", "matching.serve", f"ckpt={ckpt}", f"port={port}", *overrides]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-3000:]
                why = f"exited with status {proc.returncode}" if proc.returncode is not None else "did not get ready"
                raise RuntimeError(f"matching-serve {why}: {' '.join(cmd)}\n{tail}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                pass
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        try:  # LitServe's worker processes share the session; make sure none outlives the server
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()


main = command("serve", serve, uses_run=True)

if __name__ == "__main__":
    sys.exit(main())
