"""The HTTP server of `matching-serve` and `matching-serve-onnx`: its HTTP front (matching.serving.http) and one model
worker process per served model (matching.serving.batcher), started from a composed serve config (conf/serve.yaml),
stopped cleanly on Ctrl+C or SIGTERM; and `serving()`, a server in a child process for tests, benchmarks and
notebooks. It imports neither torch nor Hydra: the workers load their models through matching.inference.
"""

from __future__ import annotations

import gc
import multiprocessing
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
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from matching.errors import RunError
from matching.extras import require
from matching.inference import load, saved_config
from matching.inference.threads import cores


@dataclass
class Server:
    """A configured server, its model workers started: `run()` serves until Ctrl+C or SIGTERM, then stops them."""

    app: Any
    clients: list
    sock: socket.socket
    cfg: DictConfig

    def run(self) -> None:
        import uvicorn

        config = uvicorn.Config(self.app, log_level=self.cfg.log_level, access_log=bool(self.cfg.access_log),
                                lifespan="on", timeout_graceful_shutdown=10)  # fmt: skip
        # uvicorn handles SIGINT and SIGTERM (it stops taking requests and answers those under way), then raises
        # the signal again for the handler it found: these make that a normal exit, status 0, after the workers.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _stopped)
        try:
            uvicorn.Server(config).run(sockets=[self.sock])
        finally:
            self.stop()

    def stop(self) -> None:
        """Each worker gets a stop job, finishes what it holds and ends; one that does not within 10 s is killed."""
        for client in self.clients:
            if client.process.is_alive():
                client.requests.put(None)
        deadline = time.monotonic() + 10
        for client in self.clients:
            client.process.join(max(0.0, deadline - time.monotonic()))
            if client.process.is_alive():
                client.process.kill()
                client.process.join()
        self.sock.close()


def _stopped(signum: int, frame: Any) -> None:
    """Ctrl+C or SIGTERM after uvicorn has stopped: nothing more to do than what `Server.run` does next."""


def _positive(cfg: DictConfig, key: str) -> int:
    if not isinstance(cfg[key], int) or isinstance(cfg[key], bool) or cfg[key] < 1:
        raise RunError(f"{key} must be a positive whole number, got {cfg[key]!r}")
    return int(cfg[key])


def _run_names(aligners: list[str]) -> list[str]:
    """Each run's name in `?run=` and on the page: its aligner, numbered where two runs share one (coda, coda-2)."""
    names = []
    for aligner in aligners:
        name, n = aligner, 1
        while name in names:
            n += 1
            name = f"{aligner}-{n}"
        names.append(name)
    return names


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise RunError(f"cannot listen on {host}:{port} ({err.strerror}); another server may hold the port: stop it, "
                       f"or choose another with port=") from None  # fmt: skip
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def build_server(cfg: DictConfig) -> Server:
    """The server of a composed serve config. Every run is loaded here first, so that a wrong ckpt=, compare= or
    override is reported before anything listens; then each run's worker starts and loads it again (its own
    process, its own core) and the port is bound."""
    require("fastapi", "serve", "serving a model over HTTP")
    require("uvicorn", "serve", "serving a model over HTTP")
    from matching.serving.batcher import Limits, WorkerSpec, work
    from matching.serving.http import ModelClient, build_app, model_info

    limits = Limits(**OmegaConf.to_container(cfg.limits, resolve=True))
    port, max_batch_size = _positive(cfg, "port"), _positive(cfg, "max_batch_size")
    if not isinstance(cfg.batch_timeout, (int, float)) or cfg.batch_timeout < 0:
        raise RunError(f"batch_timeout must be a number of seconds >= 0, got {cfg.batch_timeout!r}")
    if not isinstance(cfg.timeout, (int, float)) or cfg.timeout <= 0:
        raise RunError(f"timeout must be a number of seconds > 0, got {cfg.timeout!r}")
    if cfg.accelerator not in ("cpu", "cuda", "auto"):
        raise RunError(f"accelerator must be cpu, cuda or auto, got {cfg.accelerator!r}")
    compare = [] if cfg.compare is None else [cfg.compare] if isinstance(cfg.compare, str) else cfg.compare
    if not isinstance(compare, list) and not OmegaConf.is_list(compare):
        raise RunError(f"compare must be a list of runs, e.g. compare=[outputs/runs/snli/coda/<time>], got {compare!r}")
    device = cfg.accelerator
    if device == "auto":  # torch, when there is one to ask (an ONNX Runtime server runs on the CPU)
        try:
            import torch
        except ImportError:
            device = "cpu"
        else:
            device = "cuda" if torch.cuda.is_available() else "cpu"

    backend, quantize = str(cfg.get("backend") or "auto"), cfg.get("quantize")
    threads = int(cfg.threads)
    if threads < 0:
        raise RunError(f"threads must be a whole number >= 0 (0: chosen per call), got {threads}")
    # (model, its config) of every run: the first composed by the command line, the others as saved
    configs = [(str(cfg.ckpt), OmegaConf.to_container(cfg, resolve=True) if "task" in cfg else {})]
    for other in compare:
        configs.append((str(other), OmegaConf.to_container(saved_config(str(other)), resolve=True)))
    predictors = [
        load(
            ckpt,
            backend=backend,
            quantize=quantize,
            device=device,
            config=OmegaConf.create(config) if "task" in config else None,
        )  # fmt: skip
        for ckpt, config in configs
    ]
    index = str(cfg.index) if cfg.get("index") else None
    if index is not None:  # a missing or stale index is refused before any worker starts
        if compare:
            raise RunError("index= serves one contextual run against its candidates' states; drop compare=")
        from matching.inference.state_index import StateIndex

        predictors[0].use_index(StateIndex.load(index, predictors[0].index_key()))
    infos = [model_info(predictor, limits) for predictor in predictors]
    del predictors  # each worker loads its own
    kinds = {info["kind"] for info in infos}
    if len(kinds) > 1:
        listed = ", ".join(
            f"{ckpt} ({info['task']}, {info['kind']})" for (ckpt, _), info in zip(configs, infos, strict=True)
        )
        raise RunError(f"the runs served side by side must all classify or all rank, got {listed}; serve the others "
                       f"with a server of their own")  # fmt: skip
    sock = _listen(cfg.host, port)

    # The workers share the cores (the HTTP front keeps one when there are more than two): workers × threads never
    # exceed them (matching.inference.threads).
    cap = max(1, (cores() - (1 if cores() > 2 else 0)) // len(configs))
    if threads > cap:
        print(f"threads={threads} per model worker x {len(configs)} workers is more than this machine's {cores()} "
              f"cores: each worker uses {cap}", file=sys.stderr)  # fmt: skip
        threads = cap
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process is inherited
    clients = []
    for name, (ckpt, config), info in zip(_run_names([i["aligner"] for i in infos]), configs, infos, strict=True):
        spec = WorkerSpec(ckpt, config, limits, threads, cap, max_batch_size, float(cfg.batch_timeout),
                          float(cfg.timeout), device, backend, quantize, index,
                          str(cfg.get("encoder_backend") or "torch"))  # fmt: skip
        requests = context.Queue()
        answers, sending = context.Pipe(duplex=False)
        process = context.Process(target=work, args=(spec, requests, sending), name=f"matching-serve {name}",
                                  daemon=True)  # fmt: skip
        process.start()
        sending.close()
        clients.append(ModelClient(name, info, process, requests, answers))
    server_info = {"max_batch_size": max_batch_size, "batch_timeout": float(cfg.batch_timeout),
                   "timeout": float(cfg.timeout), "threads": threads, "threads_cap": cap, "accelerator": device,
                   "max_request_bytes": limits.max_request_bytes}  # fmt: skip
    server = Server(build_app(clients, limits, server_info), clients, sock, cfg)
    for client in clients:  # each worker says "ready" once its run is loaded, or why it could not load it
        try:
            message = client.answers.recv() if client.answers.poll(300) else ("error", "it did not load within 300 s")
        except EOFError:
            message = ("error", f"it exited with code {client.process.exitcode} while loading the run")
        if message[0] != "ready":
            server.stop()
            raise RunError(f"the model worker of {client.info['checkpoint']} could not start: {message[1]}")
    return server


def run_server(cfg: DictConfig) -> None:
    """Build the server of a composed serve config, say what it serves, and serve until stopped."""
    server = build_server(cfg)
    names = ", ".join(f"{c.name} ({c.info['task']}, {c.info['checkpoint']}, {c.info['backend']})"
                      for c in server.clients)  # fmt: skip
    endpoints = sorted({e for c in server.clients for e in c.info["endpoints"]})
    print(f"serving {names} on http://{cfg.host}:{cfg.port} (the page at /; POST {' '.join(endpoints)}, GET /health "
          f"/info)", file=sys.stderr)  # fmt: skip
    # What is loaded now (torch, Lightning, the app) stays for the server's life: full collections, which every
    # request's garbage triggers now and then, need not walk it (they took 0.1-0.5 s each under load: the p99).
    gc.collect()
    gc.freeze()
    server.run()


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(ckpt: str | os.PathLike, overrides: Sequence[str] = (), port: int | None = None,
            start_timeout: float = 180.0, command: str = "matching.serve") -> Iterator[str]:  # fmt: skip
    """`matching-serve` in a child process on 127.0.0.1 (a free port unless given), for tests, benchmarks and
    notebooks: yields its base URL once GET /health answers "ok", and stops the server and its workers on exit.
    A server that fails to start raises RuntimeError with the end of its output. `command`: matching.serve, or
    matching.serve_onnx for an exported model on ONNX Runtime alone."""
    port = port or free_port()
    log = tempfile.TemporaryFile()
    cmd = [sys.executable, "-m", command, f"ckpt={ckpt}", f"port={port}", *overrides]
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
        try:  # the model workers share the session; make sure none outlives the server
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
