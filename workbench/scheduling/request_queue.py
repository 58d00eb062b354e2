"""Triton's priority request queue for the dynamic batcher.

One FIFO per priority level (level 1 is the highest), each with its queue policy
(``ModelQueuePolicy``: ``timeout_action`` REJECT or DELAY,
``default_timeout_microseconds``, ``allow_timeout_override``, ``max_queue_size``),
as Triton's ``PriorityQueue`` in ``scheduler_utils``. Requests are scheduled by
level, oldest first; a request whose queue timeout expired with the DELAY action
moves behind the level's other requests. As in Triton, only the levels with their own
``priority_queue_policy`` are known up front and a level's FIFOs exist only while it holds
requests: memory follows the requests and policies, never ``priority_levels`` (any uint64).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelDynamicBatching, ModelQueuePolicy

from workbench.common.errors import InvalidArgument, Unavailable
from workbench.scheduling.base import Pending


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """One level's ``ModelQueuePolicy``; times in **microseconds**, 0 = none/unlimited."""

    reject_on_timeout: bool = True
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    @classmethod
    def from_proto(cls, policy: ModelQueuePolicy) -> QueuePolicy:
        return cls(
            reject_on_timeout=policy.timeout_action == ModelQueuePolicy.REJECT,
            default_timeout_us=int(policy.default_timeout_microseconds),
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=int(policy.max_queue_size),
        )


@dataclass(slots=True)
class _Level:
    """One priority level's FIFOs: requests in arrival order, then those moved behind
    by an expired DELAY timeout."""

    ready: deque[Pending] = field(default_factory=deque)
    delayed: deque[Pending] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.ready) + len(self.delayed)


class RequestQueue:
    """Per-priority FIFOs with queue policies.

    Args:
        batching: the model's ``dynamic_batching`` message (priority levels, policies).
    """

    def __init__(self, batching: ModelDynamicBatching) -> None:
        self.levels = max(1, int(batching.priority_levels))
        self.default_level = int(batching.default_priority_level) or self.levels
        self._default_policy = QueuePolicy.from_proto(batching.default_queue_policy)
        self._policies = {
            int(level): QueuePolicy.from_proto(policy)
            for level, policy in batching.priority_queue_policy.items()
            if 1 <= level <= self.levels
        }
        self._queues: dict[int, _Level] = {}  # only the levels holding requests
        self._order: list[int] = []  # their numbers, ascending (scheduling order)
        self._deadlines: list[tuple[int, int, Pending]] = []
        self._size = 0
        #: the batch sizes (``Pending.size``) of the queued requests added up
        self.total_size = 0

    def policy(self, level: int) -> QueuePolicy:
        """The queue policy of ``level``: its ``priority_queue_policy``, else the default one."""
        return self._policies.get(level, self._default_policy)

    def __len__(self) -> int:
        return self._size

    def level_and_deadline(self, parameters: Mapping[str, object], enqueue_ns: int) -> tuple[int, int]:
        """The request's priority level and queue deadline (``time.monotonic_ns`` or 0).

        ``priority`` 0, absent or above ``priority_levels`` means the default level;
        ``timeout`` (µs) counts only where the level's policy allows the override, and
        only to shorten its ``default_timeout_microseconds`` (Triton's
        ``PolicyQueue::Enqueue``: a larger one, or any with no default, is ignored).

        Raises:
            InvalidArgument: ``priority`` or ``timeout`` is not a non-negative integer.
        """
        priority = _non_negative_int(parameters.get("priority", 0), "priority")
        level = priority if 1 <= priority <= self.levels else self.default_level
        policy = self.policy(level)
        timeout_us = policy.default_timeout_us
        if policy.allow_timeout_override and "timeout" in parameters:
            override_us = _non_negative_int(parameters["timeout"], "timeout")
            if 0 < override_us < timeout_us:
                timeout_us = override_us
        return level, (enqueue_ns + timeout_us * 1000 if timeout_us else 0)

    def push(self, pending: Pending) -> None:
        """Queue ``pending`` at its level.

        Raises:
            Unavailable: the level holds ``max_queue_size`` requests ("Exceeds maximum queue size").
        """
        level = pending.priority
        queue = self._queues.get(level)
        limit = self.policy(level).max_queue_size
        if limit and queue is not None and len(queue) >= limit:
            raise Unavailable("Exceeds maximum queue size")
        if queue is None:
            queue = self._queues[level] = _Level()
            bisect.insort(self._order, level)
        queue.ready.append(pending)
        self._size += 1
        self.total_size += pending.size
        if pending.deadline_ns:
            heapq.heappush(self._deadlines, (pending.deadline_ns, id(pending), pending))

    def __iter__(self) -> Iterator[Pending]:
        """Queued requests in scheduling order: by level, then arrival, delayed ones last."""
        for level in self._order:
            queue = self._queues[level]
            yield from queue.ready
            yield from queue.delayed

    def remove(self, taken: list[Pending]) -> None:
        """Take ``taken`` (queued requests, in scheduling order: a batch leaving for an
        execution, cancelled or expired requests) out of the queue.

        They sit near the head of the queue, so the level queues are popped from the front
        up to the last of them and the others put back: O(how deep the last one is), not a
        pass over the whole queue. A level left empty is forgotten."""
        ids = {id(p) for p in taken}
        left = len(ids)
        for level in list(self._order):
            if not left:
                break
            level_queue = self._queues[level]
            for queue in (level_queue.ready, level_queue.delayed):
                kept: list[Pending] = []
                while left and queue:
                    pending = queue.popleft()
                    if id(pending) in ids:
                        left -= 1
                        self.total_size -= pending.size
                    else:
                        kept.append(pending)
                queue.extendleft(reversed(kept))
            if not level_queue:
                del self._queues[level]
                self._order.remove(level)
        self._size -= len(ids) - left

    def expire(self, now_ns: int) -> list[Pending]:
        """Apply timeouts due by ``now_ns``: DELAY moves requests behind their level;
        REJECT returns them (the caller fails them with "Request timeout expired")."""
        if not self._deadlines or self._deadlines[0][0] > now_ns:
            return []  # nothing due (every request without a timeout: the common case)
        rejected: list[Pending] = []
        while self._deadlines and self._deadlines[0][0] <= now_ns:
            _, _, pending = heapq.heappop(self._deadlines)
            queue = self._queues.get(pending.priority)
            if queue is None or not any(p is pending for p in queue.ready):
                continue  # already taken, dropped or delayed
            if self.policy(pending.priority).reject_on_timeout:
                rejected.append(pending)
            else:
                queue.ready = deque(p for p in queue.ready if p is not pending)
                queue.delayed.append(pending)
        self.remove(rejected)
        return rejected

    def any_done(self) -> bool:
        """True when some queued request's future is done (its caller went away): a pass over the
        queue that only asks each request that."""
        for level in self._queues.values():
            for pending in level.ready:
                if pending.future.done():
                    return True
            for pending in level.delayed:
                if pending.future.done():
                    return True
        return False

    def next_deadline_ns(self) -> int:
        """The earliest pending queue deadline, 0 if none."""
        return self._deadlines[0][0] if self._deadlines else 0


def _non_negative_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"request parameter '{name}' must be a non-negative integer, got {value!r}")
    return value
