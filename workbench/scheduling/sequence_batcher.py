"""Triton's sequence batcher for stateful models (``sequence_batching { ... }``).

Requests carry a correlation ID (``sequence_id``: non-zero uint64 or non-empty
string) and the ``sequence_start`` / ``sequence_end`` flags. Requests of one
sequence execute one at a time, in arrival order, and receive the configured
control tensors and the sequence's implicit state, whose new value is read back
from the state output. Two strategies form the executions, as in Triton:

- ``direct`` (the default; :mod:`workbench.scheduling.sequence_direct`): each
  sequence is pinned to one batch slot of one instance for its whole life;
- ``oldest`` (:mod:`workbench.scheduling.sequence_oldest`): any instance takes the oldest ready
  requests of different sequences, up to ``max_batch_size``.

Sequences over capacity (every slot held) wait in a backlog until a slot frees, as
in Triton; the model config parameter ``max_sequence_backlog`` (workbench extension,
``parameters { key: "max_sequence_backlog" value { string_value: "N" } }``) bounds
that backlog: a START request finding the slots and N waiting sequences is rejected
with Unavailable (HTTP 503 / gRPC UNAVAILABLE), and live sequences are untouched.
When a START request fails (or is cancelled) the sequence is closed and its
requests already queued fail with InvalidArgument instead of running on fresh
state. A sequence idle for ``max_sequence_idle_microseconds`` is released; a later
request for it without START is refused.

Triton's test hooks (:mod:`workbench.scheduling.scheduler_hooks`):
``TRITONSERVER_DELAY_SCHEDULER=N`` holds the first execution until N requests of sequences
holding a slot are queued; with it, ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`` (``direct``
only, as in Triton) also until M requests wait in the backlog.

Reload (hot swap): a batcher that left service keeps serving its live sequences
(:meth:`SequenceBatcher.retire`), so their state is not lost; the engine routes their
requests here by correlation ID while new sequences start on the new version.

Instance update (a reload that changes only the instance count, Triton's
``SequenceBatchScheduler::Update``): the batcher keeps its sequences and their state; the
slots follow the instances (:meth:`SequenceBatcher.instances_changed`): a ``direct``
instance removed while its slots hold live sequences keeps executing them, takes no new
ones, and unloads when the last of them ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Mapping
from dataclasses import replace

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes, ModelInstance
from workbench.config.validate_scheduling import max_sequence_backlog
from workbench.errors import InvalidArgument, Unavailable
from workbench.scheduling.base import InstanceRunner, Pending, Scheduler
from workbench.scheduling.dispatcher import BatchPolicy, Dispatcher
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.scheduling.scheduler_hooks import BACKLOG_DELAY_SCHEDULER, DELAY_SCHEDULER, hook_count
from workbench.scheduling.sequence_controls import control_tensors, control_values, initial_state, state_tensors
from workbench.scheduling.sequence_slots import Sequence, SlotTable
from workbench.statistics import ModelStatistics


class SequenceBatcher(Scheduler, BatchPolicy):
    """What both strategies share: admission, slots and backlog, state, completion.

    A :class:`~workbench.scheduling.base.Scheduler` and a
    :class:`~workbench.scheduling.base.SequenceScheduler`, by way of its own
    :class:`~workbench.scheduling.dispatcher.Dispatcher`, whose batch policy it is.
    Subclasses give the slot layout (:meth:`_slot_layout`) and form executions
    (``next_batch``). Statistics count real requests only: an execution is recorded
    with the number of real requests in it (``direct`` null requests are not counted).
    Cancelled requests are dropped when a scan of the queue for an execution meets them.

    Args:
        instances, statistics, rate_limiter: as for
            :class:`~workbench.scheduling.dispatcher.Dispatcher`.
        config: the model config (``sequence_batching``, ``max_batch_size``, name,
            ``parameters.max_sequence_backlog``).
    """

    def __init__(
        self,
        instances: list[ModelInstance],
        statistics: ModelStatistics,
        config: ModelConfig,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self._queue: deque[Pending] = deque()
        self._cancelled: list[Pending] = []
        Dispatcher(instances, statistics, rate_limiter, self)  # binds self.dispatcher
        batching = config.sequence_batching
        self._model = config.name
        self._max_batch_size = max(1, config.max_batch_size)
        self._batched = config.max_batch_size > 0
        #: ``allow_ragged_batch`` inputs: their shapes may differ within one execution
        self._ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        self._controls = control_tensors(batching)
        self._states = state_tensors(batching)
        self._slots = SlotTable(*self._slot_layout(config, len(instances)),
                                max_sequence_backlog(config), config.name)
        self._idle_ns = int(batching.max_sequence_idle_microseconds or 1_000_000) * 1000
        self._sequences: dict[int | str, Sequence] = {}
        self._idle_timer: asyncio.TimerHandle | None = None
        #: set while :meth:`retire` waits; set (done) once no sequence is live
        self._retired: asyncio.Event | None = None
        #: Triton's test hooks: queued slotted / backlog requests to wait for (0 = not holding)
        self._hold_until = hook_count(DELAY_SCHEDULER)
        self._hold_backlog = hook_count(BACKLOG_DELAY_SCHEDULER) if self._backlog_hook else 0
        self._configure(config)

    #: whether ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER`` applies (Triton: ``direct`` only)
    _backlog_hook = False

    def _slot_layout(self, config: ModelConfig, instances: int) -> tuple[int, int]:
        """``(slot groups, slots per group)`` of the strategy."""
        raise NotImplementedError

    def _configure(self, config: ModelConfig) -> None:
        """Read the strategy's own settings (called last by ``__init__``)."""

    async def enqueue(self, request: BackendRequest, arrival_ns: int) -> BackendResponse:
        return await self.dispatcher.enqueue(request, arrival_ns)

    def inflight_count(self) -> int:
        return self.dispatcher.inflight_count()

    def instances(self) -> list[ModelInstance]:
        """See :class:`~workbench.scheduling.base.InstanceScheduler`."""
        return self.dispatcher.instances()

    def update_instances(self, added: list[ModelInstance], removed: list[ModelInstance]) -> Awaitable[object]:
        """See :class:`~workbench.scheduling.base.InstanceScheduler`; the slots follow
        (:meth:`instances_changed`)."""
        return self.dispatcher.update_instances(added, removed)

    def instances_changed(self, added: list[InstanceRunner],
                          removed: list[InstanceRunner]) -> list[InstanceRunner]:
        """The strategy's slots follow the instances (see the strategies); returns the
        removed instances that still hold live sequences."""
        return []

    def _slot_freed(self, slot: tuple[int, int]) -> None:
        """A sequence that held ``slot`` ended (the strategy may let a removed instance go)."""

    async def stop(self) -> None:
        self.end_retirement()
        await self.dispatcher.stop()
        self._cancel_timers()

    def has_queued(self) -> bool:
        return bool(self._queue)

    def holds_sequence(self, correlation_id: int | str) -> bool:
        return correlation_id in self._sequences

    def live_sequences(self) -> int:
        return len(self._sequences)

    async def retire(self) -> None:
        """Keep serving the live sequences (their requests, queued or new, run here as
        usual) until each has ended: END request answered, START failed, or released after
        ``max_sequence_idle_microseconds``; or until :meth:`end_retirement`."""
        if self._retired is None:
            self._retired = asyncio.Event()
        if not self._sequences:
            self._retired.set()
        await self._retired.wait()

    def end_retirement(self) -> None:
        if self._retired is None:
            self._retired = asyncio.Event()
        self._retired.set()

    def _cancel_timers(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    # ------------------------------------------------------------------ admission
    def admit(self, pending: Pending) -> None:
        params = pending.request.parameters
        corr = _correlation_id(params, self._model)
        start, end = bool(params.get("sequence_start", False)), bool(params.get("sequence_end", False))
        if pending.request.batch_size != 1:
            raise InvalidArgument(
                f"inference request to model '{self._model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        sequence = self._sequences.get(corr)
        if start and sequence is not None:
            raise InvalidArgument(
                f"inference request for sequence {corr} to model '{self._model}' has the START "
                "flag but that sequence is still active; end it first (sequence_end) or use a "
                "new correlation ID"
            )
        if not start and sequence is None:
            raise InvalidArgument(
                f"inference request for sequence {corr} to model '{self._model}' must specify "
                "the START flag on the first request of the sequence"
            )
        if sequence is None:
            sequence = self._open(corr, pending)
        sequence.ending = sequence.ending or end
        sequence.last_used_ns = pending.enqueue_ns
        pending.request = replace(pending.request,
                                  parameters={**params, "_sequence": sequence, "_start": start, "_end": end})
        self._queue.append(pending)

    def _open(self, corr: int | str, pending: Pending) -> Sequence:
        sequence = Sequence(corr)
        try:
            self._slots.admit(sequence)
        except Unavailable:
            self.dispatcher.stats.record_failure(time.monotonic_ns() - pending.arrival_ns, "REJECTED")
            raise
        for state in self._states:
            sequence.state[state.input_name] = initial_state(state, self._batched)
        self._sequences[corr] = sequence
        self._watch_idle()
        return sequence

    # ------------------------------------------------------------------ batch forming
    def _holding(self) -> bool:
        """Triton's ``TRITONSERVER_DELAY_SCHEDULER`` hold (and its backlog count): True until
        enough requests are queued (once; never while the model stops)."""
        if not self._hold_until:
            return False
        slotted = sum(1 for p in self._queue if p.request.parameters["_sequence"].slot is not None)
        backlog = len(self._queue) - slotted
        if self.dispatcher.stopping or (slotted >= self._hold_until and backlog >= self._hold_backlog):
            self._hold_until = 0
        return bool(self._hold_until)

    def _skipped(self, pending: Pending) -> bool:
        """True when ``pending``'s client went away: a scan of the queue meeting it skips it,
        and :meth:`_drop_skipped` drops it after the scan."""
        if pending.future.done():
            self._cancelled.append(pending)
            return True
        return False

    def _drop_skipped(self) -> bool:
        """Drop the cancelled requests the last scan met (a dropped START or END ends its
        sequence); True when there were some (the scan must be done again)."""
        ids = {id(p) for p in self._cancelled}
        self._cancelled = []
        if not ids:
            return False
        kept: deque[Pending] = deque()
        cancelled: list[Pending] = []
        for pending in self._queue:
            (cancelled if id(pending) in ids else kept).append(pending)
        self._queue = kept
        for pending in cancelled:
            self.dispatcher.drop(pending)
            params = pending.request.parameters
            if params["_start"]:
                self._close(params["_sequence"], "was cancelled")
            elif params["_end"]:
                self._close(params["_sequence"])
        return bool(cancelled)

    def _take(self, pending: Pending) -> None:
        """Move ``pending`` from the queue into an execution, with its controls and state."""
        self._queue.remove(pending)
        params = pending.request.parameters
        params["_sequence"].busy = True
        params["_taken"] = True
        pending.request = self._with_controls(pending.request)

    def _with_controls(self, request: BackendRequest) -> BackendRequest:
        params = request.parameters
        sequence: Sequence = params["_sequence"]
        inputs = dict(request.inputs)
        inputs.update(control_values(self._controls, start=params["_start"], end=params["_end"],
                                     correlation_id=sequence.correlation_id, batched=self._batched))
        inputs.update(sequence.state)
        return replace(request, inputs=inputs, requested_outputs=self._wanted(request))

    def _wanted(self, request: BackendRequest) -> tuple[str, ...]:
        """The outputs an execution must produce for ``request``: its own plus the state outputs."""
        return tuple(request.requested_outputs) + tuple(s.output_name for s in self._states)

    # ------------------------------------------------------------------ completion
    def counted(self, batch: list[Pending]) -> list[Pending]:
        """Direct-strategy null rows never were in the queue and are not counted."""
        return [p for p in batch if not p.request.parameters.get("_null")]

    def complete(self, pending: Pending, response: BackendResponse,
                 times: ExecutionTimes | None, reason: str) -> None:
        params = pending.request.parameters
        if params.get("_null"):
            return  # a direct-strategy null request: nobody waits for it, its outputs are dropped
        sequence: Sequence | None = params.get("_sequence")
        if sequence is not None and params.get("_taken"):
            if response.error is None:
                for state in self._states:
                    if state.output_name in response.outputs:
                        sequence.state[state.input_name] = response.outputs.pop(state.output_name)
            sequence.busy = False
            sequence.last_used_ns = time.monotonic_ns()
            if response.error is not None and params["_start"]:
                self._close(sequence, "failed")
            elif params["_end"]:
                self._close(sequence)
        self.dispatcher.answer(pending, response, times, reason)

    def _close(self, sequence: Sequence, start_problem: str = "") -> None:
        """End ``sequence``: free its slot, and fail its requests still queued (``start_problem``
        says what happened to its START request, when that is why it ends)."""
        if self._sequences.get(sequence.correlation_id) is not sequence:
            return
        del self._sequences[sequence.correlation_id]
        slot = sequence.slot
        self._slots.release(sequence)
        if slot is not None:
            self._slot_freed(slot)
        if not self._sequences and self._retired is not None:
            self._retired.set()
        why = f"the sequence's START request {start_problem}" if start_problem else "the sequence has ended"
        for pending in [p for p in self._queue if p.request.parameters["_sequence"] is sequence]:
            self._queue.remove(pending)
            self.dispatcher.stats.pending -= 1
            error = InvalidArgument(f"inference request for sequence {sequence.correlation_id} to "
                                    f"model '{self._model}' cannot run: {why}")
            self.dispatcher.finish(pending, BackendResponse(error=error), None, "OTHER")

    # ------------------------------------------------------------------ idle sequences
    def _watch_idle(self) -> None:
        if self._idle_timer is None:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self._idle_ns / 1e9, self._release_idle)

    def _release_idle(self) -> None:
        self._idle_timer = None
        now = time.monotonic_ns()
        queued = {id(p.request.parameters["_sequence"]) for p in self._queue}
        for sequence in list(self._sequences.values()):
            if not sequence.busy and id(sequence) not in queued and now - sequence.last_used_ns >= self._idle_ns:
                self._close(sequence)
        self.dispatcher.dispatch()
        if self._sequences:
            self._watch_idle()


def input_shapes(request: BackendRequest, ragged: frozenset[str] = frozenset()
                 ) -> tuple[tuple[str, tuple[int, ...] | None], ...]:
    """``((input name, shape), ...)``: requests batch together only when these are equal.

    The shape of a ``ragged`` input (``allow_ragged_batch``) is left out (None): as in Triton's
    sequence batcher, which enforces equal shapes only for the variable-size inputs that are
    not ragged, requests whose ragged inputs differ share an execution.
    """
    return tuple((name, None if name in ragged else array.shape)
                 for name, array in request.inputs.items())


def _correlation_id(params: Mapping[str, object], model: str) -> int | str:
    corr = params.get("sequence_id", 0)
    if isinstance(corr, bool) or not isinstance(corr, (int, str)) or corr in (0, "") or (
        isinstance(corr, int) and not 0 < corr < 2**64
    ):
        raise InvalidArgument(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    return corr


__all__ = ["SequenceBatcher", "input_shapes"]
