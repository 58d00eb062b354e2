"""The settings of a Ray deployment of the engine, importable without Ray (the CLI's
parser reads them)."""

from __future__ import annotations

from dataclasses import dataclass

#: the gRPC servicer function Serve's gRPC proxy registers (KServe v2's service, requests kept as bytes)
GRPC_SERVICER = "workbench.ray.grpc_relay.add_inference_service"
DEPLOYMENT = "workbench"


@dataclass
class Scaling:
    """How the replicas scale (docs/ray.md).

    Attributes:
        min_replicas: the fewest replicas (and the count at start).
        max_replicas: the most; equal to ``min_replicas``: a fixed count, no autoscaling.
        target_queue_us: the mean queue time per request to hold, µs (the HPA's target).
        downscale_delay_s: how long lower recommendations must last before a scale-down.
        replica_cpus: the CPUs Ray reserves per replica (fractions allowed).
        max_ongoing_requests: requests Serve sends one replica at once; high, so that load
            queues in the engine, where its queue time is measured, not in Serve's router.
        metrics_interval_s: how often each replica reports its queue time, seconds.
    """

    min_replicas: int = 1
    max_replicas: int = 1
    target_queue_us: float = 10_000.0
    downscale_delay_s: float = 30.0
    replica_cpus: float = 1.0
    max_ongoing_requests: int = 256
    metrics_interval_s: float = 1.0
