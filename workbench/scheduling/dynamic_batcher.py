"""Triton's dynamic batcher: many small requests become few batched executions.

Follows Triton's ``dynamic_batch_scheduler`` (``GetDynamicBatch``): a batch grows from the
first queued request (highest priority level, then oldest) while the next request's
non-batch shapes match (except those of ``allow_ragged_batch`` inputs: Triton's ragged
batching, which checks only the shapes of non-ragged inputs) and the total batch size stays
<= ``max_batch_size``. Along the way it remembers the best cut: the largest preferred batch
size the batch reaches, or, if it would grow past the largest preferred size before reaching
one, the batch up to there. Then, as in Triton:

- while the oldest request of the batch has waited less than
  ``max_queue_delay_microseconds`` (or there is no delay), a best cut leaves at once;
- otherwise the whole batch leaves when the next request cannot join it, when it reached the
  largest preferred size, when the delay ran out (up to ``max_batch_size``, not cut to a
  preferred size) or when there is no delay;
- else it waits for more requests or the delay.

Empty ``preferred_batch_size`` means ``[max_batch_size]`` (Triton's normalisation). Priority
levels and queue policies are
:class:`~workbench.scheduling.request_queue.RequestQueue`'s; with
``preserve_ordering`` responses are released in arrival order. It is a batch policy
given to the :class:`~workbench.scheduling.dispatcher.Dispatcher`; a cancelled request
is dropped when a batch forming from the head of the queue reaches it. Triton's test hook
``TRITONSERVER_DELAY_SCHEDULER`` (:mod:`~workbench.scheduling.scheduler_hooks`) holds the
first batch until that many requests are queued; no queue timeout expires during the
hold (Triton's batcher thread applies no queue policy then), the policy applies when it ends.
"""

from __future__ import annotations

import time
from collections import deque

from tritonclient.grpc.model_config_pb2 import ModelDynamicBatching

from workbench.backends.base import BackendResponse, ExecutionTimes, ModelInstance
from workbench.errors import Unavailable
from workbench.scheduling.base import Answer, InstanceRunner, Pending
from workbench.scheduling.deadline_timer import DeadlineTimer
from workbench.scheduling.dispatcher import BatchPolicy, Dispatcher
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.scheduling.request_queue import RequestQueue
from workbench.scheduling.scheduler_hooks import DELAY_SCHEDULER, hook_count
from workbench.statistics import ModelStatistics


class DynamicBatchPolicy(BatchPolicy):
    """Priority queues whose executions take batches of compatible requests.

    Args:
        max_batch_size: the model's ``max_batch_size`` (> 0); a batch never exceeds it.
        batching: the config's ``dynamic_batching`` (``preferred_batch_size``,
            ``max_queue_delay_microseconds`` in µs, priorities, queue policies,
            ``preserve_ordering``); empty preferred sizes behave as ``[max_batch_size]``.
        ragged: the inputs with ``allow_ragged_batch: true``: requests batch together
            whatever their shapes (Triton's ``enforce_equal_shape_tensors`` leaves them out).

    ``TRITONSERVER_DELAY_SCHEDULER`` is read here (at model load), as Triton's batcher
    thread reads it when it starts.
    """

    def __init__(self, *, max_batch_size: int, batching: ModelDynamicBatching,
                 ragged: frozenset[str] = frozenset()) -> None:
        self._queue = RequestQueue(batching)
        self._ragged = ragged
        self._max_batch_size = max_batch_size
        preferred = {s for s in batching.preferred_batch_size if 0 < s <= max_batch_size}
        self._preferred = preferred or {max_batch_size}
        self._max_preferred = max(self._preferred)
        self._max_queue_delay_ns = int(batching.max_queue_delay_microseconds) * 1000
        self._preserve_ordering = batching.preserve_ordering
        self._order: deque[Pending] = deque()
        self._held: dict[int, tuple[BackendResponse, ExecutionTimes | None, str]] = {}
        self._timeout_timer = DeadlineTimer(self._on_timeout)
        self._hold_until = hook_count(DELAY_SCHEDULER)  # queued requests; 0 = not holding
        #: the shape key every queued request shares; None once two differ (until the queue empties)
        self._uniform_key: tuple[object, ...] | None = None

    # ------------------------------------------------------------------ admission
    def admit(self, pending: Pending) -> None:
        params = pending.request.parameters
        pending.priority, pending.deadline_ns = self._queue.level_and_deadline(params, pending.enqueue_ns)
        pending.shape_key = _shape_key(pending, self._ragged)
        pending.size = max(1, pending.request.batch_size)
        first = not self._queue
        self._queue.push(pending)  # Unavailable when full: the dispatcher counts the rejection
        if first:
            self._uniform_key = pending.shape_key
        elif self._uniform_key is not None and pending.shape_key != self._uniform_key:
            self._uniform_key = None
        if self._preserve_ordering:
            self._order.append(pending)
        if pending.deadline_ns:
            self._watch_timeouts()

    def has_queued(self) -> bool:
        return len(self._queue) > 0

    def take_queued(self) -> list[Pending]:
        queued = list(self._queue)
        self._queue.remove(queued)
        return queued

    def abandon(self, failed: list[Pending]) -> tuple[Answer, ...]:
        """The failed requests leave the response order (``preserve_ordering``): answers held
        behind them go out."""
        ids = {id(p) for p in failed}
        self._order = deque(p for p in self._order if id(p) not in ids)
        return self._release_held()

    # ------------------------------------------------------------------ batch forming
    def next_batch(self, runner: InstanceRunner) -> list[Pending]:
        if self._holding() or self._still_filling():
            return []
        now_ns = time.monotonic_ns()
        self._expire(now_ns)
        candidates, size, cut, closed = self._candidates()
        if not candidates:
            return []
        oldest_ns = min([p.enqueue_ns for p in candidates])
        due_ns = oldest_ns + self._max_queue_delay_ns
        expired = bool(self._max_queue_delay_ns) and now_ns >= due_ns
        if cut and not expired:
            return self._take(candidates[:cut])
        if closed or size >= self._max_preferred or expired or not self._max_queue_delay_ns:
            return self._take(candidates)
        if self.dispatcher.stopping:  # nothing waits for a batch to fill any more
            return self._take(candidates)
        self.dispatcher.dispatch_at(due_ns)
        return []

    def _still_filling(self) -> bool:
        """True when the batch forming now is sure to wait for the dispatch already set for the
        queue delay: what a new arrival finds most of the time, decided without the scan of
        :meth:`_candidates`. Sure when every queued request has the same shape key (nothing
        closes the batch), their sizes add up to less than the largest preferred size (no cut,
        no full batch) and no other preferred size is configured, no queued request has a queue
        timeout, the dispatch set (by this policy, for the oldest request's delay) is still
        ahead, and no queued request was cancelled (those are dropped by the scan, at once)."""
        queue = self._queue
        if self._uniform_key is None or len(self._preferred) > 1 or queue.total_size >= self._max_preferred:
            return False
        due_ns = self.dispatcher.dispatch_due_ns()
        if not due_ns or queue.next_deadline_ns() or self.dispatcher.stopping:
            return False
        return time.monotonic_ns() < due_ns and not queue.any_done()

    def _holding(self) -> bool:
        """Triton's ``TRITONSERVER_DELAY_SCHEDULER`` hold: True until that many requests are
        queued (once; never while the model stops)."""
        if self._hold_until and (len(self._queue) >= self._hold_until or self.dispatcher.stopping):
            self._hold_until = 0
            self._watch_timeouts()  # none ran during the hold
        return bool(self._hold_until)

    def _candidates(self) -> tuple[list[Pending], int, int, bool]:
        """Requests in scheduling order that can share one execution, their total batch
        size, the best cut (how many of them; 0 = none: see the module docstring), and
        ``closed`` when the next one cannot join (other shapes, or the batch would exceed
        max_batch_size). Cancelled requests met on the way (only those: the scan stops where
        the batch closes) leave the queue and are dropped."""
        batch: list[Pending] = []
        cancelled: list[Pending] = []
        size, cut, head, closed = 0, 0, None, False
        for pending in self._queue:
            if pending.future.done():
                cancelled.append(pending)
                continue
            key = pending.shape_key
            head = key if head is None else head
            grown = size + pending.size
            if batch and grown > self._max_preferred and not cut:
                cut = len(batch)  # the batch would grow past every preferred size here
            if key != head or grown > self._max_batch_size:
                closed = True
                break
            batch.append(pending)
            size = grown
            if size in self._preferred:
                cut = len(batch)
        if cancelled:
            self._queue.remove(cancelled)
            for pending in cancelled:
                self.dispatcher.drop(pending)
        return batch, size, cut, closed

    def _take(self, batch: list[Pending]) -> list[Pending]:
        self._queue.remove(batch)
        return batch

    # ------------------------------------------------------------------ queue timeouts
    def _expire(self, now_ns: int) -> None:
        for pending in self._queue.expire(now_ns):
            self.dispatcher.fail_queued(pending, Unavailable("Request timeout expired"), "REJECTED")

    def _watch_timeouts(self) -> None:
        """Arm the timer for the next queue timeout; none while the delay hook holds (Triton's
        batcher thread applies no queue policy while it holds: the hold's end arms it)."""
        if self._hold_until:
            return
        due_ns = self._queue.next_deadline_ns()
        if not due_ns:
            return
        self._timeout_timer.arm_earlier(due_ns)

    def _on_timeout(self) -> None:
        self._expire(time.monotonic_ns())
        self.dispatcher.dispatch()
        self._watch_timeouts()

    # ------------------------------------------------------------------ preserve_ordering
    def complete(self, pending: Pending, response: BackendResponse,
                 times: ExecutionTimes | None, reason: str) -> tuple[Answer, ...] | None:
        if not self._preserve_ordering:
            return None  # answered at once
        self._held[id(pending)] = (response, times, reason)
        return self._release_held()

    def _release_held(self) -> tuple[Answer, ...]:
        """The held responses now at the head of the arrival order, out of the hold."""
        released: list[Answer] = []
        while self._order and id(self._order[0]) in self._held:
            head = self._order.popleft()
            released.append((head, *self._held.pop(id(head))))
        return tuple(released)


def dynamic_batcher(
    instances: list[ModelInstance],
    statistics: ModelStatistics,
    *,
    max_batch_size: int,
    batching: ModelDynamicBatching,
    rate_limiter: RateLimiter | None = None,
    ragged: frozenset[str] = frozenset(),
) -> Dispatcher:
    """Triton's dynamic batcher over ``instances``: a dispatcher given a
    :class:`DynamicBatchPolicy` (``max_batch_size``, ``batching``, ``ragged`` as there;
    ``statistics``, ``rate_limiter`` as for :class:`~workbench.scheduling.dispatcher.Dispatcher`)."""
    policy = DynamicBatchPolicy(max_batch_size=max_batch_size, batching=batching, ragged=ragged)
    return Dispatcher(instances, statistics, rate_limiter, policy)


def _shape_key(pending: Pending, ragged: frozenset[str]) -> tuple[tuple[str, tuple[int, ...] | None], ...]:
    """What must be equal for requests to share an execution: the names of the inputs they
    carry (an optional input in some only cannot be joined), and the non-batch shapes of the
    non-ragged ones."""
    if not ragged:  # a list, not a generator, into the tuple: this runs per request
        return tuple([(name, a.shape[1:]) for name, a in pending.request.inputs.items()])
    return tuple([(name, None if name in ragged else a.shape[1:])
                  for name, a in pending.request.inputs.items()])


__all__ = ["DynamicBatchPolicy", "dynamic_batcher"]
