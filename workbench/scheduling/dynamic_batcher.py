"""Triton's dynamic batcher: many small requests become few batched executions.

Follows Triton's ``dynamic_batch_scheduler``: a batch grows from the oldest queued
request while the next request's non-batch shapes match (ragged batching is not
done here) and the total batch size stays <= ``max_batch_size``. A batch leaves
at once when it is full, when it reached the largest preferred batch size, or
when the next request cannot join it; otherwise it waits until the oldest
request has queued ``max_queue_delay_microseconds`` and then leaves as the
largest preferred batch size available (or whole, if none fits).

Priority levels, queue policies (timeouts, max queue size) and
``preserve_ordering`` are not implemented yet: they are accepted in the config
and ignored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from workbench.backends.base import ModelInstance
from workbench.scheduling.base import Pending
from workbench.scheduling.direct import DirectScheduler
from workbench.statistics import ModelStatistics


class DynamicBatcher(DirectScheduler):
    """FIFO queue whose executions take batches of compatible requests.

    Args:
        instances, statistics: as for :class:`DirectScheduler`.
        max_batch_size: the model's ``max_batch_size`` (> 0); a batch never exceeds it.
        preferred_batch_sizes: ``dynamic_batching.preferred_batch_size`` (empty = [max]).
        max_queue_delay_us: ``dynamic_batching.max_queue_delay_microseconds`` (microseconds).
    """

    def __init__(
        self,
        instances: list[ModelInstance],
        statistics: ModelStatistics,
        *,
        max_batch_size: int,
        preferred_batch_sizes: Sequence[int] = (),
        max_queue_delay_us: int = 0,
    ) -> None:
        super().__init__(instances, statistics)
        self._max_batch_size = max_batch_size
        self._preferred = sorted({s for s in preferred_batch_sizes if 0 < s <= max_batch_size})
        self._max_queue_delay_ns = max_queue_delay_us * 1000
        self._timer: asyncio.TimerHandle | None = None

    def _next_batch(self) -> list[Pending]:
        self._drop_abandoned()
        if not self._queue:
            return []
        candidates, size, closed = self._candidates()
        if closed or self._stopping or size >= self._max_batch_size or not self._max_queue_delay_ns:
            return self._take(candidates)
        if self._preferred and size >= self._preferred[-1]:
            return self._take(candidates)
        due_ns = self._queue[0].enqueue_ns + self._max_queue_delay_ns
        if time.monotonic_ns() >= due_ns:
            return self._take(self._trim_to_preferred(candidates))
        self._wake_at(due_ns)
        return []

    def _candidates(self) -> tuple[list[Pending], int, bool]:
        """Requests from the head that can share one execution; ``closed`` when the next
        request cannot join (other shapes, or the batch would exceed max_batch_size)."""
        head = _shape_key(self._queue[0])
        batch, size = [], 0
        for pending in self._queue:
            if pending.future.done():
                continue
            grown = size + pending.request.batch_size
            if _shape_key(pending) != head or grown > self._max_batch_size:
                return batch, size, True
            batch.append(pending)
            size = grown
        return batch, size, False

    def _trim_to_preferred(self, batch: list[Pending]) -> list[Pending]:
        """The longest prefix whose total is a preferred batch size, else the whole batch."""
        totals, size = [], 0
        for pending in batch:
            size += pending.request.batch_size
            totals.append(size)
        for preferred in reversed(self._preferred):
            if preferred in totals:
                return batch[: totals.index(preferred) + 1]
        return batch

    def _take(self, batch: list[Pending]) -> list[Pending]:
        taken = {id(p) for p in batch}
        self._queue = type(self._queue)(p for p in self._queue if id(p) not in taken)
        return batch

    def _drop_abandoned(self) -> None:
        while self._queue and self._queue[0].future.done():
            self._stats.pending -= 1  # its client went away while it waited
            self._forget(self._queue.popleft())

    def _wake_at(self, due_ns: int) -> None:
        if self._timer is not None:
            return
        loop = asyncio.get_running_loop()
        delay_s = max(0.0, (due_ns - time.monotonic_ns()) / 1e9)
        self._timer = loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()


def _shape_key(pending: Pending) -> tuple:
    return tuple((name, a.shape[1:]) for name, a in pending.request.inputs.items())
