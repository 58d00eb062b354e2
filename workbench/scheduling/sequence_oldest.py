"""Triton's ``oldest`` sequence batching strategy (``sequence_batching { oldest { ... } }``).

Follows Triton's ``OldestSequenceBatch``: sequences hold one of
``oldest.max_candidate_sequences`` slots (default ``instances x max(1, max_batch_size)``)
shared by all instances; any free instance executes the oldest ready requests of
different slotted sequences. ``oldest.max_queue_delay_microseconds`` (µs) lets a free
instance wait, counted from the oldest ready request, for the batch to reach
``max_batch_size`` or the largest ``oldest.preferred_batch_size``; when the delay runs
out the batch is cut to the largest preferred size it reaches (as the dynamic batcher
does). The wait is a ``loop.call_later`` timer, never a block. What the strategies
share is in :mod:`workbench.scheduling.sequence_batcher`.

Instance update: the sequences' state lives in the batcher, not on an instance, so removed
instances leave at once (after their execution) and every sequence goes on on the others;
without an explicit ``max_candidate_sequences`` the candidate slots follow the instance count.
"""

from __future__ import annotations

import time

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
        """Resize the candidate slots when they follow the instance count; keeps no instance."""
        if self._following:
            count = len(self.dispatcher.runners) - len(removed)
            wanted = count * self._max_batch_size
            if wanted > self._following:
                self._slots.add_slots((0, index) for index in range(self._following, wanted))
            else:
                self._slots.remove_slots((0, index) for index in range(wanted, self._following))
            self._following = wanted
        return []

    def _configure(self, config: ModelConfig) -> None:
        oldest = config.sequence_batching.oldest
        self._delay_ns = int(oldest.max_queue_delay_microseconds) * 1000
        self._preferred = sorted(
            int(p) for p in oldest.preferred_batch_size if 0 < p <= self._max_batch_size
        )

    def next_batch(self, runner: InstanceRunner) -> list[Pending]:
        if self._holding():
            return []
        batch = self._candidates()
        if self._drop_skipped():  # the scan met cancelled requests: scan what is left
            batch = self._candidates()
        if batch and self._delay_ns and not self.dispatcher.stopping:
            full = self._preferred[-1] if self._preferred else self._max_batch_size
            due_ns = min(p.enqueue_ns for p in batch) + self._delay_ns
            if len(batch) < full and time.monotonic_ns() < due_ns:
                self.dispatcher.dispatch_at(due_ns)
                return []
            batch = self._cut_to_preferred(batch)
        for pending in batch:
            self._take(pending)
        return batch

    def _cut_to_preferred(self, batch: list[Pending]) -> list[Pending]:
        """The batch cut to the largest preferred size it reaches (all of it without one)."""
        fitting = [p for p in self._preferred if p <= len(batch)]
        return batch[: fitting[-1]] if fitting else batch

    def _candidates(self) -> list[Pending]:
        """The oldest ready request of up to ``max_batch_size`` different slotted sequences
        with the same input shapes, in queue order (not yet taken); cancelled requests met
        on the way are skipped (:meth:`_drop_skipped` drops them)."""
        batch: list[Pending] = []
        chosen: set[int] = set()
        shape = None
        for pending in self._queue:
            if self._skipped(pending):
                continue
            sequence: Sequence = pending.request.parameters["_sequence"]
            if sequence.busy or sequence.slot is None or id(sequence) in chosen:
                chosen.add(id(sequence))  # later requests of it must wait their turn
                continue
            key = input_shapes(pending.request, self._ragged)
            if shape is not None and key != shape:
                continue
            shape = key
            chosen.add(id(sequence))
            batch.append(pending)
            if len(batch) == self._max_batch_size:
                break
        return batch


__all__ = ["OldestSequenceBatcher"]
