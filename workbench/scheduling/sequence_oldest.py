"""Triton's ``oldest`` sequence batching strategy (``sequence_batching { oldest { ... } }``).

Follows Triton's ``OldestSequenceBatch``: sequences hold one of
``oldest.max_candidate_sequences`` slots (default ``instances x max(1, max_batch_size)``)
shared by all instances; any free instance executes the oldest ready requests of
different slotted sequences. What the strategies share is in
:mod:`workbench.scheduling.sequence_batcher`.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.scheduling.base import InstanceRunner, Pending
from workbench.scheduling.sequence_batcher import SequenceBatcher, input_shapes
from workbench.scheduling.sequence_slots import Sequence


class OldestSequenceBatcher(SequenceBatcher):
    """Triton's ``oldest`` strategy: any free instance takes the oldest ready request of
    up to ``max_batch_size`` different slotted sequences (same input shapes).

    ``oldest.max_candidate_sequences`` sequences hold a slot at once (default
    ``instances x max(1, max_batch_size)``); the others wait in the backlog.
    """

    def _slot_layout(self, config: ModelConfig, instances: int) -> tuple[int, int]:
        candidates = config.sequence_batching.oldest.max_candidate_sequences
        return 1, candidates or instances * max(1, config.max_batch_size)

    def _next_batch(self, runner: InstanceRunner) -> list[Pending]:
        self._prune()
        batch: list[Pending] = []
        chosen: set[int] = set()
        shape = None
        for pending in self._queue:
            sequence: Sequence = pending.request.parameters["_sequence"]
            if sequence.busy or sequence.slot is None or id(sequence) in chosen:
                chosen.add(id(sequence))  # later requests of it must wait their turn
                continue
            key = input_shapes(pending.request)
            if shape is not None and key != shape:
                continue
            shape = key
            chosen.add(id(sequence))
            batch.append(pending)
            if len(batch) == self._max_batch_size:
                break
        for pending in batch:
            self._take(pending)
        return batch


__all__ = ["OldestSequenceBatcher"]
