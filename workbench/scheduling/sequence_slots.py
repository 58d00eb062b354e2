"""Sequence slots: which live sequence holds which batch slot, and who waits for one.

Follows Triton's sequence batch scheduler (core ``sequence_batch_scheduler.cc``): every
model instance has a fixed number of sequence slots; a new sequence takes a free slot,
lowest slot index first (then lowest instance), as Triton's ``ready_batcher_seq_slots_``
queue hands them out, and keeps it until it ends, its START request fails, or it goes
idle. A released slot goes straight to the oldest sequence of the backlog (Triton's
``ReleaseSequenceSlot``). Triton's backlog is unbounded, and so is this one by default;
the model config parameter ``max_sequence_backlog`` (a workbench extension) bounds it,
and a new sequence that finds the slots and the backlog full is rejected with
:class:`~workbench.common.errors.Unavailable` (HTTP 503 / gRPC UNAVAILABLE).

Slots come and go with the instances (an instance update, Triton's
``SequenceBatchScheduler::Update``): added slots go to the backlog first; a removed slot that
is free is erased at once, one that is held is erased when its sequence ends (never handed
to the backlog), so the sequence finishes where its state is.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from workbench.common.errors import Unavailable


@dataclass(slots=True, eq=False)
class Sequence:
    """One live sequence.

    Attributes:
        correlation_id: the request parameter ``sequence_id`` (non-zero uint64 or string).
        state: implicit state input name -> its current value (``[1] + dims`` when the
            model batches).
        busy: a request of this sequence is executing.
        slot: ``(slot group, slot index)`` it holds (group = instance index for the
            ``direct`` strategy, always 0 for ``oldest``), or None while in the backlog.
        ending: its END request has been queued (or it must end once its queued requests
            have run); its correlation ID is free for a new sequence.
        last_used_ns: ``time.monotonic_ns()`` of its last request (idle release).
        epoch: how many times a START restarted it while live (Triton's early termination
            of the previous sequence); each queued request remembers the epoch it joined.
        expires_ns: while in the backlog, when it times out (the earliest ``timeout`` of
            its requests; 0 = never).
        owner: ``oldest`` only: ``id()`` of the instance runner whose candidate slots Triton
            would have given it (set when its first request is taken; None before).
    """

    correlation_id: int | str
    state: dict[str, np.ndarray] = field(default_factory=dict)
    busy: bool = False
    slot: tuple[int, int] | None = None
    ending: bool = False
    last_used_ns: int = 0
    epoch: int = 0
    expires_ns: int = 0
    owner: int | None = None


class SlotTable:
    """Free slots, their holders and the backlog of sequences waiting for a slot.

    Args:
        groups: slot groups (model instances for ``direct``; 1 for ``oldest``).
        per_group: slots in each group (``max(1, max_batch_size)`` for ``direct``).
        backlog_limit: how many sequences may wait for a slot; None = unbounded (Triton).
        model: the model name, for error messages.
    """

    def __init__(self, groups: int, per_group: int, backlog_limit: int | None, model: str) -> None:
        self.size = groups * per_group
        self._free = [(index, group) for index in range(per_group) for group in range(groups)]
        heapq.heapify(self._free)
        #: removed slots still held by a live sequence: erased when it ends
        self._doomed: set[tuple[int, int]] = set()
        self._backlog: deque[Sequence] = deque()
        self._limit = backlog_limit
        self._model = model

    def admit(self, sequence: Sequence) -> None:
        """Give a new ``sequence`` a free slot, or put it at the end of the backlog.

        Raises:
            Unavailable: no free slot and the backlog already holds ``backlog_limit``
                sequences (nothing changes).
        """
        if self._free:
            index, group = heapq.heappop(self._free)
            sequence.slot = (group, index)
        elif self._limit is not None and len(self._backlog) >= self._limit:
            raise Unavailable(
                f"inference request for sequence {sequence.correlation_id} to model "
                f"'{self._model}' rejected: all {self.size} sequence slots are in use and the "
                f"sequence backlog (max_sequence_backlog {self._limit}) is full"
            )
        else:
            self._backlog.append(sequence)

    def release(self, sequence: Sequence) -> Sequence | None:
        """Free the slot of a sequence that ended (or drop it from the backlog).

        Returns:
            The backlog sequence that now holds the freed slot, if any.
        """
        if sequence.slot is None:
            if sequence in self._backlog:
                self._backlog.remove(sequence)
            return None
        slot, sequence.slot = sequence.slot, None
        if slot in self._doomed:  # a removed slot: erased, not handed on
            self._doomed.discard(slot)
            return None
        if self._backlog:
            waiting = self._backlog.popleft()
            waiting.slot = slot
            return waiting
        heapq.heappush(self._free, (slot[1], slot[0]))
        return None

    def add_slots(self, slots: Iterable[tuple[int, int]]) -> list[Sequence]:
        """Add ``(group, index)`` slots (a removed slot still held is simply kept); each goes
        to the oldest backlog sequence first. Returns the sequences that got a slot."""
        placed = []
        for slot in slots:
            self.size += 1
            if slot in self._doomed:
                self._doomed.discard(slot)
            elif self._backlog:
                waiting = self._backlog.popleft()
                waiting.slot = slot
                placed.append(waiting)
            else:
                heapq.heappush(self._free, (slot[1], slot[0]))
        return placed

    def remove_slots(self, slots: Iterable[tuple[int, int]]) -> None:
        """Remove ``(group, index)`` slots: free ones at once, held ones when their sequence
        ends (:meth:`release`); no new sequence gets any of them."""
        wanted = set(slots)
        free = {(group, index) for index, group in self._free}
        self.size -= len(wanted)
        self._doomed |= wanted - free
        self._free = [(index, group) for index, group in self._free if (group, index) not in wanted]
        heapq.heapify(self._free)

    def holds(self, group: int) -> bool:
        """True while a removed slot of ``group`` is still held by a live sequence."""
        return any(g == group for g, _ in self._doomed)


__all__ = ["Sequence", "SlotTable"]
