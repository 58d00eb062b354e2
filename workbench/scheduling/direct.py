"""Triton's default scheduler: one request per execution, on whichever instance is free.

Requests wait in one FIFO queue (not in threads) while every instance is busy.
Subclasses change only :meth:`DirectScheduler._next_batch` (what one execution takes);
the dynamic batcher is one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from functools import partial

from workbench.backends.base import BackendRequest, BackendResponse, ModelInstance
from workbench.errors import Cancelled, InternalError, Unavailable, WorkbenchError
from workbench.scheduling.base import InstanceRunner, Pending, Scheduler
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.statistics import ModelStatistics


class DirectScheduler(Scheduler):
    """FIFO queue in front of a pool of instances; each execution takes one request.

    Args:
        instances: loaded instances of one model version (at least one).
        statistics: where executions and request outcomes are recorded.
        rate_limiter: the server's rate limiter, or None when rate limiting is off.
    """

    def __init__(
        self,
        instances: list[ModelInstance],
        statistics: ModelStatistics,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self._runners = [InstanceRunner(i) for i in instances]
        self._limiter = rate_limiter
        if rate_limiter is not None:
            rate_limiter.register(i.spec for i in instances)
            for runner in self._runners:
                runner.needs = rate_limiter.needs(runner.instance.spec)
        self._idle: deque[InstanceRunner] = deque(self._runners)
        self._queue: deque[Pending] = deque()
        self._stats = statistics
        self._inflight = 0
        self._stopping = False
        self._drained: asyncio.Event | None = None
        self._dispatch_timer: asyncio.TimerHandle | None = None
        self._dispatch_due_ns = 0

    async def enqueue(self, request: BackendRequest, arrival_ns: int) -> BackendResponse:
        if self._stopping:
            raise Unavailable("model is being unloaded; request rejected")
        future = asyncio.get_running_loop().create_future()
        self._admit(Pending(request, future, arrival_ns, time.monotonic_ns()))
        self._inflight += 1
        self._stats.pending += 1
        self._dispatch()
        return await future

    def inflight_count(self) -> int:
        return self._inflight

    async def stop(self) -> None:
        self._stopping = True
        self._dispatch()  # nothing waits for a batch to fill any more
        if self._inflight:
            self._drained = asyncio.Event()
            await self._drained.wait()
        if self._dispatch_timer is not None:
            self._dispatch_timer.cancel()
            self._dispatch_timer = None
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, r.close) for r in self._runners))

    def _dispatch_at(self, due_ns: int) -> None:
        """Dispatch again at ``due_ns`` (``time.monotonic_ns()``), unless a dispatch already
        set for an earlier time comes first: how a batcher waits out a queue delay without
        blocking the loop."""
        if self._dispatch_timer is not None:
            if self._dispatch_due_ns <= due_ns:
                return
            self._dispatch_timer.cancel()
        self._dispatch_due_ns = due_ns
        delay_s = max(0.0, (due_ns - time.monotonic_ns()) / 1e9)
        self._dispatch_timer = asyncio.get_running_loop().call_later(delay_s, self._on_dispatch_timer)

    def _on_dispatch_timer(self) -> None:
        self._dispatch_timer = None
        self._dispatch()

    def _admit(self, pending: Pending) -> None:
        """Put a new request in the queue (subclasses: priorities, policies, limits)."""
        self._queue.append(pending)

    def _next_batch(self, runner: InstanceRunner) -> list[Pending]:
        """Take the requests for one execution on ``runner`` from the queue (here: the
        oldest live one; the sequence batcher's ``direct`` strategy uses ``runner``)."""
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                return [pending]
            self._drop(pending)
        return []

    def _drop(self, pending: Pending) -> None:
        """Account for a queued request whose client went away before it ran."""
        self._stats.pending -= 1
        self._complete(pending, BackendResponse(error=Cancelled("request cancelled")), None, "CANCELED")

    def _dispatch(self) -> None:
        while self._idle and self._queue:
            runner = self._free_runner()
            if runner is None:  # idle instances wait for rate-limiter resources
                assert self._limiter is not None
                self._limiter.wait(self._dispatch, min(r.instance.spec.rate_priority for r in self._idle))
                return
            batch = self._next_batch(runner)
            if not batch:
                return
            self._idle.remove(runner)
            if self._limiter is not None:
                self._limiter.acquire(runner.needs)
            self._stats.pending -= self._queued_count(batch)
            runner.submit([p.request for p in batch], partial(self._finished, runner, batch))

    def _queued_count(self, batch: list[Pending]) -> int:
        """How many of ``batch``'s requests leave the queue (all of them here)."""
        return len(batch)

    def _free_runner(self) -> InstanceRunner | None:
        """An idle instance that may execute now (its rate-limiter resources are free)."""
        if self._limiter is None:
            return self._idle[0]
        for runner in sorted(self._idle, key=lambda r: r.instance.spec.rate_priority):
            if self._limiter.available(runner.needs):
                return runner
        return None

    def _finished(
        self, runner: InstanceRunner, batch: list[Pending], result, error: BaseException | None
    ) -> None:
        self._idle.append(runner)
        if self._limiter is not None:
            self._limiter.release(runner.needs)
        if error is None:
            responses, times = result
            self._record_execution(batch, times)
        else:  # the whole execution failed
            wrapped = error if isinstance(error, WorkbenchError) else InternalError(str(error))
            responses, times = [BackendResponse(error=wrapped)] * len(batch), None
        for pending, response in zip(batch, responses, strict=True):
            self._complete(pending, response, times)
        self._dispatch()

    def _record_execution(self, batch: list[Pending], times) -> None:
        size = sum(p.request.batch_size for p in batch)
        self._stats.record_execution(
            size,
            times.input_done_ns - times.start_ns,
            times.infer_done_ns - times.input_done_ns,
            times.end_ns - times.infer_done_ns,
        )

    def _complete(
        self, pending: Pending, response: BackendResponse, times, reason: str = "BACKEND"
    ) -> None:
        """Record the outcome and answer the request (``reason`` labels a failure)."""
        now = time.monotonic_ns()
        if response.error is None and times is not None:
            input_ns = times.input_done_ns - times.start_ns
            infer_ns = times.infer_done_ns - times.input_done_ns
            output_ns = times.end_ns - times.infer_done_ns
            self._stats.record_success(
                now - pending.arrival_ns,
                times.start_ns - pending.enqueue_ns,
                input_ns,
                infer_ns,
                output_ns,
            )
            if pending.request.compute_totals is not None:  # a step of an ensemble request
                pending.request.compute_totals.add(input_ns, infer_ns, output_ns)
        else:
            self._stats.record_failure(now - pending.arrival_ns, reason)
        if not pending.future.done():
            if response.error is not None:
                pending.future.set_exception(response.error)
            else:
                pending.future.set_result(response)
        self._forget(pending)

    def _forget(self, pending: Pending) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()
