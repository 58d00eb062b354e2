"""Pick a model's scheduler from its config's ``scheduling_choice`` (Triton's rule)."""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ModelInstance
from workbench.scheduling.base import Scheduler
from workbench.scheduling.direct import direct_scheduler
from workbench.scheduling.dynamic_batcher import dynamic_batcher
from workbench.scheduling.ensemble import EnsembleScheduler, StepInfer
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.scheduling.sequence_scheduler import sequence_scheduler
from workbench.statistics import ModelStatistics


def make_scheduler(
    config: ModelConfig,
    instances: list[ModelInstance],
    statistics: ModelStatistics,
    rate_limiter: RateLimiter | None = None,
    step_infer: StepInfer | None = None,
) -> Scheduler:
    """``ensemble_scheduling`` -> :class:`EnsembleScheduler` (no instances; its steps reach
    the composing models through the engine's ``step_infer``);
    ``sequence_batching`` -> :func:`sequence_scheduler` (a dispatcher given the ``direct``
    sequence batcher, or ``oldest`` with ``oldest { }``); ``dynamic_batching`` with
    ``max_batch_size > 0`` -> :func:`dynamic_batcher`; otherwise the default
    one-request-per-execution :func:`direct_scheduler` (each a
    :class:`~workbench.scheduling.dispatcher.Dispatcher` given a batch policy). Every scheduler shares the server's
    ``rate_limiter`` (None when rate limiting is off).

    Raises:
        ValueError: an ensemble config without ``step_infer``.
    """
    if config.HasField("ensemble_scheduling"):
        if step_infer is None:
            raise ValueError(f"ensemble '{config.name}' needs the engine's step_infer")
        return EnsembleScheduler(config, statistics, step_infer)
    if config.HasField("sequence_batching"):
        return sequence_scheduler(instances, statistics, config, rate_limiter)
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        return dynamic_batcher(
            instances,
            statistics,
            max_batch_size=config.max_batch_size,
            batching=config.dynamic_batching,
            rate_limiter=rate_limiter,
            ragged=frozenset(i.name for i in config.input if i.allow_ragged_batch),
        )
    return direct_scheduler(instances, statistics, rate_limiter)
