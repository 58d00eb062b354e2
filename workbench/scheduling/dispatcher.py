"""One dispatcher for every instance-backed scheduler, and the batch policy it is given.

The :class:`Dispatcher` owns a model version's instances (one thread each), the
rate-limiter hand-shake, statistics and the counts (requests in flight, requests queued:
:meth:`Dispatcher._queued` counts one in, :meth:`Dispatcher._left_queue` out); what one
execution takes from the queue is its :class:`BatchPolicy`'s (composition, not subclassing):
:class:`~workbench.scheduling.direct.FifoPolicy` (Triton's default scheduler),
:class:`~workbench.scheduling.dynamic_batcher.DynamicBatchPolicy` and the sequence
batchers. Requests wait in the policy's queue (not in threads) while every instance is
busy. A request whose client went away is skipped when the policy reaches it (at the
head of the queue, or while forming a batch), never by scanning the whole queue.

Instances come and go while it serves (:meth:`Dispatcher.update_instances`, an instance
update): added ones join the idle pool at once; a removed one leaves dispatch first, finishes
the execution it is running, then unloads on its thread. A policy may hold a removed instance
back while it still has work pinned to it (the sequence batcher's live sequences) and let it
go later (:meth:`Dispatcher.release_runner`).

A defect in a policy (an exception while it forms an execution or completes a request) never
strands a queue: the requests it holds, and those of the execution being completed, are failed
with an INTERNAL error naming the exception (:meth:`Dispatcher.scheduler_failed`), the policy
forgets them (:meth:`BatchPolicy.abandon`), and the model serves on.

The seam is one-way: the dispatcher calls its policy; a policy calls back only what
:class:`~workbench.scheduling.base.PolicyHost` names (``tests/test_scheduling_seam.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable
from functools import partial
from typing import TYPE_CHECKING

from workbench.backends.base import (
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    ModelInstance,
)
from workbench.errors import Cancelled, InternalError, InvalidArgument, Unavailable, WorkbenchError
from workbench.scheduling.base import Answer, Execution, InstanceRunner, Pending, PolicyHost, Scheduler
from workbench.scheduling.deadline_timer import DeadlineTimer
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.statistics import ComputeTotals, ModelStatistics

if TYPE_CHECKING:
    from workbench.tracing.records import RequestTrace

log = logging.getLogger(__name__)

#: Triton's text for a request released with RESCHEDULE to a scheduler that does not take it
RESCHEDULE_REFUSED = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
                      "not configured to handle such a flag.")


class BatchPolicy(ABC):
    """The queue of one dispatcher and how its executions form.

    :meth:`Dispatcher.__init__` binds the policy (``self.dispatcher``); all the policy's
    methods run on the event loop. The policy calls back only what
    :class:`~workbench.scheduling.base.PolicyHost` names: the dispatcher keeps every count.
    """

    dispatcher: PolicyHost

    def bind(self, dispatcher: PolicyHost) -> None:
        """Called once by the dispatcher this policy is given to."""
        self.dispatcher = dispatcher

    @abstractmethod
    def admit(self, pending: Pending) -> None:
        """Queue a new request.

        Raises:
            Unavailable: the queue is full (the dispatcher counts a REJECTED failure).
            WorkbenchError: the request is refused (nothing is queued then).
        """

    @abstractmethod
    def has_queued(self) -> bool:
        """True while some request is queued (cancelled ones not yet skipped included)."""

    @abstractmethod
    def take_queued(self) -> list[Pending]:
        """Empty the queue and return what it held (after a scheduler defect the dispatcher
        fails those requests)."""

    def abandon(self, failed: list[Pending]) -> tuple[Answer, ...]:
        """A scheduler defect failed ``failed`` (queued ones, or an execution's): forget any
        state kept for them and return the answers that were held behind them, now due (the
        dispatcher gives them before failing ``failed``). Here: no state, none."""
        return ()

    @abstractmethod
    def next_batch(self, runner: InstanceRunner) -> list[Pending]:
        """Take the requests of one execution on ``runner`` out of the queue ([] = none
        now; the policy arranges a later dispatch with :meth:`Dispatcher.dispatch_at`).
        Cancelled requests met on the way leave the queue and are given to
        :meth:`Dispatcher.drop`; others failed there (a queue timeout) to
        :meth:`Dispatcher.fail_queued`."""

    def free_runner(self, idle: deque[InstanceRunner]) -> InstanceRunner | None:
        """The idle instance to form the next execution for; None when the idle instances
        wait for rate-limiter resources. Here: :meth:`Dispatcher.first_free`."""
        return self.dispatcher.first_free(idle)

    def counted(self, batch: list[Pending]) -> list[Pending]:
        """The requests of ``batch`` that left the queue and count in the statistics
        (here all; not a sequence batcher's null rows)."""
        return batch

    def complete(self, pending: Pending, response: BackendResponse,
                 times: ExecutionTimes | None, reason: str) -> tuple[Answer, ...] | None:
        """A request is finished: say which answers the dispatcher gives now. None: this one,
        as given (here; the common case, which allocates nothing on the hot path); else the
        answers due now, in order (a policy holding answers to release them in arrival order
        returns the released ones; () for a request no one waits for). A policy may update its
        own state first."""
        return None

    def reschedule(self, pending: Pending) -> bool:
        """The backend released ``pending`` with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``
        (:attr:`BackendResponse.rescheduled`): queue it again and return True, or return False
        when this policy does not take rescheduled requests (the dispatcher then fails it with
        :data:`RESCHEDULE_REFUSED`, Triton's text). Here: False (Triton accepts the flag only
        from a sequence batcher with ``iterative_sequence: true``)."""
        return False

    def instances_changed(self, added: list[InstanceRunner],
                          removed: list[InstanceRunner]) -> list[InstanceRunner]:
        """Instances were added (already idle) and are being removed (:meth:`Dispatcher.update_instances`).
        Returns the removed ones the policy still needs (work pinned to them): they stay in
        dispatch until the policy calls :meth:`Dispatcher.release_runner`. Here: none."""
        return []


class Dispatcher(Scheduler):
    """A pool of instances fed by one :class:`BatchPolicy`.

    Args:
        instances: loaded instances of one model version (at least one).
        statistics: where executions and request outcomes are recorded.
        rate_limiter: the server's rate limiter, or None when rate limiting is off.
        policy: what one execution takes from the queue; bound to this dispatcher.
    """

    def __init__(
        self,
        instances: list[ModelInstance],
        statistics: ModelStatistics,
        rate_limiter: RateLimiter | None,
        policy: BatchPolicy,
    ) -> None:
        self.runners = [InstanceRunner(i) for i in instances]
        #: the server's rate limiter (None when rate limiting is off)
        self.limiter = rate_limiter
        if rate_limiter is not None:
            rate_limiter.register(i.spec for i in instances)
            for runner in self.runners:
                runner.needs = rate_limiter.needs(runner.instance.spec)
        self.stats = statistics
        self._policy = policy
        self._idle: deque[InstanceRunner] = deque(self.runners)
        #: admitted requests not yet in an execution nor out of the queue, by id (what a
        #: scheduler defect fails: some may have left the policy's queue when the defect
        #: struck); ``statistics.pending`` is their count, kept by :meth:`_queued` and
        #: :meth:`_left_queue` alone
        self._waiting: dict[int, Pending] = {}
        #: admitted requests not yet answered (:meth:`enqueue` counts in, :meth:`answer` out)
        self._inflight = 0
        self._stopping = False
        self._drained: asyncio.Event | None = None
        #: the policy's next dispatch (:meth:`dispatch_at`), at microsecond precision
        self._dispatch_timer = DeadlineTimer(self._on_dispatch_timer)
        #: removed runners still executing, by id: they unload when their execution ends
        self._leaving: dict[int, asyncio.Future[None]] = {}
        #: removed runners the policy still holds (work pinned to them), by id
        self._held: set[int] = set()
        #: unloads of removed runners under way (:meth:`stop` waits for them)
        self._closing: set[asyncio.Future[None]] = set()
        policy.bind(self)

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` began: nothing waits for a batch to fill any more."""
        return self._stopping

    async def enqueue(self, request: BackendRequest, arrival_ns: int, *,
                      compute_totals: ComputeTotals | None = None,
                      trace: RequestTrace | None = None) -> BackendResponse:
        if self._stopping:
            raise Unavailable("model is being unloaded; request rejected")
        future: asyncio.Future[BackendResponse] = asyncio.get_running_loop().create_future()
        pending = Pending(request, future, arrival_ns, time.monotonic_ns(),
                          compute_totals=compute_totals, trace=trace)
        try:
            self._policy.admit(pending)
        except Unavailable:  # a full queue: Triton counts the rejection as a failure
            self.stats.record_failure(time.monotonic_ns() - pending.arrival_ns, "REJECTED")
            raise
        self._inflight += 1
        self._queued(pending)
        self.dispatch()
        return await future

    def _queued(self, pending: Pending) -> None:
        """``pending`` joined the policy's queue (admitted, or rescheduled): count it in."""
        self._waiting[id(pending)] = pending
        self.stats.pending += 1

    def _left_queue(self, pendings: list[Pending]) -> None:
        """``pendings`` left the policy's queue (into an execution, or failed without
        running): count out those still counted in (a null row or a request already out
        never was)."""
        waiting = self._waiting
        left = 0
        for pending in pendings:
            if waiting.pop(id(pending), None) is not None:
                left += 1
        self.stats.pending -= left

    def inflight_count(self) -> int:
        return self._inflight

    async def stop(self) -> None:
        self._stopping = True
        self.dispatch()  # nothing waits for a batch to fill any more
        if self._inflight:
            self._drained = asyncio.Event()
            await self._drained.wait()
        self._dispatch_timer.close()
        if self.limiter is not None:  # the instances leave the rate limiter's pools
            self.limiter.unregister(r.instance.spec for r in self.runners)
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, r.close) for r in self.runners),
                             *self._closing, return_exceptions=True)

    # ------------------------------------------------------------------ instance updates
    def instances(self) -> list[ModelInstance]:
        """See :class:`~workbench.scheduling.base.InstanceScheduler`."""
        return [r.instance for r in self.runners if id(r) not in self._held]

    def update_instances(self, added: list[ModelInstance], removed: list[ModelInstance]) -> Awaitable[object]:
        """See :class:`~workbench.scheduling.base.InstanceScheduler`. New runners join the
        idle pool (and the rate limiter's pools); the policy is told
        (:meth:`BatchPolicy.instances_changed`) and may keep removed ones it still needs."""
        new = [InstanceRunner(i) for i in added]
        if self.limiter is not None:
            self.limiter.register(i.spec for i in added)
            for runner in new:
                runner.needs = self.limiter.needs(runner.instance.spec)
        self.runners.extend(new)
        self._idle.extend(new)
        leaving = [r for r in self.runners if any(r.instance is i for i in removed)]
        held = {id(r) for r in self._policy.instances_changed(new, leaving)}
        self._held |= held
        released = [self.release_runner(r) for r in leaving if id(r) not in held]
        self.dispatch()
        return asyncio.gather(*released)

    def release_runner(self, runner: InstanceRunner) -> asyncio.Future[None]:
        """Take ``runner`` out of dispatch now and unload it once its execution (if any)
        ends; the future resolves when it has unloaded."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.discard(id(runner))
        if runner in self.runners:
            self.runners.remove(runner)
        if runner in self._idle:
            self._idle.remove(runner)
            self._close_runner(runner, future)
        else:  # executing: :meth:`_finished` closes it
            self._leaving[id(runner)] = future
        return future

    def _close_runner(self, runner: InstanceRunner, future: asyncio.Future[None]) -> None:
        if self.limiter is not None:  # it leaves the rate limiter's pools
            self.limiter.unregister([runner.instance.spec])
        closing = asyncio.get_running_loop().run_in_executor(None, runner.close)
        self._closing.add(closing)

        def closed(done: asyncio.Future[None]) -> None:
            self._closing.discard(done)
            if not future.done():
                future.set_result(None)

        closing.add_done_callback(closed)

    # ------------------------------------------------------------------ dispatching
    def dispatch(self) -> None:
        """Start executions on the idle instances while the policy forms them; a defect of
        the policy fails the requests waiting (:meth:`scheduler_failed`) instead of
        stranding them."""
        try:
            self._dispatch()
        except Exception as error:  # noqa: BLE001  # a policy defect: failed below, not stranded
            try:
                self._policy.take_queued()
            except Exception:
                log.exception("emptying the queue after a scheduler failure failed")
            waiting = list(self._waiting.values())
            self._left_queue(waiting)
            self.scheduler_failed(error, waiting)

    def _dispatch(self) -> None:
        while self._idle and self._policy.has_queued():
            runner = self._policy.free_runner(self._idle)
            if runner is None:  # idle instances wait for rate-limiter resources
                assert self.limiter is not None
                self.limiter.wait(self.dispatch, min(r.instance.spec.rate_priority for r in self._idle))
                return
            batch = self._policy.next_batch(runner)
            if not batch:
                return
            self._left_queue(batch)
            self._idle.remove(runner)
            if self.limiter is not None:
                self.limiter.acquire(runner.needs)
            runner.submit([p.request for p in batch], partial(self._finished, runner, batch))

    def dispatch_at(self, due_ns: int) -> None:
        """Dispatch again at ``due_ns`` (``time.monotonic_ns()``), unless a dispatch already
        set for an earlier time comes first: how a policy waits out a queue delay without
        blocking the loop. Precise to microseconds where the platform has a timerfd
        (:mod:`~workbench.scheduling.deadline_timer`), as Triton's batcher thread waits."""
        self._dispatch_timer.arm_earlier(due_ns)

    def dispatch_due_ns(self) -> int:
        """When the dispatch set by :meth:`dispatch_at` will run (``time.monotonic_ns()``), 0 when
        none is set."""
        return self._dispatch_timer.due_ns

    def _on_dispatch_timer(self) -> None:
        self.dispatch()

    def first_free(self, runners: deque[InstanceRunner] | list[InstanceRunner]) -> InstanceRunner | None:
        """The first of ``runners`` that may execute now: without rate limiting the first
        one; with it, the one with the lowest ``rate_limiter.priority`` whose resources are
        free (None when none is)."""
        if self.limiter is None:
            return runners[0]
        for runner in sorted(runners, key=lambda r: r.instance.spec.rate_priority):
            if self.limiter.available(runner.needs):
                return runner
        return None

    # ------------------------------------------------------------------ outcomes
    def drop(self, pending: Pending) -> None:
        """A queued request whose client went away before it ran (the policy took it out of
        its queue): failed with Cancelled, reason CANCELED."""
        self.fail_queued(pending, Cancelled("request cancelled"), "CANCELED")

    def fail_queued(self, pending: Pending, error: WorkbenchError, reason: str) -> None:
        """A queued request fails with ``error`` without running (the policy took it out of
        its queue: a queue timeout, its sequence ended), counted as a failure of ``reason``;
        through :meth:`BatchPolicy.complete` as every outcome."""
        self._left_queue([pending])
        self.finish(pending, BackendResponse(error=error), None, reason)

    def finish(self, pending: Pending, response: BackendResponse,
               times: ExecutionTimes | None, reason: str = "BACKEND") -> None:
        """``pending`` is done with ``response`` (``reason`` labels a failure); through the
        policy's :meth:`BatchPolicy.complete`. A rescheduled one (the backend released it with
        ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``) goes back to the policy's queue
        (:meth:`BatchPolicy.reschedule`) and waits again, or fails with Triton's
        :data:`RESCHEDULE_REFUSED` (InvalidArgument) where the policy refuses it."""
        if response.rescheduled:
            if self._policy.reschedule(pending):
                self._queued(pending)
                return
            response = BackendResponse(error=InvalidArgument(RESCHEDULE_REFUSED))
        answers = self._policy.complete(pending, response, times, reason)
        if answers is None:  # this one, as given
            self.answer(pending, response, times, reason)
            return
        for answer in answers:
            self.answer(*answer)

    def scheduler_failed(self, error: Exception, failed: list[Pending]) -> None:
        """A defect of the scheduler (``error``, logged with its traceback) struck while
        ``failed`` waited: each is answered with an INTERNAL error naming it (counted as a
        failure of reason OTHER) and the policy forgets them; the model serves on."""
        log.error("scheduler failure (%d requests failed)", len(failed), exc_info=error)
        released: tuple[Answer, ...] = ()
        try:
            released = self._policy.abandon(failed)
        except Exception:
            log.exception("the policy could not forget the failed requests")
        for answer in released:
            self.answer(*answer)
        failure = InternalError(f"request failed in the scheduler: {type(error).__name__}: {error}")
        for pending in failed:  # a cancelled one too: it still counts in flight
            self.answer(pending, BackendResponse(error=failure), None, "OTHER")

    def answer(self, pending: Pending, response: BackendResponse,
               times: ExecutionTimes | None, reason: str = "BACKEND") -> None:
        """Record the outcome, answer the request and count it out of the in-flight ones
        (it left the queue before: :meth:`_left_queue`)."""
        now = time.monotonic_ns()
        if response.error is None and times is not None:
            input_ns = times.input_done_ns - times.start_ns
            infer_ns = times.infer_done_ns - times.input_done_ns
            output_ns = times.end_ns - times.infer_done_ns
            self.stats.record_success(
                now - pending.arrival_ns,
                times.start_ns - pending.enqueue_ns,
                input_ns,
                infer_ns,
                output_ns,
            )
            if pending.compute_totals is not None:  # a step of an ensemble request
                pending.compute_totals.add(input_ns, infer_ns, output_ns)
        else:
            self.stats.record_failure(now - pending.arrival_ns, reason)
        if pending.trace is not None:  # a sampled request (--trace-config)
            _trace_outcome(pending, response, times, now)
        if not pending.future.done():
            if response.error is not None:
                pending.future.set_exception(response.error)
            else:
                pending.future.set_result(response)
        self._inflight -= 1
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()

    def _finished(
        self, runner: InstanceRunner, batch: list[Pending], result: Execution | None, error: BaseException | None
    ) -> None:
        leaving = self._leaving.pop(id(runner), None)
        if leaving is None:
            self._idle.append(runner)
        else:  # removed while it executed: unloads now
            self._close_runner(runner, leaving)
        if self.limiter is not None:
            self.limiter.release(runner.needs)
        times: ExecutionTimes | None
        if result is not None:  # the execution ran (its error is None)
            responses, times = result
            self._record_execution(batch, times)  # null rows in the batch size, as Triton's
        else:  # the whole execution failed
            wrapped = error if isinstance(error, WorkbenchError) else InternalError(str(error))
            responses, times = [BackendResponse(error=wrapped)] * len(batch), None
        for pending, response in zip(batch, responses, strict=True):
            try:
                self.finish(pending, response, times)
            except Exception as defect:  # noqa: BLE001  # that request is failed, not stranded
                self.scheduler_failed(defect, self._policy.counted([pending]))
        self.dispatch()

    def _record_execution(self, batch: list[Pending], times: ExecutionTimes) -> None:
        """One ``batch_stats`` entry: the batch size is every row the backend got, a
        sequence batcher's null rows included (Triton's backends report the request count of
        the execution, null requests among them); ``inference_count`` counts real requests
        only (Triton's null requests collect no statistics)."""
        size = sum(p.request.batch_size for p in batch)
        real = self._policy.counted(batch)
        self.stats.record_execution(
            size,
            times.input_done_ns - times.start_ns,
            times.infer_done_ns - times.input_done_ns,
            times.end_ns - times.infer_done_ns,
            size if len(real) == len(batch) else sum(p.request.batch_size for p in real),
        )


def _trace_outcome(pending: Pending, response: BackendResponse, times: ExecutionTimes | None,
                   end_ns: int) -> None:
    """Report a traced request's queue and compute timestamps (the times its statistics
    durations were just taken from), its outputs and ``REQUEST_END`` (Triton's order)."""
    trace = pending.trace
    assert trace is not None
    trace.stamp("QUEUE_START", pending.enqueue_ns)
    if times is not None:
        trace.computed(times.start_ns, times.input_done_ns, times.infer_done_ns, times.end_ns)
    if response.error is None:
        trace.report_tensors("TENSOR_BACKEND_OUTPUT", response.outputs, pending.request.requested_outputs)
    trace.stamp("REQUEST_END", end_ns)


__all__ = ["RESCHEDULE_REFUSED", "BatchPolicy", "Dispatcher"]
