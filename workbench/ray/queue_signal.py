"""The autoscaling signal of one replica: the mean queue time per successful request since
the last sample, in microseconds, the quantity the Kubernetes HPA scales on
(``rate(nv_inference_queue_duration_us) / rate(nv_inference_request_success)``,
:mod:`workbench.deploy.kubernetes`), read from the engine's success observer."""

from __future__ import annotations

from workbench import ModelStatistics

#: the metric name a replica reports to Serve's autoscaler (µs per request since the last sample)
QUEUE_METRIC = "queue_us_per_request"


class QueueTime:
    """Sums queue time and successes from :meth:`observe`; :meth:`sample` gives the mean
    queue µs per request since the previous sample (0.0 with no request in between)."""

    def __init__(self) -> None:
        self.queue_ns = 0
        self.count = 0

    def observe(self, statistics: ModelStatistics, request_ns: int, queue_ns: int, *_: int) -> None:
        """A success observer (``Server.add_success_observer``): one request's queue ns."""
        self.queue_ns += queue_ns
        self.count += 1

    def sample(self) -> dict[str, float]:
        """``{QUEUE_METRIC: µs}``, the mean since the last call; resets the sums."""
        mean_us = self.queue_ns / self.count / 1000 if self.count else 0.0
        self.queue_ns = self.count = 0
        return {QUEUE_METRIC: mean_us}
