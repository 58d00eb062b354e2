"""Per model-version inference statistics, recorded once and read by every API.

The shape follows Triton's statistics extension (``/v2/models/<m>/stats``,
``ModelStatistics`` RPC): durations are cumulative **nanoseconds**,
``last_inference`` is **milliseconds** since the epoch. Recording happens on the
event loop thread only, so no locks are needed.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from workbench.common import results

#: the eight ``inference_stats`` entries, all always present (perf_analyzer reads them unguarded).
INFERENCE_STAT_KEYS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)

#: ``observer(statistics, request_ns, queue_ns, input_ns, infer_ns, output_ns)``: called once per
#: successful request with the durations just recorded (latency histograms and summaries).
SuccessObserver = Callable[["ModelStatistics", int, int, int, int, int], None]


#: upper bounds of the duration histograms (request, queue, compute), **microseconds**:
#: 50 µs .. 10 s in 1-2.5-5 steps (Triton has no such histograms; see docs/live.md)
DURATION_BUCKETS_US = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000,
                       250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000)
#: the same bounds in nanoseconds (what the recording compares against)
_BUCKETS_NS = tuple(bound * 1000 for bound in DURATION_BUCKETS_US)
#: the duration histograms of :attr:`MetricCounters.histograms`, by name
HISTOGRAM_NAMES = ("request", "queue", "compute")


@dataclass(frozen=True, slots=True)
class BatchingLimits:
    """The served batching settings of one model version, what a formed batch is measured
    against (fill ratio, preferred sizes) and what the Live tab's diagnosis names.

    Attributes:
        max_batch_size: the config's ``max_batch_size`` (0: the model does not batch).
        preferred: the dynamic batcher's ``preferred_batch_size`` values (empty without one).
        max_queue_delay_us: ``max_queue_delay_microseconds`` (µs), None without a dynamic
            batcher.
        instances: execution instances (the sum of the ``instance_group`` counts).
    """

    max_batch_size: int = 0
    preferred: tuple[int, ...] = ()
    max_queue_delay_us: int | None = None
    instances: int = 1


@dataclass(slots=True)
class Duration:
    """A count of events and their cumulative duration in nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> results.StatisticDuration:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class ComputeTotals:
    """Compute durations (nanoseconds) summed over the composing-model requests of one
    ensemble request: Triton's secondary statistics aggregator, whose sums become the
    ensemble's ``compute_input`` / ``compute_infer`` / ``compute_output``. A scheduler adds
    a request's compute durations here when the request succeeds (cache hits add nothing)."""

    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0

    def add(self, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.input_ns += input_ns
        self.infer_ns += infer_ns
        self.output_ns += output_ns


@dataclass(slots=True)
class BatchStats:
    """Compute durations of executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Memory one model version holds on one device (Triton's ``MemoryUsage`` message).

    Attributes:
        kind: ``"CPU"``, ``"CPU_PINNED"`` or ``"GPU"`` (Triton's ``type``).
        id: device id (GPU index; 0 for host memory).
        byte_size: bytes.
        estimate: True when ``byte_size`` is the loader's measurement of the process's
            growth while the instance loaded (an estimate: allocator reuse and slack blur
            it), False when the backend reported it (the framework's own figure). Not part
            of Triton's message: the JSON and gRPC forms leave it out; dashboards show it.
    """

    kind: str
    id: int
    byte_size: int
    estimate: bool = False

    def as_dict(self) -> results.MemoryUsage:
        """Triton's JSON form: ``{"type", "id", "byte_size"}`` (``estimate`` left out)."""
        return {"type": self.kind, "id": self.id, "byte_size": self.byte_size}


def host_rss_bytes() -> int | None:
    """This process's resident set size in bytes (``/proc/self/statm``); None where there
    is no procfs (the CPU entry is then left out)."""
    return process_rss_bytes("self")


def process_rss_bytes(pid: int | str) -> int | None:
    """The resident set size in bytes of process ``pid`` (``/proc/<pid>/statm``; ``"self"``
    for this one); None where there is no procfs or no such process."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def sum_memory(usages: Iterable[MemoryUsage]) -> list[MemoryUsage]:
    """Add up usages per (kind, id), in first-seen order; a sum with an estimated part is
    an estimate."""
    totals: dict[tuple[str, int], int] = {}
    estimates: dict[tuple[str, int], bool] = {}
    for usage in usages:
        key = (usage.kind, usage.id)
        totals[key] = totals.get(key, 0) + usage.byte_size
        estimates[key] = estimates.get(key, False) or usage.estimate
    return [MemoryUsage(kind, id_, size, estimates[(kind, id_)])
            for (kind, id_), size in totals.items()]


def merge_memory(measured: Iterable[MemoryUsage], reported: Iterable[MemoryUsage]) -> list[MemoryUsage]:
    """One instance's footprint: what the loader measured (host RSS growth, NVML growth)
    joined with what the backend reported, the backend winning per (kind, id).

    A backend that knows its bytes on a device (e.g. PyTorch's parameters on ``cuda:0``)
    replaces the loader's estimate for that device rather than adding to it, so nothing is
    counted twice; measured entries for other devices are kept. Order: the kept measured
    entries, then the reported ones.
    """
    reported = list(reported)
    claimed = {(usage.kind, usage.id) for usage in reported}
    return [u for u in measured if (u.kind, u.id) not in claimed] + reported


class MetricCounters:
    """The Prometheus counters of one (model, version): what ``/metrics`` exports, which
    outlives a same-version reload (the statistics API does not).

    Triton keeps its per-model counters in a ``MetricModelReporter`` that every loaded
    copy of one (model, version) shares (core ``MetricModelReporter::Create`` hands the new
    copy of a reload the reporter the old copy still holds), so ``nv_inference_*`` keep
    counting across a reload, while each copy's statistics start at 0. Here the copies'
    :class:`ModelStatistics` share one of these: each ``record_*`` call adds to both, so a
    request that finishes on the old copy while it drains still counts. An unload ends the
    lineage: the next load starts new counters (Triton's reporter is destroyed with the
    last copy, and its series are removed from ``/metrics``).

    Attributes (same names and units as :class:`ModelStatistics`): ``inference_count``,
    ``execution_count``, ``stats`` (the eight :data:`INFERENCE_STAT_KEYS` durations,
    cumulative nanoseconds) and ``failures`` (by Triton's failure reason). Beyond Triton:
    ``histograms`` (per :data:`HISTOGRAM_NAMES`: requests per :data:`DURATION_BUCKETS_US`
    bucket, **not** cumulative, one more slot for those above the last bound; ``compute`` is
    input + infer + output) and ``batch_sizes`` (executions by formed batch size, the sum of
    the requests' batch sizes).
    """

    __slots__ = ("__weakref__", "batch_sizes", "execution_count", "failures", "histograms",
                 "inference_count", "stats")

    def __init__(self) -> None:
        self.inference_count = 0
        self.execution_count = 0
        self.stats = {key: Duration() for key in INFERENCE_STAT_KEYS}
        self.failures: dict[str, int] = {}
        self.histograms = {name: [0] * (len(DURATION_BUCKETS_US) + 1) for name in HISTOGRAM_NAMES}
        self.batch_sizes: dict[int, int] = {}


class ModelStatistics:
    """Counters of one model version (Triton's ``ModelStatistics`` message).

    ``inference_count`` counts batch-weighted inferences (a request of batch 4 adds 4);
    ``execution_count`` counts backend executions (a batch of 8 requests adds 1).

    Args:
        name: model name.
        version: version as a string (``"1"``).
        load_ns: how long this version took to load, nanoseconds (Triton's
            ``nv_model_load_duration_secs``).
        cache_enabled: the model config has ``response_cache { enable: true }``.
        observers: called on every :meth:`record_success` (shared, may grow later).
        memory_usage: what this version's instances hold (see the loader), Triton's
            ``memory_usage`` field.
        metrics: the Prometheus counters to add to as well (:attr:`metrics`): those of the
            copy this one replaces in a same-version reload; None starts new ones.
        batching: the served batching settings (:class:`BatchingLimits`), what the formed
            batch sizes are measured against.
    """

    #: Triton's failure reasons, the ``reason`` label of ``nv_inference_request_failure``.
    FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

    def __init__(
        self,
        name: str,
        version: str,
        load_ns: int = 0,
        cache_enabled: bool = False,
        observers: list[SuccessObserver] | None = None,
        memory_usage: list[MemoryUsage] | None = None,
        metrics: MetricCounters | None = None,
        batching: BatchingLimits | None = None,
    ) -> None:
        self.batching = batching if batching is not None else BatchingLimits()
        #: the Prometheus counters, shared with the copies of a reload (:class:`MetricCounters`)
        self.metrics = metrics if metrics is not None else MetricCounters()
        self.memory_usage = list(memory_usage or [])
        self.name = name
        self.version = version
        self.load_ns = load_ns
        self.cache_enabled = cache_enabled
        self.observers: list[SuccessObserver] = observers if observers is not None else []
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.pending = 0
        self.stats = {key: Duration() for key in INFERENCE_STAT_KEYS}
        #: failed requests by Triton's failure reason (REJECTED, CANCELED, BACKEND, OTHER)
        self.failures: dict[str, int] = {}
        self.batch_stats: dict[int, BatchStats] = {}
        #: what :meth:`record_success` adds to, looked up once (both dicts live as long as this)
        self._success_sinks = tuple(
            (s["success"], s["queue"], s["compute_input"], s["compute_infer"], s["compute_output"])
            for s in (self.stats, self.metrics.stats))
        histograms = self.metrics.histograms
        self._histograms = (histograms["request"], histograms["queue"], histograms["compute"])

    def record_success(
        self, request_ns: int, queue_ns: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One request answered: total, queue and compute durations in nanoseconds (also
        counted in the duration histograms: a bisect and an increment each)."""
        request, queue_counts, compute = self._histograms
        request[bisect_left(_BUCKETS_NS, request_ns)] += 1
        queue_counts[bisect_left(_BUCKETS_NS, queue_ns)] += 1
        compute[bisect_left(_BUCKETS_NS, input_ns + infer_ns + output_ns)] += 1
        for success, queue, compute_input, compute_infer, compute_output in self._success_sinks:
            success.count += 1
            success.ns += request_ns
            queue.count += 1
            queue.ns += queue_ns
            compute_input.count += 1
            compute_input.ns += input_ns
            compute_infer.count += 1
            compute_infer.ns += infer_ns
            compute_output.count += 1
            compute_output.ns += output_ns
        self.last_inference_ms = time.time_ns() // 1_000_000
        for observe in self.observers:
            observe(self, request_ns, queue_ns, input_ns, infer_ns, output_ns)

    def record_cache_hit(self, request_ns: int, lookup_ns: int) -> None:
        """One request answered from the response cache (Triton: counts in success and
        queue, not in inference/execution counts or compute durations; the request and
        queue histograms count it, the compute one does not)."""
        request, queue_counts, _compute = self._histograms
        request[bisect_left(_BUCKETS_NS, request_ns)] += 1
        queue_counts[0] += 1
        for stats in (self.stats, self.metrics.stats):
            stats["success"].add(request_ns)
            stats["queue"].add(0)
            stats["cache_hit"].add(lookup_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000
        for observe in self.observers:
            observe(self, request_ns, 0, 0, 0, 0)

    def record_cache_miss(self, lookup_and_insert_ns: int) -> None:
        """One response-cache miss: the time spent looking up and inserting, nanoseconds."""
        self.stats["cache_miss"].add(lookup_and_insert_ns)
        self.metrics.stats["cache_miss"].add(lookup_and_insert_ns)

    def record_failure(self, request_ns: int, reason: str = "BACKEND") -> None:
        """One request failed after ``request_ns`` nanoseconds in the server.

        ``reason`` is Triton's failure reason label: ``REJECTED`` (queue full or queue
        timeout), ``CANCELED`` (client gone), ``BACKEND`` (execution failed) or ``OTHER``
        (e.g. an invalid request).
        """
        for counters in (self, self.metrics):
            counters.stats["fail"].add(request_ns)
            counters.failures[reason] = counters.failures.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int,
        inferences: int | None = None,
    ) -> None:
        """One backend execution of ``batch_size`` rows (the formed batch size, its
        ``batch_stats`` key) holding ``inferences`` real inferences (default ``batch_size``;
        fewer when a sequence batcher's null rows filled it: Triton's null requests are in the
        batch size but collect no statistics, so not in ``inference_count``)."""
        inferences = batch_size if inferences is None else inferences
        self.inference_count += inferences
        self.execution_count += 1
        metrics = self.metrics
        metrics.inference_count += inferences
        metrics.execution_count += 1
        metrics.batch_sizes[batch_size] = metrics.batch_sizes.get(batch_size, 0) + 1
        batch = self.batch_stats.get(batch_size)
        if batch is None:
            batch = self.batch_stats[batch_size] = BatchStats()
        batch.compute_input.add(input_ns)
        batch.compute_infer.add(infer_ns)
        batch.compute_output.add(output_ns)

    def snapshot(self) -> results.ModelStats:
        """Triton's JSON form of this version's statistics (durations in ns, ``last_inference``
        in ms since the epoch)."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            # the eight INFERENCE_STAT_KEYS, always all present: InferStats' keys
            "inference_stats": cast(results.InferStats, {k: v.as_dict() for k, v in self.stats.items()}),
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.as_dict(),
                    "compute_infer": b.compute_infer.as_dict(),
                    "compute_output": b.compute_output.as_dict(),
                }
                for size, b in sorted(self.batch_stats.items())
            ],
            "memory_usage": [m.as_dict() for m in self.memory_usage],
        }
