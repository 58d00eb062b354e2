"""A finished load becomes a registry entry: each loaded version's instances wrapped in
its scheduler (Triton's ``Model`` owning one ``Scheduler``), with statistics, on the event
loop."""

from __future__ import annotations

import logging

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.engine.inference.model import LoadedModel
from workbench.engine.inference.response_cache import ResponseCache
from workbench.engine.models.loader import LoadResult
from workbench.engine.models.registry import ModelEntry, VersionState
from workbench.messages.types import ModelReadyState
from workbench.scheduling.ensemble import StepInfer
from workbench.scheduling.factory import make_scheduler
from workbench.scheduling.rate_limiter import RateLimiter
from workbench.stats.statistics import BatchingLimits, MetricCounters, ModelStatistics, SuccessObserver

log = logging.getLogger(__name__)


def entry_from_result(
    result: LoadResult,
    observers: list[SuccessObserver],
    cache: ResponseCache | None,
    rate_limiter: RateLimiter | None,
    step_infer: StepInfer,
    reuse: dict[int, VersionState] | None = None,
    metrics: dict[int, MetricCounters] | None = None,
) -> ModelEntry:
    """Wrap loaded instances in schedulers (on the event loop) and record version states.

    ``observers`` is the server's shared observer list, handed to every version's statistics;
    ``step_infer`` is how an ensemble's scheduler reaches its composing models; ``reuse``:
    serving versions the load kept (not loaded again), added as they are when still chosen;
    ``metrics``: the Prometheus counters each reloaded version continues
    (:func:`continued_metrics`), each version's statistics starting at 0 all the same.
    """
    entry = ModelEntry(result.name, config=result.config, reason=result.error)
    if result.config is not None and result.config.response_cache.enable and cache is None:
        log.warning("model '%s' enables the response cache but the server has none "
                    "(--cache-config local,size=N): responses are not cached", result.name)
    cache_enabled = result.config is not None and result.config.response_cache.enable and cache is not None
    for version, loaded in result.versions.items():
        if loaded.error:
            entry.versions[version] = VersionState(ModelReadyState.UNAVAILABLE, loaded.error)
            continue
        stats = ModelStatistics(
            result.name,
            str(version),
            load_ns=loaded.load_ns,
            cache_enabled=cache_enabled,
            observers=observers,
            memory_usage=loaded.memory,
            metrics=(metrics or {}).get(version),
            batching=batching_limits(result.config, len(loaded.instances)),
        )
        scheduler = make_scheduler(result.config, loaded.instances, stats, rate_limiter, step_infer)
        model = LoadedModel(result.config, version, scheduler, stats, cache, result.labels,
                            loaded.fingerprint, dict(zip(loaded.instances, loaded.instance_memory, strict=False)))
        entry.versions[version] = VersionState(ModelReadyState.READY, "", model)
        log.info("successfully loaded '%s' version %d", result.name, version)
    for version in result.chosen:
        if reuse and version in reuse and version not in entry.versions:
            entry.versions[version] = reuse[version]
    entry.refresh()
    return entry


def batching_limits(config: ModelConfig, instances: int) -> BatchingLimits:
    """What a version's formed batches are measured against: ``max_batch_size``, the
    dynamic batcher's preferred sizes and queue delay (µs), and its instance count."""
    batcher = config.dynamic_batching if config.HasField("dynamic_batching") else None
    return BatchingLimits(
        max_batch_size=config.max_batch_size,
        preferred=tuple(sorted(batcher.preferred_batch_size)) if batcher is not None else (),
        max_queue_delay_us=batcher.max_queue_delay_microseconds if batcher is not None else None,
        instances=instances,
    )


def continued_metrics(serving: ModelEntry | None) -> dict[int, MetricCounters]:
    """The Prometheus counters of the READY versions of ``serving`` (the entry a reload
    replaces), by version: the new copy of a version continues them, as Triton's new copy
    reuses the ``MetricModelReporter`` the old copy still holds. Versions not serving (an
    unloaded model, a failed or held one) give none: their next load starts at 0."""
    if serving is None:
        return {}
    return {
        version: state.model.statistics.metrics
        for version, state in serving.versions.items()
        if state.state is ModelReadyState.READY and state.model is not None
    }


__all__ = ["continued_metrics", "entry_from_result"]
