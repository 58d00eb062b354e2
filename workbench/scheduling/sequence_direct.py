"""Triton's ``direct`` sequence batching strategy (the default one).

Follows Triton's ``DirectSequenceBatch`` (core ``sequence_batch_scheduler.cc``) and
``sequence_batching { direct { max_queue_delay_microseconds minimum_slot_utilization } }``:

- every model instance has ``max(1, max_batch_size)`` batch slots; a new sequence gets a
  free slot ``(instance, slot index)`` and keeps it for its whole life, so all its
  requests execute on that instance, at that row of the batch;
- an execution on an instance takes the next request of each of its slots whose
  sequence has one ready; its batch size is the highest such slot index + 1, and the
  slots in between get a *null request*: the inputs of the first ready request as
  zeros, START / END / READY false, CORRID 0, implicit state zeros shaped like that
  request's state (Triton's dummy state). Null responses and state outputs are
  dropped; the state of the sequence holding such a slot is left untouched;
- a slot whose request has other input shapes than the first one waits (null row); the
  shapes of ``allow_ragged_batch`` inputs are not compared (Triton's ragged batching);
- when ``minimum_slot_utilization`` > 0 and ``max_queue_delay_microseconds`` > 0, an
  instance whose ready slots are fewer than ``minimum_slot_utilization x slots`` waits up
  to ``max_queue_delay_microseconds`` (counted from its oldest ready request) for more
  before it executes. The wait is a ``loop.call_later`` timer, never a block.

Instance update: an added instance brings its slots (backlog sequences take them first); a
removed one takes no new sequence, keeps executing the live sequences of its slots, and
leaves (then unloads) when the last of them ends, as Triton's ``SequenceBatchScheduler``
erases a removed instance's slots as they are released.

Statistics as Triton's: ``inference_count`` counts only the real requests (a null request
collects no statistics: core ``InferenceRequest::CopyAsNull``), while the ``batch_stats`` entry
of an execution has the batch size the backend got, null rows included (an execution of slot 2
alone is a batch of 3), as Triton's backends report it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest
from workbench.scheduling.base import InstanceRunner, Pending, PolicyHost
from workbench.scheduling.sequence_batcher import SequenceBatcher, input_shapes
from workbench.scheduling.sequence_controls import control_values
from workbench.scheduling.sequence_slots import Sequence


class DirectSequenceBatcher(SequenceBatcher):
    """The sequence batcher with Triton's ``direct`` strategy (see the module docstring).

    Args:
        config, instances: as for :class:`SequenceBatcher`;
            ``config.sequence_batching.direct`` gives ``max_queue_delay_microseconds``
            (µs, default 0) and ``minimum_slot_utilization`` (0..1, default 0 = run as soon
            as one slot is ready; the delay is ignored then, as in Triton).
    """

    _backlog_hook = True

    def _configure(self, config: ModelConfig) -> None:
        direct = config.sequence_batching.direct
        self._delay_ns = int(direct.max_queue_delay_microseconds) * 1000
        self._utilization = float(direct.minimum_slot_utilization)
        #: slot group of each instance, by ``id()`` of its runner (filled by :meth:`bind`)
        self._instance_of: dict[int, int] = {}
        self._due: set[int] = set()  # ids of the idle runners that may execute now
        #: slot group of each removed instance still holding live sequences -> its runner
        self._leaving: dict[int, InstanceRunner] = {}

    def bind(self, dispatcher: PolicyHost) -> None:
        """The dispatcher's instances, in order, own slot groups 0, 1, ..."""
        super().bind(dispatcher)
        self._instance_of = {id(r): i for i, r in enumerate(dispatcher.runners)}

    def instances_changed(self, added: list[InstanceRunner],
                          removed: list[InstanceRunner]) -> list[InstanceRunner]:
        """Added instances get new slot groups; removed ones lose their slots (held ones
        when their sequence ends) and are kept while a live sequence holds one."""
        for runner in added:
            group = max(self._instance_of.values(), default=-1) + 1
            self._instance_of[id(runner)] = group
            self._slots.add_slots((group, index) for index in range(self._max_batch_size))
        held = []
        for runner in removed:
            group = self._instance_of[id(runner)]
            self._slots.remove_slots((group, index) for index in range(self._max_batch_size))
            if self._slots.holds(group):
                self._leaving[group] = runner
                held.append(runner)
            else:
                del self._instance_of[id(runner)]
        return held

    def _slot_freed(self, slot: tuple[int, int]) -> None:
        group = slot[0]
        if group in self._leaving and not self._slots.holds(group):
            runner = self._leaving.pop(group)
            del self._instance_of[id(runner)]
            self.dispatcher.release_runner(runner)

    def _slot_layout(self, config: ModelConfig, instances: int) -> tuple[int, int]:
        return instances, self._max_batch_size

    # ------------------------------------------------------------------ which instance runs
    def _ready_rows(self, instance: int) -> dict[int, Pending]:
        """Slot index -> the next request of the sequence in that slot of ``instance``, for
        the slots whose sequence has one queued and none executing."""
        rows: dict[int, Pending] = {}
        seen: set[int] = set()
        for pending in self._queue:
            if self._skipped(pending):
                continue
            sequence: Sequence = pending.request.parameters["_sequence"]
            if id(sequence) in seen:
                continue  # only a sequence's oldest queued request may run
            seen.add(id(sequence))
            if sequence.slot is not None and sequence.slot[0] == instance and not sequence.busy:
                rows[sequence.slot[1]] = pending
        return rows

    def _wait_ns(self, rows: dict[int, Pending], now_ns: int) -> int:
        """Nanoseconds the instance should still wait for more ready slots (<= 0: run now)."""
        if self.dispatcher.stopping or not self._delay_ns or not self._utilization:
            return 0
        if len(rows) / self._max_batch_size >= self._utilization:
            return 0
        return min(p.enqueue_ns for p in rows.values()) + self._delay_ns - now_ns

    def free_runner(self, idle: deque[InstanceRunner]) -> InstanceRunner | None:
        """An idle instance with slots ready to run now whose rate-limiter resources are
        free; an idle one with nothing to run (``next_batch`` then returns []) when no
        instance may run yet, after setting a timer for the earliest delay to expire."""
        if self._holding():
            self._due = set()
            return idle[0]
        rows_of = {id(r): self._ready_rows(self._instance_of[id(r)]) for r in idle}
        if self._drop_skipped():  # the scans met cancelled requests: scan what is left
            rows_of = {id(r): self._ready_rows(self._instance_of[id(r)]) for r in idle}
        now, due, wake = time.monotonic_ns(), [], 0
        for runner in idle:
            rows = rows_of[id(runner)]
            wait = self._wait_ns(rows, now) if rows else None
            if wait is not None and wait <= 0:
                due.append(runner)
            elif wait is not None:
                wake = min(wake or wait, wait)
        self._due = {id(r) for r in due}
        if wake:
            self.dispatcher.dispatch_at(now + wake)
        if not due:
            return idle[0]
        return self.dispatcher.first_free(due)

    # ------------------------------------------------------------------ batch forming
    def next_batch(self, runner: InstanceRunner) -> list[Pending]:
        if id(runner) not in self._due:
            return []  # nothing of this instance may run yet
        rows = self._ready_rows(self._instance_of[id(runner)])
        if not rows:
            return []
        first = rows[min(rows)].request
        shape = input_shapes(first, self._ragged)
        rows = {slot: p for slot, p in rows.items() if input_shapes(p.request, self._ragged) == shape}
        null = self._null_request(first)
        loop = asyncio.get_running_loop()
        batch = []
        for slot in range(max(rows) + 1):
            pending = rows.get(slot)
            if pending is None:
                batch.append(Pending(null, loop.create_future(), 0, 0))  # no one awaits it
            else:
                self._take(pending)
                batch.append(pending)
        return batch

    def _null_request(self, template: BackendRequest) -> BackendRequest:
        """A not-ready row shaped like ``template`` (a queued request, before its controls)."""
        inputs = {name: _zeros_like(array) for name, array in template.inputs.items()}
        inputs.update(control_values(self._controls, start=False, end=False, correlation_id=0,
                                     batched=self._batched, ready=False))
        sequence: Sequence = template.parameters["_sequence"]
        inputs.update({name: _zeros_like(array) for name, array in sequence.state.items()})
        return BackendRequest(inputs, self._wanted(template), {"_null": True})


def _zeros_like(array: np.ndarray) -> np.ndarray:
    """Zeros (empty bytes for BYTES tensors) of ``array``'s shape and dtype."""
    if array.dtype == np.object_:
        return np.full(array.shape, b"", dtype=object)
    return np.zeros_like(array)


__all__ = ["DirectSequenceBatcher"]
