"""Triton's sequence batcher for stateful models (``sequence_batching { ... }``).

Requests carry a correlation ID (``sequence_id``: non-zero uint64 or non-empty
string) and the ``sequence_start`` / ``sequence_end`` flags. Requests of one
sequence execute one at a time, in arrival order; requests of different
sequences share executions (up to ``max_batch_size``, oldest first, as the
``oldest`` strategy does). Each execution receives the configured control
tensors and the sequence's implicit state, whose new value is read back from the
state output. At most ``instances x max(1, max_batch_size)`` sequences hold a
slot (``oldest.max_candidate_sequences`` when given); further sequences wait in
a backlog until a slot frees, as in Triton. A sequence idle for
``max_sequence_idle_microseconds`` is released; a later request for it without
START is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, BackendResponse, ModelInstance
from workbench.errors import InvalidArgument
from workbench.scheduling.base import Pending
from workbench.scheduling.direct import DirectScheduler
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.scheduling.sequence_controls import (
    control_tensors,
    control_values,
    initial_state,
    state_tensors,
)
from workbench.statistics import ModelStatistics


@dataclass(slots=True)
class Sequence:
    """One live sequence: its implicit state, whether a request of it is executing,
    whether it holds a slot, and when it was last used (``time.monotonic_ns``)."""

    correlation_id: int | str
    state: dict[str, np.ndarray] = field(default_factory=dict)
    busy: bool = False
    slotted: bool = False
    ending: bool = False
    last_used_ns: int = 0


class SequenceBatcher(DirectScheduler):
    """Sequence-aware queue in front of the model's instances.

    Args:
        instances, statistics, rate_limiter: as for :class:`DirectScheduler`.
        config: the model config (``sequence_batching``, ``max_batch_size``, name).
    """

    def __init__(
        self,
        instances: list[ModelInstance],
        statistics: ModelStatistics,
        config: ModelConfig,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        super().__init__(instances, statistics, rate_limiter)
        batching = config.sequence_batching
        self._model = config.name
        self._max_batch_size = max(1, config.max_batch_size)
        self._batched = config.max_batch_size > 0
        self._controls = control_tensors(batching)
        self._states = state_tensors(batching)
        candidates = batching.oldest.max_candidate_sequences if batching.HasField("oldest") else 0
        self._slots = candidates or len(instances) * self._max_batch_size
        self._idle_ns = int(batching.max_sequence_idle_microseconds or 1_000_000) * 1000
        self._sequences: dict[int | str, Sequence] = {}
        self._backlog: deque[Sequence] = deque()
        self._idle_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ admission
    def _admit(self, pending: Pending) -> None:
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
            sequence = self._open(corr)
        sequence.ending = sequence.ending or end
        sequence.last_used_ns = pending.enqueue_ns
        pending.request = BackendRequest(pending.request.inputs, pending.request.requested_outputs,
                                         {**params, "_sequence": sequence, "_start": start, "_end": end})
        self._queue.append(pending)

    def _open(self, corr: int | str) -> Sequence:
        sequence = Sequence(corr)
        for state in self._states:
            sequence.state[state.input_name] = initial_state(state, self._batched)
        self._sequences[corr] = sequence
        if sum(s.slotted for s in self._sequences.values()) < self._slots:
            sequence.slotted = True
        else:
            self._backlog.append(sequence)
        self._watch_idle()
        return sequence

    # ------------------------------------------------------------------ batch forming
    def _next_batch(self) -> list[Pending]:
        batch: list[Pending] = []
        chosen: set[int] = set()
        shape = None
        for pending in list(self._queue):
            if pending.future.done():
                self._queue.remove(pending)
                self._release_if_done(pending)
                self._drop(pending)
                continue
            sequence: Sequence = pending.request.parameters["_sequence"]
            if sequence.busy or not sequence.slotted or id(sequence) in chosen:
                chosen.add(id(sequence))  # later requests of it must wait their turn
                continue
            key = tuple((n, a.shape) for n, a in pending.request.inputs.items())
            if shape is not None and key != shape:
                continue
            shape = key
            chosen.add(id(sequence))
            batch.append(pending)
            if len(batch) == self._max_batch_size:
                break
        for pending in batch:
            self._queue.remove(pending)
            pending.request.parameters["_sequence"].busy = True
            pending.request = self._with_controls(pending.request)
        return batch

    def _with_controls(self, request: BackendRequest) -> BackendRequest:
        params = request.parameters
        sequence: Sequence = params["_sequence"]
        inputs = dict(request.inputs)
        inputs.update(control_values(self._controls, start=params["_start"], end=params["_end"],
                                     correlation_id=sequence.correlation_id, batched=self._batched))
        inputs.update(sequence.state)
        wanted = tuple(request.requested_outputs) + tuple(s.output_name for s in self._states)
        return BackendRequest(inputs, wanted, params)

    # ------------------------------------------------------------------ completion
    def _complete(self, pending: Pending, response: BackendResponse, times, reason: str = "BACKEND") -> None:
        params = pending.request.parameters
        sequence: Sequence | None = params.get("_sequence")
        if sequence is not None and response.error is None and times is not None:
            for state in self._states:
                if state.output_name in response.outputs:
                    sequence.state[state.input_name] = response.outputs.pop(state.output_name)
        if sequence is not None:
            sequence.busy = False
            sequence.last_used_ns = time.monotonic_ns()
            if params.get("_end") or response.error is not None and params.get("_start"):
                self._close(sequence)
        super()._complete(pending, response, times, reason)

    def _release_if_done(self, pending: Pending) -> None:
        sequence = pending.request.parameters.get("_sequence")
        if sequence is not None and pending.request.parameters.get("_end"):
            self._close(sequence)

    def _close(self, sequence: Sequence) -> None:
        if self._sequences.get(sequence.correlation_id) is not sequence:
            return
        del self._sequences[sequence.correlation_id]
        if sequence.slotted:
            while self._backlog:
                waiting = self._backlog.popleft()
                if self._sequences.get(waiting.correlation_id) is waiting:
                    waiting.slotted = True
                    break

    # ------------------------------------------------------------------ idle sequences
    def _watch_idle(self) -> None:
        if self._idle_timer is None:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self._idle_ns / 1e9, self._release_idle)

    def _release_idle(self) -> None:
        self._idle_timer = None
        now = time.monotonic_ns()
        queued = {id(p.request.parameters.get("_sequence")) for p in self._queue}
        for sequence in list(self._sequences.values()):
            if not sequence.busy and id(sequence) not in queued and now - sequence.last_used_ns >= self._idle_ns:
                self._close(sequence)
        self._dispatch()
        if self._sequences:
            self._watch_idle()


def _correlation_id(params: dict, model: str) -> int | str:
    corr = params.get("sequence_id", 0)
    if isinstance(corr, bool) or not isinstance(corr, (int, str)) or corr in (0, "") or (
        isinstance(corr, int) and not 0 < corr < 2**64
    ):
        raise InvalidArgument(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    return corr
