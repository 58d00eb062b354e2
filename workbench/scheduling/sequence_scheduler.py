"""The scheduler of a model with ``sequence_batching``: a dispatcher given a sequence batcher.

:class:`SequenceDispatcher` is a :class:`~workbench.scheduling.dispatcher.Dispatcher` (instances,
counts, statistics) whose batch policy is a
:class:`~workbench.scheduling.sequence_batcher.SequenceBatcher` (``direct`` or ``oldest``); it is
also a :class:`~workbench.scheduling.base.SequenceScheduler`, passing those calls (which
sequences are live, retirement after a reload) on to its batcher. One way: the batcher calls
back only :class:`~workbench.scheduling.base.PolicyHost`.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ModelInstance
from workbench.scheduling.dispatcher import Dispatcher
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.scheduling.sequence_batcher import SequenceBatcher
from workbench.scheduling.sequence_direct import DirectSequenceBatcher
from workbench.scheduling.sequence_oldest import OldestSequenceBatcher
from workbench.statistics import ModelStatistics


class SequenceDispatcher(Dispatcher):
    """A dispatcher driving a sequence batcher, and the engine's
    :class:`~workbench.scheduling.base.SequenceScheduler` for it.

    Args:
        instances, statistics, rate_limiter: as for :class:`~workbench.scheduling.dispatcher.Dispatcher`.
        batcher: the batch policy (built for ``len(instances)`` instances).
    """

    def __init__(self, instances: list[ModelInstance], statistics: ModelStatistics,
                 rate_limiter: RateLimiter | None, batcher: SequenceBatcher) -> None:
        super().__init__(instances, statistics, rate_limiter, batcher)
        self._batcher = batcher

    def holds_sequence(self, correlation_id: int | str) -> bool:
        return self._batcher.holds_sequence(correlation_id)

    def live_sequences(self) -> int:
        return self._batcher.live_sequences()

    def end_sequence(self, correlation_id: int | str) -> None:
        self._batcher.end_sequence(correlation_id)

    async def retire(self) -> None:
        await self._batcher.retire()

    def end_retirement(self) -> None:
        self._batcher.end_retirement()

    async def stop(self) -> None:
        """Retirement ends (the live sequences are not waited for any more), queued and
        executing requests finish, the instances unload, then the batcher's timers stop."""
        self._batcher.end_retirement()
        await super().stop()
        self._batcher.cancel_timers()


def sequence_scheduler(
    instances: list[ModelInstance],
    statistics: ModelStatistics,
    config: ModelConfig,
    rate_limiter: RateLimiter | None = None,
) -> SequenceDispatcher:
    """Triton's sequence batcher over ``instances``: the ``direct`` strategy
    (:class:`~workbench.scheduling.sequence_direct.DirectSequenceBatcher`), or ``oldest``
    (:class:`~workbench.scheduling.sequence_oldest.OldestSequenceBatcher`) when
    ``config.sequence_batching`` has ``oldest { }``."""
    oldest = config.sequence_batching.HasField("oldest")
    batcher = (OldestSequenceBatcher if oldest else DirectSequenceBatcher)(config, len(instances))
    return SequenceDispatcher(instances, statistics, rate_limiter, batcher)


__all__ = ["SequenceDispatcher", "sequence_scheduler"]
