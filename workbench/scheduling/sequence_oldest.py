"""Triton's ``oldest`` sequence batching strategy (``sequence_batching { oldest { ... } }``).

Follows Triton's ``OldestSequenceBatch``: sequences hold one of
``oldest.max_candidate_sequences`` slots (default ``instances x max(1, max_batch_size)``,
following the instance count) shared by all instances; any free instance executes the oldest
ready requests of different slotted sequences. Batches are decided as the dynamic batcher
decides them (Triton runs ``oldest`` through a ``DynamicBatchScheduler``;
:mod:`workbench.scheduling.dynamic_batcher`) with ``oldest``'s preferred sizes (empty =
``[max_batch_size]``) and ``max_queue_delay_microseconds`` (µs, from the oldest ready
request; a ``loop.call_later`` timer). Shared parts: :mod:`workbench.scheduling.sequence_batcher`.

Instance update: Triton runs one ``OldestSequenceBatch`` per instance and gives a new
sequence slot 0 of every instance before any slot 1, so a removed instance executes its live
sequences until they end (``SequenceBatchScheduler::Update``). Here the slots are shared, so
each sequence is given, at its first request, the instance Triton would have put it on (the
fewest live sequences, lowest index first:
:attr:`~workbench.scheduling.sequence_slots.Sequence.owner`), which matters only once that
instance is removed. Docs: docs/scheduling.md (``sequence_batching``) and
docs/model-control.md (instance updates)."""

from __future__ import annotations

import time
from collections import deque

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.scheduling.base import InstanceRunner, Pending
from workbench.scheduling.sequence_batcher import SequenceBatcher, input_shapes
from workbench.scheduling.sequence_slots import Sequence


class OldestSequenceBatcher(SequenceBatcher):
    """Triton's ``oldest`` strategy: any free instance takes the oldest ready request of
    up to ``max_batch_size`` different slotted sequences (same input shapes, ragged
    inputs aside).

    ``oldest.max_candidate_sequences`` sequences hold a slot at once (default
    ``instances x max(1, max_batch_size)``); the others wait in the backlog.
    """

    def _slot_layout(self, config: ModelConfig, instances: int) -> tuple[int, int]:
        candidates = config.sequence_batching.oldest.max_candidate_sequences
        #: candidate slots now, when they follow the instance count (0: fixed by the config)
        self._following = 0 if candidates else instances * max(1, config.max_batch_size)
        return 1, candidates or self._following

    def instances_changed(self, added: list[InstanceRunner],
                          removed: list[InstanceRunner]) -> list[InstanceRunner]:
        """Resize the candidate slots when they follow the instance count; returns the removed
        instances that own live sequences (kept until those end: :meth:`_sequence_ended`)."""
        owners = {s.owner for s in self._live}
        held = [r for r in removed if id(r) in owners]
        self._leaving.update((id(r), r) for r in held)
        if self._following:
            count = len(self.dispatcher.runners) - len(removed) - len(
                [i for i in self._leaving if all(i != id(r) for r in removed)])
            wanted = count * self._max_batch_size
            if wanted > self._following:
                self._slots.add_slots((0, index) for index in range(self._following, wanted))
            else:
                self._slots.remove_slots((0, index) for index in range(wanted, self._following))
            self._following = wanted
        return held

    def _sequence_ended(self, sequence: Sequence) -> None:
        """The last live sequence of a removed instance ended: it leaves now."""
        owner = sequence.owner
        if owner in self._leaving and all(s.owner != owner for s in self._live):
            self.dispatcher.release_runner(self._leaving.pop(owner))

    def _owner_for(self) -> int:
        """``id()`` of the serving instance owning the fewest live sequences (lowest index
        first): the one whose candidate slot Triton hands out next."""
        owned: dict[int, int] = {}
        for sequence in self._live:
            if sequence.owner is not None:
                owned[sequence.owner] = owned.get(sequence.owner, 0) + 1
        serving = [r for r in self.dispatcher.runners if id(r) not in self._leaving]
        return id(min(serving, key=lambda r: owned.get(id(r), 0)))

    def free_runner(self, idle: deque[InstanceRunner]) -> InstanceRunner | None:
        """As the base class, but while removed instances still execute their sequences, an
        idle one with a request of its own ready goes first, and the others get the rest."""
        if not self._leaving:
            return super().free_runner(idle)
        ready = {p.request.parameters["_sequence"].owner for p in self._queue
                 if not p.future.done() and not p.request.parameters["_sequence"].busy}
        mine = [r for r in idle if id(r) in self._leaving and id(r) in ready]
        serving = [r for r in idle if id(r) not in self._leaving]
        if mine:
            return self.dispatcher.first_free(mine)
        return self.dispatcher.first_free(serving) if serving else idle[0]

    def _configure(self, config: ModelConfig) -> None:
        oldest = config.sequence_batching.oldest
        #: removed instances executing the live sequences they own, by ``id()``
        self._leaving: dict[int, InstanceRunner] = {}
        self._delay_ns = int(oldest.max_queue_delay_microseconds) * 1000
        self._preferred = sorted(
            {int(p) for p in oldest.preferred_batch_size if 0 < p <= self._max_batch_size}
        ) or [self._max_batch_size]

    def next_batch(self, runner: InstanceRunner) -> list[Pending]:
        if self._holding():
            return []
        batch, closed = self._candidates(runner)
        if self._drop_skipped():  # the scan met cancelled requests: scan what is left
            batch, closed = self._candidates(runner)
        if not batch:
            return []
        cut = max((p for p in self._preferred if p <= len(batch)), default=0)
        due_ns = min(p.enqueue_ns for p in batch) + self._delay_ns
        expired = bool(self._delay_ns) and time.monotonic_ns() >= due_ns
        if cut and not expired:
            batch = batch[:cut]
        elif not (closed or len(batch) >= self._preferred[-1] or expired or not self._delay_ns
                  or self.dispatcher.stopping):
            self.dispatcher.dispatch_at(due_ns)
            return []
        for pending in batch:
            sequence: Sequence = pending.request.parameters["_sequence"]
            if sequence.owner is None:
                sequence.owner = self._owner_for()
            self._take(pending)
        return batch

    def _candidates(self, runner: InstanceRunner) -> tuple[list[Pending], bool]:
        """The oldest ready request of up to ``max_batch_size`` different slotted sequences
        with the same input shapes, in queue order (not yet taken), and ``closed``: a ready
        request of another sequence has other shapes (Triton sends the batch then); cancelled
        requests met on the way are skipped (:meth:`_drop_skipped` drops them). A removed
        ``runner`` takes only the sequences it owns, and the others none of those."""
        batch: list[Pending] = []
        chosen: set[int] = set()
        shape = None
        closed = False
        leaving = id(runner) in self._leaving
        for pending in self._queue:
            if self._skipped(pending):
                continue
            sequence: Sequence = pending.request.parameters["_sequence"]
            if self._leaving and (sequence.owner != id(runner) if leaving else sequence.owner in self._leaving):
                continue
            if sequence.busy or sequence.slot is None or id(sequence) in chosen:
                chosen.add(id(sequence))  # later requests of it must wait their turn
                continue
            key = input_shapes(pending.request, self._ragged)
            if shape is not None and key != shape:
                closed = True
                continue
            shape = key
            chosen.add(id(sequence))
            batch.append(pending)
            if len(batch) == self._max_batch_size:
                break
        return batch, closed


__all__ = ["OldestSequenceBatcher"]
