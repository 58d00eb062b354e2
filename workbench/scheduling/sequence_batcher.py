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

How a sequence ends, as in Triton's ``SequenceBatchScheduler``:

- its END request is answered. Once an END is queued, the correlation ID is free: a
  later START opens a new sequence (its own slot or backlog place);
- a START arrives while it is live (no END queued): Triton's "previous sequence will be
  terminated early". The new sequence continues in the same slot (or backlog place)
  after the requests already queued; its START request runs on fresh state;
- it waits in the backlog longer than a request's ``timeout`` parameter (µs; the
  earliest deadline of its queued requests counts): all its queued requests fail with
  Unavailable "timeout of the corresponding sequence has been expired" (reason REJECTED).
  A sequence holding a slot is not timed out (Triton);
- it is idle (nothing queued or executing) for ``max_sequence_idle_microseconds``: its
  slot is released then, one idle period after its last request (a loop timer due at the
  earliest such moment, as Triton's reaper thread wakes);
- one of its queued requests is cancelled (the client went away): its other queued
  requests fail with Cancelled (CANCELLED, reason CANCELED) and its slot is released;
- its START request fails: its queued requests up to the next START fail with
  InvalidArgument instead of running on fresh state (a workbench rule).

A later request of an ended sequence without START is refused.

Iterative sequences (``iterative_sequence: true``, Triton's ``IterativeSequencer``): a request
without a correlation ID gets one of the batcher's own (unique among its live sequences)
and the START flag, so each request is a sequence of its own; the model may release it with
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` (:meth:`SequenceBatcher.reschedule`): it queues
again in its sequence (slot kept, state kept, neither START nor END) and runs again, e.g. to
produce a decoupled model's next response. A request of an iterative sequence that ends any
other way (answered, failed) ends its sequence and frees the slot, as Triton's release
callback cancels the sequence. Without ``iterative_sequence`` a rescheduled request fails
(:data:`~workbench.scheduling.dispatcher.RESCHEDULE_REFUSED`).

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
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes
from workbench.config.validate_scheduling import max_sequence_backlog
from workbench.errors import Cancelled, InvalidArgument, Unavailable, WorkbenchError
from workbench.scheduling.base import Answer, InstanceRunner, Pending
from workbench.scheduling.dispatcher import BatchPolicy
from workbench.scheduling.scheduler_hooks import BACKLOG_DELAY_SCHEDULER, DELAY_SCHEDULER, hook_count
from workbench.scheduling.sequence_controls import control_tensors, control_values, initial_state, state_tensors
from workbench.scheduling.sequence_slots import Sequence, SlotTable

log = logging.getLogger(__name__)

#: Triton's text for the requests of a sequence whose backlog wait outlived a request's timeout
BACKLOG_TIMEOUT = "timeout of the corresponding sequence has been expired"


class SequenceBatcher(BatchPolicy):
    """What both strategies share: admission, slots and backlog, state, completion.

    The batch policy of a :class:`~workbench.scheduling.sequence_scheduler.SequenceDispatcher`
    (the scheduler, which passes the
    :class:`~workbench.scheduling.base.SequenceScheduler` calls on to it).
    Subclasses give the slot layout (:meth:`_slot_layout`) and form executions
    (``next_batch``). ``inference_count`` counts real requests only, while an execution's
    ``batch_stats`` size includes ``direct`` null rows (Triton's).
    Cancelled requests are dropped when a scan of the queue for an execution meets them.

    Args:
        config: the model config (``sequence_batching``, ``max_batch_size``, name,
            ``parameters.max_sequence_backlog``).
        instances: how many instances the dispatcher starts with (the slot layout).
    """

    def __init__(self, config: ModelConfig, instances: int) -> None:
        self._queue: deque[Pending] = deque()
        self._cancelled: list[Pending] = []
        batching = config.sequence_batching
        self._model = config.name
        self._max_batch_size = max(1, config.max_batch_size)
        self._batched = config.max_batch_size > 0
        #: ``allow_ragged_batch`` inputs: their shapes may differ within one execution
        self._ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        self._controls = control_tensors(batching)
        self._states = state_tensors(batching)
        self._slots = SlotTable(*self._slot_layout(config, instances),
                                max_sequence_backlog(config), config.name)
        self._idle_ns = int(batching.max_sequence_idle_microseconds or 1_000_000) * 1000
        #: Triton's iterative sequences: IDs for requests without one, RESCHEDULE taken
        self._iterative = batching.iterative_sequence
        self._next_id = 1
        #: correlation ID -> the sequence its next request joins (none once an END is queued)
        self._sequences: dict[int | str, Sequence] = {}
        #: every sequence holding a slot or a backlog place (an ending one included)
        self._live: set[Sequence] = set()
        self._reaper: asyncio.TimerHandle | None = None
        self._reaper_due_ns = 0
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

    def instances_changed(self, added: list[InstanceRunner],
                          removed: list[InstanceRunner]) -> list[InstanceRunner]:
        """The strategy's slots follow the instances (see the strategies); returns the
        removed instances that still hold live sequences."""
        return []

    def _slot_freed(self, slot: tuple[int, int]) -> None:
        """A sequence that held ``slot`` ended (the strategy may let a removed instance go)."""

    def _sequence_ended(self, sequence: Sequence) -> None:
        """``sequence`` ended (after :meth:`_slot_freed`; the strategy may let a removed
        instance go)."""

    def has_queued(self) -> bool:
        return bool(self._queue)

    def take_queued(self) -> list[Pending]:
        queued, self._queue = list(self._queue), deque()
        return queued

    def abandon(self, failed: list[Pending]) -> tuple[Answer, ...]:
        """End the sequences of the failed requests (a scheduler defect left their state
        unknown): their slots are freed and their requests still queued fail ("the sequence
        has ended"); a later request of one needs a START."""
        sequences = (p.request.parameters.get("_sequence") for p in failed)
        for sequence in {id(s): s for s in sequences if s is not None}.values():
            sequence.busy = False
            self._close(sequence)
        return ()

    def holds_sequence(self, correlation_id: int | str) -> bool:
        return correlation_id in self._sequences

    def live_sequences(self) -> int:
        return len(self._live)

    def end_sequence(self, correlation_id: int | str) -> None:
        """End the live sequence ``correlation_id`` as a START for it would (Triton's early
        termination): at once when nothing of it is queued or executing, else once what is
        queued has run. The engine calls it when a START for a sequence this retiring
        version holds goes to the new version."""
        sequence = self._sequences.pop(correlation_id, None)
        if sequence is None:
            return
        if not sequence.busy and not self._queued_of(sequence):
            self._close(sequence)
            self.dispatcher.dispatch()
        else:
            sequence.ending = True

    async def retire(self) -> None:
        """Keep serving the live sequences (their requests, queued or new, run here as
        usual) until each has ended: END request answered, START failed, or released after
        ``max_sequence_idle_microseconds``; or until :meth:`end_retirement`."""
        if self._retired is None:
            self._retired = asyncio.Event()
        if not self._live:
            self._retired.set()
        await self._retired.wait()

    def end_retirement(self) -> None:
        if self._retired is None:
            self._retired = asyncio.Event()
        self._retired.set()

    def cancel_timers(self) -> None:
        """The dispatcher stopped: the reaper (idle and backlog time limits) wakes no more."""
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    # ------------------------------------------------------------------ admission
    def admit(self, pending: Pending) -> None:
        params = pending.request.parameters
        start, end = bool(params.get("sequence_start", False)), bool(params.get("sequence_end", False))
        if self._iterative and params.get("sequence_id", 0) in (0, ""):  # Triton's IterativeSequencer
            params = {**params, "sequence_id": self._new_id()}
            start, end = True, False
        corr = _correlation_id(params, self._model)
        if pending.request.batch_size != 1:
            raise InvalidArgument(
                f"inference request to model '{self._model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        timeout_us = _timeout_us(params)
        sequence = self._sequences.get(corr)
        if not start and sequence is None:
            raise InvalidArgument(
                f"inference request for sequence {corr} to model '{self._model}' must specify "
                "the START flag on the first request of the sequence"
            )
        if sequence is None:
            sequence = self._open(corr)
        elif start:  # Triton ends the live sequence early; the new one continues in its place
            log.warning("sequence %s for model '%s' has a conflict. The previous sequence did not "
                        "end before this sequence start. Previous sequence will be terminated early.",
                        corr, self._model)
            sequence.epoch += 1
        if end:
            del self._sequences[corr]  # the ID is free: a later START opens a new sequence
            sequence.ending = True
        sequence.last_used_ns = pending.enqueue_ns
        if timeout_us and sequence.slot is None:  # Triton's backlog expiration
            due_ns = pending.enqueue_ns + timeout_us * 1000
            sequence.expires_ns = min(sequence.expires_ns or due_ns, due_ns)
            self._arm(sequence.expires_ns)
        pending.request = replace(pending.request, parameters={
            **params, "_sequence": sequence, "_start": start, "_end": end, "_epoch": sequence.epoch,
            "_admitted": (pending.request.inputs, pending.request.requested_outputs)})
        self._queue.append(pending)

    def _new_id(self) -> int:
        """A correlation ID for an iterative request that has none: the next of the batcher's
        counter (from 1, as Triton's) that no live sequence of this batcher uses."""
        while self._next_id in self._sequences:
            self._next_id += 1
        corr, self._next_id = self._next_id, self._next_id + 1
        return corr

    def reschedule(self, pending: Pending) -> bool:
        """Queue a request the model released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``
        again in its sequence (iterative sequences only; Triton's
        ``IterativeSequencer::RescheduleRequest``): its inputs as the client sent them, with
        neither START nor END, behind what its sequence already queued. False (not taken)
        without ``iterative_sequence`` or when its sequence has ended meanwhile."""
        params = pending.request.parameters
        sequence: Sequence | None = params.get("_sequence")
        if not self._iterative or sequence is None or sequence not in self._live:
            return False
        inputs, outputs = params["_admitted"]
        params.update(_start=False, _end=False, _taken=False)
        pending.request = replace(pending.request, inputs=inputs, requested_outputs=outputs)
        sequence.busy = False
        sequence.last_used_ns = time.monotonic_ns()
        self._queue.append(pending)
        return True

    def _open(self, corr: int | str) -> Sequence:
        sequence = Sequence(corr)
        self._slots.admit(sequence)  # Unavailable when full: the dispatcher counts the rejection
        self._reset_state(sequence)
        self._sequences[corr] = sequence
        self._live.add(sequence)
        return sequence

    def _reset_state(self, sequence: Sequence) -> None:
        sequence.state = {s.input_name: initial_state(s, self._batched) for s in self._states}

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
        """Drop the cancelled requests the last scan met; each ends its sequence, whose other
        queued requests are cancelled (Triton). True when there were some (the scan must be
        done again)."""
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
        for sequence in {id(s): s for s in (p.request.parameters["_sequence"] for p in cancelled)}.values():
            self._close(sequence, reason="CANCELED", error=Cancelled(
                f"inference request for sequence {sequence.correlation_id} to model '{self._model}' "
                "was cancelled: another request of the sequence was cancelled"))
        return bool(cancelled)

    def _take(self, pending: Pending) -> None:
        """Move ``pending`` from the queue into an execution, with its controls and state."""
        self._queue.remove(pending)
        params = pending.request.parameters
        sequence: Sequence = params["_sequence"]
        sequence.busy = True
        if params["_start"] and params["_epoch"]:
            self._reset_state(sequence)  # a restart: the previous sequence's state is gone
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
        """Direct-strategy null rows never were in the queue: not counted as queued."""
        return [p for p in batch if not p.request.parameters.get("_null")]

    def complete(self, pending: Pending, response: BackendResponse,
                 times: ExecutionTimes | None, reason: str) -> tuple[Answer, ...] | None:
        params = pending.request.parameters
        if params.get("_null"):
            return ()  # a direct-strategy null request: nobody waits for it, its outputs are dropped
        sequence: Sequence | None = params.get("_sequence")
        if sequence is not None and params.get("_taken"):
            if response.error is None:
                for state in self._states:
                    if state.output_name in response.outputs:
                        sequence.state[state.input_name] = response.outputs.pop(state.output_name)
            sequence.busy = False
            sequence.last_used_ns = time.monotonic_ns()
            if response.error is not None and params["_start"]:
                self._start_failed(sequence, params["_epoch"])
            elif params["_end"] or self._iterative or (sequence.ending and not self._queued_of(sequence)):
                self._close(sequence)  # an iterative request not rescheduled ends its sequence
            if sequence in self._live:
                self._arm(sequence.last_used_ns + self._idle_ns)
        return None  # answered at once

    def _queued_of(self, sequence: Sequence) -> list[Pending]:
        return [p for p in self._queue if p.request.parameters["_sequence"] is sequence]

    def _start_failed(self, sequence: Sequence, epoch: int) -> None:
        """The START request of ``sequence``'s ``epoch`` failed: fail its requests queued behind
        it (up to a restart), and end the sequence unless a restart is queued."""
        error = InvalidArgument(f"inference request for sequence {sequence.correlation_id} to model "
                                f"'{self._model}' cannot run: the sequence's START request failed")
        failed = [p for p in self._queued_of(sequence) if p.request.parameters["_epoch"] == epoch]
        self._fail(failed, error, "OTHER")
        if not self._queued_of(sequence):
            self._close(sequence)

    def _close(self, sequence: Sequence, reason: str = "OTHER",
               error: WorkbenchError | None = None) -> None:
        """End ``sequence``: free its slot (or backlog place) and fail its requests still
        queued with ``error`` (default: InvalidArgument "the sequence has ended"), counted
        as failures of ``reason``."""
        if sequence not in self._live:
            return
        self._live.discard(sequence)
        if self._sequences.get(sequence.correlation_id) is sequence:
            del self._sequences[sequence.correlation_id]
        slot = sequence.slot
        self._slots.release(sequence)
        if slot is not None:
            self._slot_freed(slot)
        self._sequence_ended(sequence)
        if not self._live and self._retired is not None:
            self._retired.set()
        error = error or InvalidArgument(f"inference request for sequence {sequence.correlation_id} "
                                         f"to model '{self._model}' cannot run: the sequence has ended")
        self._fail(self._queued_of(sequence), error, reason)

    def _fail(self, queued: list[Pending], error: WorkbenchError, reason: str) -> None:
        """Take ``queued`` out of the queue and answer each with ``error``."""
        ids = {id(p) for p in queued}
        if not ids:
            return
        self._queue = deque(p for p in self._queue if id(p) not in ids)
        for pending in queued:
            self.dispatcher.fail_queued(pending, error, reason)

    # ------------------------------------------------------------------ reaper (time limits)
    def _arm(self, due_ns: int) -> None:
        """Run :meth:`_reap` at ``due_ns`` (``time.monotonic_ns()``) unless it is due earlier."""
        if self._reaper is not None:
            if self._reaper_due_ns <= due_ns:
                return
            self._reaper.cancel()
        self._reaper_due_ns = due_ns
        delay_s = max(0.0, (due_ns - time.monotonic_ns()) / 1e9)
        self._reaper = asyncio.get_running_loop().call_later(delay_s, self._reap)

    def _reap(self) -> None:
        """Triton's reaper: fail the backlog sequences whose timeout expired, release the
        sequences idle for ``max_sequence_idle_microseconds``, and wake again when the next
        of either is due."""
        self._reaper = None
        now = time.monotonic_ns()
        queued = {id(p.request.parameters["_sequence"]) for p in self._queue}
        next_due = 0
        for sequence in list(self._live):
            if sequence.slot is None and sequence.expires_ns:
                if sequence.expires_ns <= now:
                    self._close(sequence, reason="REJECTED", error=Unavailable(BACKLOG_TIMEOUT))
                    continue
                next_due = min(next_due or sequence.expires_ns, sequence.expires_ns)
            if sequence.busy or id(sequence) in queued:
                continue  # not idle: its next completion arms the reaper again
            idle_due = sequence.last_used_ns + self._idle_ns
            if idle_due <= now:
                self._close(sequence)
            else:
                next_due = min(next_due or idle_due, idle_due)
        self.dispatcher.dispatch()
        if next_due:
            self._arm(next_due)


def input_shapes(request: BackendRequest, ragged: frozenset[str] = frozenset()
                 ) -> tuple[tuple[str, tuple[int, ...] | None], ...]:
    """``((input name, shape), ...)``: requests batch together only when these are equal.

    The shape of a ``ragged`` input (``allow_ragged_batch``) is left out (None): as in Triton's
    sequence batcher, which enforces equal shapes only for the variable-size inputs that are
    not ragged, requests whose ragged inputs differ share an execution.
    """
    return tuple((name, None if name in ragged else array.shape)
                 for name, array in request.inputs.items())


def _timeout_us(params: Mapping[str, object]) -> int:
    """The request's ``timeout`` parameter (µs; 0 = none).

    Raises:
        InvalidArgument: it is not a non-negative integer.
    """
    timeout = params.get("timeout", 0)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise InvalidArgument("the 'timeout' parameter must be a non-negative integer (microseconds)")
    return timeout


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
