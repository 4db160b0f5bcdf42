"""`matching-serve engine=ray`: the same app (matching.serving.http, with its runs, batchers and guards) as a Ray Serve
deployment, for serving beyond one machine: Ray places `ray.replicas` copies on the cluster's nodes, its proxy spreads
the requests over them and restarts a replica whose health check fails. Nothing of ours schedules: each replica
builds the app with `build_served_app` (Ray's documented `serve.ingress` with a builder function) and answers as
`matching-serve` does. Needs the ray-serve extra (`pip install "sentence-matching[ray-serve]"`).
"""

from __future__ import annotations

import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from matching.errors import RunError
from matching.extras import require


def application(cfg: DictConfig) -> Any:
    """The Ray Serve application of a composed serve config: one deployment of `ray.replicas` replicas (each one CPU
    of the cluster, `ray.cpus_per_replica`), its ingress the app `matching-serve` serves."""
    require("ray", "ray-serve", "serving on Ray Serve")
    from ray import serve

    from matching.serving.server import build_served_app, check_settings

    check_settings(cfg)
    node = cfg.get("ray") or {}
    replicas, cpus = node.get("replicas", 1), node.get("cpus_per_replica", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise RunError(f"ray.replicas must be a positive whole number, got {replicas!r}")
    if not isinstance(cpus, (int, float)) or cpus <= 0:
        raise RunError(f"ray.cpus_per_replica must be a number above 0, got {cpus!r}")
    config = OmegaConf.to_container(cfg, resolve=True)

    def build() -> Any:  # on each replica
        return build_served_app(OmegaConf.create(config))[0]

    deployment = serve.deployment(
        serve.ingress(build)(),
        name="matching",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus},
        health_check_period_s=10,
    )
    return deployment.bind()


def start(cfg: DictConfig) -> str:
    """Connect to the Ray cluster of `ray.address` (null: start one on this machine), start Ray Serve's proxy on
    host:port and deploy the app; returns the base URL. `ray.address=auto` joins a running cluster."""
    require("ray", "ray-serve", "serving on Ray Serve")
    import ray
    from ray import serve

    node = cfg.get("ray") or {}
    app = application(cfg)
    ray.init(address=node.get("address"), include_dashboard=False, log_to_driver=False,
             ignore_reinit_error=True)  # fmt: skip
    serve.start(http_options={"host": str(cfg.host), "port": int(cfg.port)})
    serve.run(app, name="matching", route_prefix="/")
    return f"http://{cfg.host}:{cfg.port}"


def run_on_ray(cfg: DictConfig) -> None:
    """`matching-serve engine=ray`: deploy, say where, and serve until Ctrl+C or SIGTERM, then take the deployment
    down (and the local cluster with it, when this command started one)."""
    import threading

    import ray
    from ray import serve

    from matching.serving.server import say_who_is_answered, stop_signals_to

    url = start(cfg)
    say_who_is_answered(cfg)
    print(f"serving {cfg.ckpt} on Ray Serve at {url} ({(cfg.get('ray') or {}).get('replicas', 1)} replicas)",
          file=sys.stderr)  # fmt: skip
    stopped = threading.Event()
    with stop_signals_to(lambda *_: stopped.set()):
        stopped.wait()
    serve.shutdown()
    ray.shutdown()
