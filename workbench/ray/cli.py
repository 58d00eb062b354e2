"""``workbench ray-serve``: the engine as a Serve application on a Ray cluster (docs/ray.md).

    workbench ray-serve --model-repository=/models --ray-address=auto --max-replicas=4

``workbench serve``'s flags (the engine's, per replica); ``--http-port`` / ``--grpc-port`` /
``--http-address`` are those of Serve's proxies, the cluster's ingress on every node. Connects
to a running cluster (``--ray-address``, default ``auto``: ``ray start``'s) or starts a local
one (``--ray-address=local``), deploys, logs ``workbench ray-serve ready`` (stderr), and on
SIGINT/SIGTERM deletes the application (Serve drains each replica first) and disconnects.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from types import FrameType

from workbench import ServerOptions
from workbench.ray.scaling import DEPLOYMENT, GRPC_SERVICER, Scaling

log = logging.getLogger("workbench")
APP_NAME = "workbench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Ray flags (``workbench serve``'s are added by the caller)."""
    group = parser.add_argument_group("Ray")
    group.add_argument("--ray-address", default="auto",
                       help="the cluster to join (auto: the one `ray start` runs here; local: start one)")
    defaults = Scaling()
    group.add_argument("--min-replicas", type=int, default=defaults.min_replicas)
    group.add_argument("--max-replicas", type=int, default=None,
                       help="above --min-replicas: autoscale on queue time (default: --min-replicas)")
    group.add_argument("--target-queue-us", type=float, default=defaults.target_queue_us,
                       help="mean queue time per request the autoscaler holds, µs")
    group.add_argument("--downscale-delay-s", type=float, default=defaults.downscale_delay_s)
    group.add_argument("--replica-cpus", type=float, default=defaults.replica_cpus,
                       help="CPUs Ray reserves per replica")
    group.add_argument("--max-ongoing-requests", type=int, default=defaults.max_ongoing_requests)
    group.add_argument("--proxy-location", default="EveryNode", choices=["EveryNode", "HeadOnly"],
                       help="where Serve runs its HTTP/gRPC proxies (HeadOnly: several nodes on one host)")


def scaling_from_args(args: argparse.Namespace) -> Scaling:
    return Scaling(min_replicas=args.min_replicas, max_replicas=args.max_replicas or args.min_replicas,
                   target_queue_us=args.target_queue_us, downscale_delay_s=args.downscale_delay_s,
                   replica_cpus=args.replica_cpus, max_ongoing_requests=args.max_ongoing_requests)


def serve_running() -> bool:
    """Whether Serve already runs on the connected cluster (its controller actor exists):
    then its proxies' ports and servicer functions are the ones it was started with."""
    import ray

    # Ray's private constants: checked by tests/architecture/test_library_internals.py (the extra's bound <3)
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        return False
    return True


def run(options: ServerOptions, scaling: Scaling, ray_address: str, proxy_location: str = "EveryNode") -> int:
    """Deploy, wait for SIGINT/SIGTERM, delete; the exit status."""
    import ray
    from ray import serve

    from workbench.ray.application import build_app
    from workbench.ray.cluster_state import remove_state_actor

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # the replicas import workbench as this process does: a PYTHONPATH given here goes with them
    runtime_env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if os.environ.get("PYTHONPATH") else None
    ray.init(address=None if ray_address == "local" else ray_address, include_dashboard=False,
             log_to_driver=False, runtime_env=runtime_env)
    started_serve = not serve_running()
    serve.start(proxy_location=proxy_location, http_options={"host": options.http_address, "port": options.http_port},
                grpc_options={"port": options.grpc_port, "grpc_servicer_functions": [GRPC_SERVICER]})
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    remove_state_actor(APP_NAME)  # a new deployment starts from the repository, not an old state
    serve.run(build_app(options, scaling), name=APP_NAME, route_prefix="/")
    log.info("workbench ray-serve ready: HTTP %s:%d, gRPC %d, deployment %s", options.http_address,
             options.http_port, options.grpc_port, DEPLOYMENT)
    stop.wait()
    log.info("deleting application %s (replicas drain first)", APP_NAME)
    serve.delete(APP_NAME)
    remove_state_actor(APP_NAME)
    if started_serve:  # Serve's proxies and controller too, when this command started them
        serve.shutdown()
    ray.shutdown()
    return 0

