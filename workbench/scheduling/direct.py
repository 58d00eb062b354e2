"""Triton's default scheduler: one request per execution, on whichever instance is free.

:class:`FifoPolicy` is the batch policy of that scheduler (a
:class:`~workbench.scheduling.dispatcher.Dispatcher` given it is Triton's default
scheduler); :func:`direct_scheduler` builds one.
"""

from __future__ import annotations

from collections import deque

from workbench.backends.base import ModelInstance
from workbench.scheduling.base import InstanceRunner, Pending
from workbench.scheduling.dispatcher import BatchPolicy, Dispatcher
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.stats.statistics import ModelStatistics


class FifoPolicy(BatchPolicy):
    """One FIFO queue; each execution takes its oldest live request. A cancelled request
    is dropped when it reaches the head of the queue."""

    def __init__(self) -> None:
        self._queue: deque[Pending] = deque()

    def admit(self, pending: Pending) -> None:
        self._queue.append(pending)

    def has_queued(self) -> bool:
        return bool(self._queue)

    def take_queued(self) -> list[Pending]:
        queued, self._queue = list(self._queue), deque()
        return queued

    def next_batch(self, runner: InstanceRunner) -> list[Pending]:
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                return [pending]
            self.dispatcher.drop(pending)
        return []


def direct_scheduler(
    instances: list[ModelInstance],
    statistics: ModelStatistics,
    rate_limiter: RateLimiter | None = None,
) -> Dispatcher:
    """Triton's default scheduler over ``instances``: FIFO, one request per execution.

    Args:
        instances: loaded instances of one model version (at least one).
        statistics: where executions and request outcomes are recorded.
        rate_limiter: the server's rate limiter, or None when rate limiting is off.
    """
    return Dispatcher(instances, statistics, rate_limiter, FifoPolicy())


__all__ = ["FifoPolicy", "direct_scheduler"]
