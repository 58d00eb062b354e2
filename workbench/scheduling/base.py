"""The scheduler contract (Triton's ``scheduler.h``: Enqueue, InflightInferenceCount, Stop).

A scheduler owns a model version's request queue and its instances. ``enqueue``
is called on the event loop and resolves when the request's response exists;
instances execute on their own threads, never on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes, ModelInstance
from workbench.errors import WorkbenchError
from workbench.scheduling.rate_limiter import ResourceKey

if TYPE_CHECKING:
    from workbench.statistics import ComputeTotals
    from workbench.tracing.records import RequestTrace

#: what one execution gives back: the responses (one per request, in order) and its phase times
Execution = tuple[list[BackendResponse], ExecutionTimes]
#: ``done(result, error)``: the execution's result, or None and the exception it raised
DoneCallback = Callable[[Execution | None, BaseException | None], None]
#: a batch policy's decision to answer a request now: ``(pending, response, times, reason)``,
#: the arguments of :meth:`Dispatcher.answer` (``reason`` labels a failure)
Answer = tuple["Pending", BackendResponse, ExecutionTimes | None, str]


@dataclass(slots=True, eq=False)
class Pending:
    """A queued request: what to run, where to put the answer, and when it arrived.

    Compared by identity (``eq=False``): a queue's ``remove`` / ``in`` find this request, never
    another one whose fields (numpy inputs) would have to be compared by value.

    ``arrival_ns`` / ``enqueue_ns`` / ``deadline_ns`` are ``time.monotonic_ns()`` values;
    ``deadline_ns`` 0 = no queue timeout. ``priority`` is the priority level (1 = highest;
    0 when the scheduler has no levels).

    ``compute_totals`` and ``trace`` are the scheduler's, never the backend's (a backend sees
    :attr:`request` only): see :meth:`Scheduler.enqueue`.
    """

    request: BackendRequest
    future: asyncio.Future[BackendResponse]
    arrival_ns: int
    enqueue_ns: int
    priority: int = 0
    deadline_ns: int = 0
    #: what must match for requests to share an execution (set by the dynamic batcher)
    shape_key: tuple[object, ...] = ()
    #: the request's batch size, at least 1 (set by the dynamic batcher at admission)
    size: int = 1
    #: where the request's compute durations are added on success (a step of an ensemble)
    compute_totals: ComputeTotals | None = None
    #: the request's trace when it is sampled
    trace: RequestTrace | None = None


class InstanceRunner:
    """One model instance and the single thread that drives it.

    Executions are handed over through a ``SimpleQueue`` and their results delivered with
    ``loop.call_soon_threadsafe``: about half the hand-off cost of ``run_in_executor``
    (measured in bench/RESULTS.md), which matters for sub-millisecond models.
    """

    def __init__(self, instance: ModelInstance) -> None:
        self.instance = instance
        #: rate-limiter resources one execution holds (empty when rate limiting is off)
        self.needs: dict[ResourceKey, int] = {}
        self._jobs: queue.SimpleQueue[
            tuple[list[BackendRequest], asyncio.AbstractEventLoop, DoneCallback] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=instance.name, daemon=True)
        self._thread.start()

    def submit(self, requests: list[BackendRequest], done: DoneCallback) -> None:
        """Run one execution on the instance thread; ``done(result, error)`` is then called
        on the current event loop with ``(responses, times)`` or the exception raised."""
        self._jobs.put((requests, asyncio.get_running_loop(), done))

    def execute(self, requests: list[BackendRequest]) -> Execution:
        """Run one execution on the calling (instance) thread and time its phases."""
        times = ExecutionTimes(start_ns=time.monotonic_ns())
        responses = self.instance.execute(requests, times)
        times.end_ns = time.monotonic_ns()
        if not times.input_done_ns:
            times.input_done_ns = times.start_ns
        if not times.infer_done_ns:
            times.infer_done_ns = times.end_ns
        if len(responses) != len(requests):
            raise RuntimeError(
                f"instance {self.instance.name} returned {len(responses)} responses "
                f"for {len(requests)} requests"
            )
        return responses, times

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            requests, loop, done = job
            result: Execution | None
            try:
                result, error = self.execute(requests), None
            except BaseException as exc:  # noqa: BLE001  # the instance thread's boundary: delivered to the waiting requests
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                loop.call_soon_threadsafe(done, result, error)
        self.instance.unload()

    def close(self) -> None:
        """Blocking: let queued executions finish, unload on the instance thread, join it."""
        self._jobs.put(None)
        self._thread.join()


class Scheduler(ABC):
    """Queues requests of one model version and hands batches to free instances.

    Triton's three-method ``Scheduler`` (core ``scheduler.h``: Enqueue,
    InflightInferenceCount, Stop). What only a sequence batcher does is
    :class:`SequenceScheduler`, which the engine checks for with ``isinstance``.
    """

    @abstractmethod
    async def enqueue(self, request: BackendRequest, arrival_ns: int, *,
                      compute_totals: ComputeTotals | None = None,
                      trace: RequestTrace | None = None) -> BackendResponse:
        """Queue ``request`` and wait for its response.

        Args:
            request: validated inputs (numpy, batch dim first when the model batches); what
                the backend gets.
            arrival_ns: ``time.monotonic_ns()`` when the server received the request.
            compute_totals: given when the request is a step of an ensemble request: its
                compute durations (nanoseconds) are added there on success (Triton's
                secondary statistics aggregator). Scheduler-only: backends never see it.
            trace: the request's trace when it is sampled (``--trace-config``): the
                scheduler reports its queue and compute timestamps there. Scheduler-only.

        Raises:
            Unavailable: the scheduler is stopping.
            WorkbenchError: the execution failed (the error of that request or batch).
        """

    @abstractmethod
    def inflight_count(self) -> int:
        """Requests queued or executing (Triton's ``InflightInferenceCount``)."""

    @abstractmethod
    async def stop(self) -> None:
        """Refuse new requests, finish queued and executing ones, then unload the instances."""


class PolicyHost(Protocol):
    """All a batch policy may call on the dispatcher that runs it (``BatchPolicy.dispatcher``).

    One way only: the dispatcher drives its policy (admit, form the next execution, complete a
    request) and owns the counts (requests in flight and queued, statistics) and every answer;
    the policy decides (what to batch, when it is due, which instance, which finished requests
    are answered now: the :data:`Answer` values it returns) and hands a request back here only
    when it takes one out of its queue without running it. ``tests/test_scheduling_seam.py``
    checks that the policy modules call nothing else of the dispatcher.
    """

    @property
    def stopping(self) -> bool:
        """True once the dispatcher stops: nothing waits for a batch to fill any more."""
        ...

    @property
    def runners(self) -> list[InstanceRunner]:
        """The instances in dispatch, in order (read only)."""
        ...

    def dispatch(self) -> None:
        """Form executions now (the policy's queue changed outside a dispatch: a timer)."""
        ...

    def dispatch_at(self, due_ns: int) -> None:
        """Dispatch again at ``due_ns`` (``time.monotonic_ns()``) unless one is set earlier."""
        ...

    def dispatch_due_ns(self) -> int:
        """When the dispatch set by :meth:`dispatch_at` runs (``time.monotonic_ns()``; 0 = none)."""
        ...

    def first_free(self, runners: deque[InstanceRunner] | list[InstanceRunner]) -> InstanceRunner | None:
        """The first of ``runners`` the rate limiter lets execute now (None: none)."""
        ...

    def release_runner(self, runner: InstanceRunner) -> asyncio.Future[None]:
        """Let a removed instance the policy held go (it unloads once idle)."""
        ...

    def drop(self, pending: Pending) -> None:
        """``pending`` (taken out of the policy's queue) was cancelled by its client."""
        ...

    def fail_queued(self, pending: Pending, error: WorkbenchError, reason: str) -> None:
        """``pending`` (taken out of the policy's queue) fails with ``error`` without running,
        counted as a failure of ``reason``."""
        ...


@runtime_checkable
class SequenceScheduler(Protocol):
    """What a scheduler that holds sequence state (a sequence batcher) also does.

    The engine checks a :class:`Scheduler` for it with ``isinstance`` (a runtime-checkable
    protocol) and routes the requests of live sequences by it across a reload
    (:mod:`workbench.engine.retiring`).
    """

    def holds_sequence(self, correlation_id: int | str) -> bool:
        """True while the live sequence ``correlation_id`` has its state here. After a
        reload the engine keeps sending that sequence's requests to this scheduler, which
        has left service otherwise."""
        ...

    def live_sequences(self) -> int:
        """How many sequences are live here (started, not ended or released)."""
        ...

    def end_sequence(self, correlation_id: int | str) -> None:
        """End the live sequence ``correlation_id`` early, as a new START for it would (once
        its queued requests have run): a START for it went to another version."""
        ...

    async def retire(self) -> None:
        """Out of service after a reload: return once nothing that must finish here is
        left (its live sequences, each ending with its END request or released idle),
        serving it meanwhile; ``stop`` follows."""
        ...

    def end_retirement(self) -> None:
        """Make :meth:`retire` return now, whatever is left (model unload, server stop)."""
        ...


@runtime_checkable
class InstanceScheduler(Protocol):
    """What a scheduler that owns model instances also does: take instances in and let
    instances go while it serves (Triton's ``TritonModel::UpdateInstanceGroup``, which hands
    the scheduler the added and removed instances). The engine checks a :class:`Scheduler`
    for it with ``isinstance`` (an ensemble's scheduler has no instances)."""

    def instances(self) -> list[ModelInstance]:
        """The instances serving now (the ones being removed left out), in order."""
        ...

    def update_instances(self, added: list[ModelInstance], removed: list[ModelInstance]) -> Awaitable[object]:
        """Serve ``added`` from now on and retire ``removed`` (some of :meth:`instances`): a
        removed instance is taken out of dispatch first, finishes what it executes (a sequence
        batcher: the live sequences it holds), then unloads. Synchronous on the event loop;
        the result resolves once the removed instances that hold no live sequence have
        unloaded (those that do unload when their last sequence ends, or at :meth:`stop`)."""
        ...

