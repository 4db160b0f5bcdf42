"""The HTTP server of `matching-serve` and `matching-serve-onnx`: its HTTP front (matching.serving.http) and each served
run's model with its micro-batcher (matching.serving.batcher), all in the serving process, started from a composed
serve config (conf/serve.yaml) and stopped cleanly on Ctrl+C or SIGTERM; `workers=N` runs N such processes on one
listening socket (each with its own models, as uvicorn's and gunicorn's workers do) under a supervisor process; and
`serving()`, a server in a child process for tests, benchmarks and notebooks. It imports neither torch nor Hydra: the
models load through matching.inference.
"""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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
from matching.matcher import Matcher

#: The hosts that listen on every address: the Host allow-list cannot name them, only localhost's names.
EVERY_ADDRESS = ("0.0.0.0", "::", "")

#: `workers=auto`: one server process per core, at most this many (each holds its own copy of the models).
MAX_AUTO_WORKERS = 4

#: After Ctrl+C or SIGTERM, the requests under way get this long to be answered (uvicorn's graceful shutdown) ...
GRACEFUL_SHUTDOWN_S = 10
#: ... and the whole stop this long, the models' threads and the interpreter's exit included: a process still there
#: is stuck (a bug of ours), prints its threads' stacks and exits with status 1 rather than hold the port for good.
STOP_DEADLINE_S = 30


@dataclass
class Server:
    """A configured server, its runs loaded: `run()` serves until Ctrl+C or SIGTERM."""

    app: Any
    runs: list
    sock: socket.socket
    cfg: DictConfig

    def run(self) -> None:
        import uvicorn

        config = uvicorn.Config(self.app, log_level=self.cfg.log_level, access_log=bool(self.cfg.access_log),
                                lifespan="on", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)  # fmt: skip
        server = uvicorn.Server(config)
        handle_exit = server.handle_exit
        deadline = StopDeadline(STOP_DEADLINE_S)

        def stop(signum: int, frame: Any) -> None:
            deadline.arm(signal.Signals(signum).name)
            handle_exit(signum, frame)

        # uvicorn handles SIGINT and SIGTERM while it serves (it stops taking requests and answers those under way)
        # through `handle_exit`, then raises the signal again for the handler it found. `stop` is both: it arms the
        # stop's deadline, and a signal that comes before uvicorn takes over is not lost but tells uvicorn to stop
        # as soon as it has started. Either way a normal exit, status 0; the caller's handlers come back after.
        server.handle_exit = stop
        with stop_signals_to(stop):
            try:
                server.run(sockets=[self.sock])
            finally:
                self.sock.close()
                deadline.disarm()


@contextmanager
def stop_signals_to(handler: Any) -> Iterator[None]:
    """Ctrl+C and SIGTERM go to `handler` within the block; the caller's handlers come back after it (a Python
    session that served goes on as it was)."""
    before = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler_before in before.items():
            signal.signal(sig, handler_before)


class StopDeadline:
    """How long a server's stop may take. Armed by the first Ctrl+C or SIGTERM: a process whose stop has not ended
    `seconds` later says so, prints every thread's stack (what the stop waits on) and exits with status 1. A Python
    thread does that while the interpreter runs; SIGALRM, left to its default action, ends the process a few seconds
    later where the interpreter itself is stuck (in native code that holds the GIL). Disarmed once the server has
    stopped, so that a Python session that served goes on."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.stopped = threading.Event()
        self.armed = self.alarmed = False

    def arm(self, why: str) -> None:
        if self.armed or self.stopped.is_set():
            return
        self.armed = True
        threading.Thread(target=self._expire, args=(why,), name="matching-serve stop deadline", daemon=True).start()
        if hasattr(signal, "alarm") and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL:
            signal.alarm(int(self.seconds) + 5)
            self.alarmed = True

    def disarm(self) -> None:
        self.stopped.set()
        if self.alarmed:
            signal.alarm(0)

    def _expire(self, why: str) -> None:
        if self.stopped.wait(self.seconds):
            return
        print(
            f"matching-serve: still running {self.seconds:g} s after {why}: its stop is stuck, which is a bug of "
            "ours; please report it with the threads' stacks below. Exiting with status 1.",
            file=sys.stderr,
            flush=True,
        )
        faulthandler.dump_traceback(file=2, all_threads=True)  # the process's stderr, whatever sys.stderr is now
        os._exit(1)


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


def _listen(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening socket on host:port. `reuse_port`: one of several processes' sockets on the same port
    (SO_REUSEPORT), among which the kernel spreads the connections evenly (one shared socket would give most
    of them to whichever process happens to be awake)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise RunError(f"cannot listen on {host}:{port} ({err.strerror}); another server may hold the port: stop it, "
                       f"or choose another with port=") from None  # fmt: skip
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def _hosts(cfg: DictConfig) -> tuple[str, ...]:
    """The Host names the server answers: `allowed_hosts` when given (`["*"]`: any), else the localhost names and
    the address it listens on when that is one address (not 0.0.0.0 or ::, which a page of any site may resolve to
    through DNS rebinding: name the machine's names then)."""
    from matching.serving.http import LOCAL_HOSTS

    given = cfg.get("allowed_hosts")
    if given is not None and not OmegaConf.is_list(given) and not isinstance(given, list):
        raise RunError(f"allowed_hosts must be a list of host names, e.g. allowed_hosts=[myhost.example.org], or "
                       f"[\"*\"] for any; got {given!r}")  # fmt: skip
    if given:
        names = tuple(str(h) for h in given)
        return () if "*" in names else names
    host = str(cfg.host)
    if host in EVERY_ADDRESS:
        return LOCAL_HOSTS
    return (*LOCAL_HOSTS, host.strip("[]"), f"[{host.strip('[]')}]" if ":" in host else host)


def say_who_is_answered(cfg: DictConfig) -> None:
    """Once per command: on an address of every interface without allowed_hosts, which Host names are answered."""
    if str(cfg.host) in EVERY_ADDRESS and not cfg.get("allowed_hosts"):
        print(f"host={cfg.host} listens on every address, but the server answers only requests that name it by a "
              f"localhost name (the Host header); add the names clients use: allowed_hosts=[<name>,...] "
              f"(or allowed_hosts=[\"*\"] behind a proxy that checks them)", file=sys.stderr)  # fmt: skip


def check_settings(cfg: DictConfig) -> dict:
    """The server's settings from a composed serve config, each checked (a RunError naming the key)."""
    from matching.inference.queries import Limits

    limits = Limits(**OmegaConf.to_container(cfg.limits, resolve=True))
    port, max_batch_size = _positive(cfg, "port"), _positive(cfg, "max_batch_size")
    workers = cfg.get("workers", 1)
    if workers == "auto":
        workers = min(cores(), MAX_AUTO_WORKERS)
    elif not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise RunError(f"workers must be a positive whole number or auto (one per core, at most {MAX_AUTO_WORKERS}), "
                       f"got {workers!r}")  # fmt: skip
    if not isinstance(cfg.batch_timeout, (int, float)) or cfg.batch_timeout < 0:
        raise RunError(f"batch_timeout must be a number of seconds >= 0, got {cfg.batch_timeout!r}")
    if not isinstance(cfg.timeout, (int, float)) or cfg.timeout <= 0:
        raise RunError(f"timeout must be a number of seconds > 0, got {cfg.timeout!r}")
    if cfg.accelerator not in ("cpu", "cuda", "auto"):
        raise RunError(f"accelerator must be cpu, cuda or auto, got {cfg.accelerator!r}")
    compare = [] if cfg.compare is None else [cfg.compare] if isinstance(cfg.compare, str) else cfg.compare
    if not isinstance(compare, list) and not OmegaConf.is_list(compare):
        raise RunError(f"compare must be a list of runs, e.g. compare=[outputs/runs/snli/coda/<time>], got {compare!r}")
    origins = cfg.get("cors_origins") or []
    if isinstance(origins, str) or not all(isinstance(o, str) for o in origins):
        raise RunError(f"cors_origins must be a list of origins, e.g. cors_origins=[\"https://app.example.org\"], "
                       f"got {origins!r}")  # fmt: skip
    threads = int(cfg.threads)
    if threads < 0:
        raise RunError(f"threads must be a whole number >= 0 (0: chosen per call), got {threads}")
    return {"limits": limits, "port": port, "max_batch_size": max_batch_size, "workers": workers,
            "compare": list(compare), "hosts": _hosts(cfg), "origins": tuple(origins), "threads": threads}  # fmt: skip


def build_server(cfg: DictConfig, sock: socket.socket | None = None, workers: int = 1,
                 settings: dict | None = None) -> Server:  # fmt: skip
    """The server of a composed serve config: its app (`build_served_app`) listening on `sock` when given (a worker
    of `workers=N`), else on a socket bound here once the runs are loaded."""
    app, runs = build_served_app(cfg, workers, settings)
    sock = sock if sock is not None else _listen(cfg.host, int(cfg.port))
    return Server(app, runs, sock, cfg)


def build_served_app(cfg: DictConfig, workers: int = 1, settings: dict | None = None) -> tuple[Any, list]:
    """The ASGI app of a composed serve config and its runs, loaded in this process (a wrong ckpt=, compare= or
    override is reported before anything listens), each with its batcher and its one model thread. `workers`: how
    many processes (or Ray replicas on this machine) share the cores; `settings`: `check_settings`'s, when the
    caller has them already."""
    require("fastapi", "serve", "serving a model over HTTP")
    require("uvicorn", "serve", "serving a model over HTTP")
    from matching.serving.batcher import Batcher, Worker, WorkerSettings
    from matching.serving.http import Guards, ServedRun, build_app, served_info

    settings = settings or check_settings(cfg)
    limits, compare, threads = settings["limits"], settings["compare"], settings["threads"]
    device = cfg.accelerator
    if device == "auto":  # torch, when there is one to ask (an ONNX Runtime server runs on the CPU)
        try:
            import torch
        except ImportError:
            device = "cpu"
        else:
            device = "cuda" if torch.cuda.is_available() else "cpu"

    backend, quantize = str(cfg.get("backend") or "auto"), cfg.get("quantize")
    # (model, its config) of every run: the first composed by the command line, the others as saved
    configs = [(str(cfg.ckpt), OmegaConf.to_container(cfg, resolve=True) if "task" in cfg else {})]
    for other in compare:
        configs.append((str(other), OmegaConf.to_container(saved_config(str(other)), resolve=True)))
    encoder_backend = str(cfg.get("encoder_backend") or "torch")
    matchers = [
        Matcher(load(ckpt, backend=backend, quantize=quantize, device=device,
             config=OmegaConf.create(config) if "task" in config else None, encoder_backend=encoder_backend))
        for ckpt, config in configs
    ]  # fmt: skip
    index = str(cfg.index) if cfg.get("index") else None
    if index is not None and compare:
        raise RunError("index= serves one contextual run against its candidates' states; drop compare=")
    # Each run described once, here: its weights are hashed at the start, not per request.
    infos = [served_info(matcher.description, matcher.can_align, limits) for matcher in matchers]
    kinds = {info["kind"] for info in infos}
    if len(kinds) > 1:
        listed = ", ".join(
            f"{ckpt} ({info['task']}, {info['kind']})" for (ckpt, _), info in zip(configs, infos, strict=True)
        )
        raise RunError(f"the runs served side by side must all classify or all rank, got {listed}; serve the others "
                       f"with a server of their own")  # fmt: skip
    # The runs' model threads share the cores with each other and with the other server processes: threads per
    # forward pass x runs x processes never exceed them (matching.inference.threads).
    cap = max(1, cores() // (len(configs) * workers))
    if threads > cap:
        print(f"threads={threads} per run x {len(configs)} runs x {workers} processes is more than this machine's "
              f"{cores()} cores: each run uses {cap}", file=sys.stderr)  # fmt: skip
        threads = cap
    answering = WorkerSettings(limits, threads, cap, float(cfg.timeout), index)  # a stale index is refused here
    runs = [ServedRun(name, info, Batcher(Worker(matcher, answering), name, settings["max_batch_size"],
                                          float(cfg.batch_timeout)))
            for name, info, matcher in zip(_run_names([i["aligner"] for i in infos]), infos, matchers,
                                           strict=True)]  # fmt: skip
    server_info = {"max_batch_size": settings["max_batch_size"], "batch_timeout": float(cfg.batch_timeout),
                   "timeout": float(cfg.timeout), "threads": threads, "threads_cap": cap, "accelerator": device,
                   "workers": workers, "max_request_bytes": limits.max_request_bytes}  # fmt: skip
    guards = Guards(allowed_hosts=settings["hosts"], cors_origins=settings["origins"],
                    max_header_bytes=limits.max_header_bytes)  # fmt: skip
    return build_app(runs, limits, server_info, guards), runs


def _worker_process(cfg: dict, ready: Any, workers: int) -> None:
    """One server process of `workers=N`: loads the runs, listens on the port beside the others (SO_REUSEPORT),
    says "ready" (or why not) under its name, serves, and ends when its supervisor is gone."""
    from matching.serving.batcher import watch_parent

    name = multiprocessing.current_process().name
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # while it loads, Ctrl+C comes as the supervisor's SIGTERM
    watch_parent(os.getppid())
    try:
        config = OmegaConf.create(cfg)
        server = build_server(config, sock=_listen(str(config.host), int(config.port), reuse_port=True),
                              workers=workers)  # fmt: skip
    except Exception as err:  # reported by the supervisor, which exits with status 2
        ready.put((name, f"{type(err).__name__}: {err}" if not isinstance(err, RunError) else str(err)))
        return
    ready.put((name, "ready"))
    gc.collect()
    gc.freeze()
    server.run()


def supervise(cfg: DictConfig, workers: int) -> None:
    """`workers=N`: N server processes on one port, each with its own models and its own listening socket
    (SO_REUSEPORT: the kernel spreads the connections among them); this process waits, passes Ctrl+C and SIGTERM
    on, and stops them all if one fails to start. `cfg` is checked already (`run_server`)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise RunError("workers= above 1 needs SO_REUSEPORT (Linux, macOS, the BSDs); serve with workers=1")
    _listen(cfg.host, int(cfg.port)).close()  # the port is free (else the usual message), before any model loads
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    config = OmegaConf.to_container(cfg, resolve=True)
    processes = [context.Process(target=_worker_process, args=(config, ready, workers),
                                 name=f"matching-serve worker {i + 1}") for i in range(workers)]  # fmt: skip

    stopping = threading.Event()

    def stop(*_: Any) -> None:
        stopping.set()
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)

    with stop_signals_to(stop):
        for process in processes:
            process.start()
        # Each process says "ready" or why not. A signal while some still load stops them all (the first may be
        # serving already): nothing is left waiting for a word that a stopped process will not send.
        loading = {process.name: process for process in processes}
        while loading and not stopping.is_set():
            name, message = _next_word(ready, loading)
            if message is None or stopping.is_set():  # a process stopped by the signal is no failure to start
                continue
            if message != "ready":
                stop()
                for process in processes:
                    process.join(15)
                    if process.is_alive():
                        process.kill()
                raise RunError(f"a server process could not start: {message}")
            del loading[name]
        for process in processes:
            process.join()


def _next_word(ready: Any, loading: dict) -> tuple[str | None, str | None]:
    """(name, word) of what a server process of `supervise` still `loading` says next: "ready" or why it cannot
    start; (None, None) if nothing within half a second. A process that ended without a word (killed while it
    loaded: the OOM killer) is a word too."""
    try:
        return ready.get(timeout=0.5)
    except queue.Empty:
        pass
    for name, process in loading.items():
        if process.exitcode is not None:
            try:  # its word may still be on its way through the queue's pipe
                return ready.get(timeout=1.0)
            except queue.Empty:
                return name, f"{name} ended with status {process.exitcode} before it was ready"
    return None, None


def run_server(cfg: DictConfig) -> None:
    """Build the server of a composed serve config, say what it serves, and serve until stopped (`workers=N`: N
    processes under a supervisor)."""
    settings = check_settings(cfg)
    say_who_is_answered(cfg)
    workers = settings["workers"]
    if workers > 1:
        print(f"serving {cfg.ckpt} with {workers} server processes on http://{cfg.host}:{cfg.port}", file=sys.stderr)
        supervise(cfg, workers)
        return
    server = build_server(cfg, settings=settings)
    names = ", ".join(f"{r.name} ({r.info['task']}, {r.info['checkpoint']}, {r.info['backend']})"
                      for r in server.runs)  # fmt: skip
    endpoints = sorted({e for r in server.runs for e in r.info["endpoints"]})
    print(f"serving {names} on http://{cfg.host}:{cfg.port} (the page at /; POST {' '.join(endpoints)}, GET /health "
          f"/info)", file=sys.stderr)  # fmt: skip
    # What is loaded now (torch, Lightning, the app, the models) stays for the server's life: full collections,
    # which every request's garbage triggers now and then, need not walk it (they took 0.1-0.5 s each under load).
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
