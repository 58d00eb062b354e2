"""Triton's optional latency histogram and summaries (``--metrics-config``).

- ``histogram_latencies=true``: ``nv_inference_first_response_histogram_ms`` (histogram, ms,
  Triton's default buckets 100, 500, 2000, 5000). For a non-decoupled model the first
  response is the only one, so an observation is the request duration.
- ``summary_latencies=true``: ``nv_inference_request_summary_us``,
  ``nv_inference_queue_summary_us``, ``nv_inference_compute_{input,infer,output}_summary_us``
  (summaries, µs, quantiles ``summary_quantiles``, default 0.5, 0.9, 0.95, 0.99, 0.999).
  The request summary is left out for models with the response cache on, like Triton.

Only the bucket counts and the quantile windows are kept here, fed by one observer that
``ModelStatistics.record_success`` calls with the durations it has just added. Each family's
``_count`` and ``_sum`` (and the histogram's ``+Inf`` bucket) are read from the statistics
counters themselves, so nothing is counted twice.

Quantiles: Triton (prometheus-cpp) estimates them with CKMS over a 60 s sliding window;
here they are exact (nearest rank) over the last 60 s, but over at most
:data:`WINDOW_LIMIT` observations per series; the ``:<error>`` part of
``summary_quantiles`` is accepted and not needed.
"""

from __future__ import annotations

import bisect
import math
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import HistogramMetricFamily, Metric

from workbench import ModelStatistics
from workbench.stats.statistics import MetricCounters

#: Triton's default first-response histogram buckets, milliseconds.
DEFAULT_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
#: Triton's default summary quantiles (quantile -> allowed error).
DEFAULT_QUANTILES = {0.5: 0.05, 0.9: 0.01, 0.95: 0.001, 0.99: 0.001, 0.999: 0.001}
#: seconds an observation stays in a quantile window (prometheus-cpp's default max age).
WINDOW_SECONDS = 60.0
#: most observations kept per series for quantiles (bounds memory and scrape time).
WINDOW_LIMIT = 4096

#: summary family -> (statistics key, help text), Triton's names and texts.
SUMMARIES = {
    "nv_inference_request_summary_us": (
        "success", "Summary of inference request duration in microseconds (includes cached requests)"),
    "nv_inference_queue_summary_us": (
        "queue", "Summary of inference queuing duration in microseconds (includes cached requests)"),
    "nv_inference_compute_input_summary_us": (
        "compute_input",
        "Summary of compute input duration in microseconds (does not include cached requests)"),
    "nv_inference_compute_infer_summary_us": (
        "compute_infer",
        "Summary of compute inference duration in microseconds (does not include cached requests)"),
    "nv_inference_compute_output_summary_us": (
        "compute_output",
        "Summary of inference compute output duration in microseconds "
        "(does not include cached requests)"),
}
_SUMMARY_KEYS = tuple(key for key, _ in SUMMARIES.values())


def parse_quantiles(text: str) -> dict[float, float]:
    """``"0.5:0.05,0.9:0.01"`` -> ``{0.5: 0.05, 0.9: 0.01}`` (tritonserver ``summary_quantiles``).

    Raises:
        ValueError: an item is not ``<quantile>:<error>`` with the quantile in (0, 1).
    """
    quantiles = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        quantile, sep, error = item.partition(":")
        try:
            q, e = float(quantile), float(error) if sep else 0.0
        except ValueError:
            raise ValueError(f"invalid summary quantile '{item}', expected <quantile>:<error>") from None
        if not 0.0 < q < 1.0:
            raise ValueError(f"summary quantile must be in (0, 1), got {q}")
        quantiles[q] = e
    return quantiles


def nearest_rank(sorted_values: list[float], quantile: float) -> float:
    """The ``quantile`` of ascending ``sorted_values`` by nearest rank; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(quantile * len(sorted_values)))
    return sorted_values[rank - 1]


class LatencyObserver:
    """Histogram buckets and quantile windows per model version, fed once per success.

    Register it with ``Server.add_success_observer``. Per-version state lives in weak
    dictionaries keyed by the version's :class:`~workbench.stats.statistics.MetricCounters`, so
    it continues across a same-version reload (as Triton's histograms and summaries live
    in the reporter the copies share) and goes with the counters after an unload.

    Args:
        histogram_buckets_ms: upper bounds of the first-response histogram, or None (off).
        quantiles: summary quantiles (quantile -> error), or None (summaries off).
    """

    def __init__(
        self,
        histogram_buckets_ms: Iterable[float] | None = None,
        quantiles: dict[float, float] | None = None,
    ) -> None:
        self.buckets_ms = tuple(sorted(histogram_buckets_ms)) if histogram_buckets_ms else ()
        self.quantiles = sorted(quantiles) if quantiles else []
        self._histograms: weakref.WeakKeyDictionary[MetricCounters, list[int]] = (
            weakref.WeakKeyDictionary()
        )
        self._windows: weakref.WeakKeyDictionary[MetricCounters, dict[str, deque]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(
        self,
        stats: ModelStatistics,
        request_ns: int,
        queue_ns: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
    ) -> None:
        """Observe one successful request (durations in nanoseconds, as recorded)."""
        if self.buckets_ms:
            counts = self._histograms.get(stats.metrics)
            if counts is None:
                counts = self._histograms[stats.metrics] = [0] * len(self.buckets_ms)
            index = bisect.bisect_left(self.buckets_ms, request_ns / 1e6)
            if index < len(counts):  # above the last bound: only in +Inf (= the success count)
                counts[index] += 1
        if self.quantiles:
            windows = self._windows.get(stats.metrics)
            if windows is None:
                windows = self._windows[stats.metrics] = {
                    key: deque(maxlen=WINDOW_LIMIT) for key in _SUMMARY_KEYS
                }
            now = time.monotonic()
            for key, ns in zip(_SUMMARY_KEYS, (request_ns, queue_ns, input_ns, infer_ns, output_ns), strict=True):
                windows[key].append((now, ns / 1e3))

    # ------------------------------------------------------------------ families
    def histogram_family(self, all_stats: list[ModelStatistics]) -> Metric:
        """``nv_inference_first_response_histogram_ms`` for every version (ms).

        Bucket counts come from the observations; ``+Inf``, ``_count`` and ``_sum`` from the
        success counter, so ``_count`` always equals ``nv_inference_request_success``.
        """
        family = HistogramMetricFamily(
            "nv_inference_first_response_histogram_ms",
            "Duration from request to first response in milliseconds",
            labels=("model", "version"),
        )
        for stats in all_stats:
            counts = self._histograms.get(stats.metrics, [0] * len(self.buckets_ms))
            success = stats.metrics.stats["success"]
            cumulative, buckets = 0, []
            for bound, count in zip(self.buckets_ms, counts, strict=True):
                cumulative += count
                buckets.append((_bound_text(bound), cumulative))
            buckets.append(("+Inf", max(success.count, cumulative)))
            family.add_metric([stats.name, stats.version], buckets, success.ns / 1e6)
        return family

    def summary_families(self, all_stats: list[ModelStatistics]) -> Iterator[Metric]:
        """The five ``nv_inference_*_summary_us`` families (µs; quantiles over the window)."""
        horizon = time.monotonic() - WINDOW_SECONDS
        for name, (key, help_text) in SUMMARIES.items():
            family = Metric(name, help_text, "summary")
            for stats in all_stats:
                if key == "success" and stats.cache_enabled:
                    continue  # Triton: no request summary for cache-enabled models
                self._add_summary(family, stats, key, horizon)
            yield family

    def _add_summary(self, family: Metric, stats: ModelStatistics, key: str, horizon: float) -> None:
        labels = {"model": stats.name, "version": stats.version}
        window = self._windows.get(stats.metrics, {}).get(key)
        while window and window[0][0] < horizon:
            window.popleft()
        values = sorted(v for _, v in window) if window else []
        for quantile in self.quantiles:
            family.add_sample(family.name, {**labels, "quantile": _bound_text(quantile)},
                              nearest_rank(values, quantile))
        duration = stats.metrics.stats[key]
        family.add_sample(family.name + "_count", labels, duration.count)
        family.add_sample(family.name + "_sum", labels, duration.ns / 1e3)


def _bound_text(value: float) -> str:
    """``100.0`` -> ``"100"``, ``0.5`` -> ``"0.5"`` (Prometheus label text for a bound)."""
    return repr(int(value)) if float(value).is_integer() else repr(float(value))
