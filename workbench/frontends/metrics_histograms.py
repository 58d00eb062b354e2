"""Histograms Triton does not have (``--metrics-config workbench_histograms=true``, off by
default so that a default scrape is exactly Triton's families).

Read at scrape time from the engine's :class:`~workbench.stats.statistics.MetricCounters`
(``histograms`` and ``batch_sizes``, counted on the request path) and the version's
:class:`~workbench.stats.statistics.BatchingLimits`; labels ``model``, ``version``:
``workbench_request_duration_us`` / ``_queue_`` / ``_compute_`` (histograms, **µs**, buckets
:data:`~workbench.stats.statistics.DURATION_BUCKETS_US`; cache hits: in the request histogram, 0 in
the queue's, not in the compute's), ``workbench_batch_size`` (formed batch size per
execution), ``workbench_batch_fill_ratio`` (batch size / ``max_batch_size``, batching models)
and ``workbench_batch_preferred_executions_total`` (counter). Each ``_count`` / ``_sum`` come
from the same counters as Triton's families (``_count`` of the request histogram equals
``nv_inference_request_success``). Why these exist and the table for users: docs/live.md,
"Prometheus: --metrics-config workbench_histograms=true (beyond Triton)"."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric

from workbench import ModelStatistics
from workbench.stats.statistics import DURATION_BUCKETS_US

#: the ``--metrics-config`` key that turns these families on (beyond Triton)
CONFIG_KEY = "workbench_histograms"
#: upper bounds of ``workbench_batch_size``
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: upper bounds of ``workbench_batch_fill_ratio``
FILL_RATIO_BUCKETS = (0.125, 0.25, 0.5, 0.75, 0.9, 1.0)

#: (family, help, histogram name, the statistics keys whose durations add up to its ``_sum``)
DURATION_FAMILIES = (
    ("workbench_request_duration_us",
     "Histogram of inference request duration in microseconds (includes cached requests)",
     "request", ("success",)),
    ("workbench_queue_duration_us",
     "Histogram of inference queuing duration in microseconds (includes cached requests)",
     "queue", ("queue",)),
    ("workbench_compute_duration_us",
     "Histogram of compute input + infer + output duration in microseconds "
     "(does not include cached requests)",
     "compute", ("compute_input", "compute_infer", "compute_output")),
)


def histogram_families(all_stats: list[ModelStatistics]) -> Iterator[Metric]:
    """The families of the module table over these versions."""
    for name, help_text, histogram, keys in DURATION_FAMILIES:
        family = HistogramMetricFamily(name, help_text, labels=("model", "version"))
        for stats in all_stats:
            counts = stats.metrics.histograms[histogram]
            total_ns = sum(stats.metrics.stats[key].ns for key in keys)
            family.add_metric([stats.name, stats.version],
                              _cumulative(DURATION_BUCKETS_US, counts), total_ns / 1e3)
        yield family
    yield _batch_size_family(all_stats)
    yield _fill_family([s for s in all_stats if s.batching.max_batch_size > 0])
    yield _preferred_family([s for s in all_stats if s.batching.max_batch_size > 0])


def _cumulative(bounds: Iterable[float], counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket ``counts`` (the last slot: above every bound) as Prometheus' cumulative
    ``(le, count)`` pairs ending with ``+Inf``."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds, counts, strict=False):
        running += count
        buckets.append((_text(bound), running))
    buckets.append(("+Inf", sum(counts)))
    return buckets


def _batch_size_family(all_stats: list[ModelStatistics]) -> Metric:
    family = HistogramMetricFamily(
        "workbench_batch_size", "Histogram of the batch size formed per model execution",
        labels=("model", "version"))
    for stats in all_stats:
        sizes = stats.metrics.batch_sizes
        family.add_metric([stats.name, stats.version],
                          _cumulative(BATCH_SIZE_BUCKETS, _binned(sizes, BATCH_SIZE_BUCKETS)),
                          sum(size * count for size, count in sizes.items()))
    return family


def _fill_family(batching: list[ModelStatistics]) -> Metric:
    family = HistogramMetricFamily(
        "workbench_batch_fill_ratio",
        "Histogram of the formed batch size over max_batch_size per model execution",
        labels=("model", "version"))
    for stats in batching:
        limit = stats.batching.max_batch_size
        ratios = {size / limit: count for size, count in stats.metrics.batch_sizes.items()}
        family.add_metric([stats.name, stats.version],
                          _cumulative(FILL_RATIO_BUCKETS, _binned(ratios, FILL_RATIO_BUCKETS)),
                          sum(ratio * count for ratio, count in ratios.items()))
    return family


def _preferred_family(batching: list[ModelStatistics]) -> Metric:
    family = CounterMetricFamily(
        "workbench_batch_preferred_executions",
        "Number of model executions whose batch size is a preferred batch size",
        labels=("model", "version"))
    for stats in batching:
        preferred = set(stats.batching.preferred)
        family.add_metric([stats.name, stats.version],
                          sum(c for size, c in stats.metrics.batch_sizes.items() if size in preferred))
    return family


def _binned(values: dict, bounds: tuple[float, ...]) -> list[int]:
    """``{value: count}`` counted per bucket of ``bounds`` (one more slot above the last)."""
    counts = [0] * (len(bounds) + 1)
    for value, count in values.items():
        index = next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))
        counts[index] += count
    return counts


def _text(bound: float) -> str:
    """``100`` -> ``"100.0"``, as prometheus_client writes a histogram's ``le``."""
    return repr(float(bound))


__all__ = ["BATCH_SIZE_BUCKETS", "CONFIG_KEY", "DURATION_FAMILIES", "FILL_RATIO_BUCKETS",
           "histogram_families"]
