"""Prometheus metrics with Triton's names and labels (``GET /metrics``, port 8002).

Every per-model number is read at scrape time from the engine's live
:class:`~workbench.ModelStatistics` (``Server.model_statistics()``): the counters from its
``metrics`` (:class:`~workbench.stats.statistics.MetricCounters`, which continue across a
same-version reload, as Triton's reporter), the gauges (pending, load time) from the serving
copy. Statistics are cumulative **nanoseconds**; the ``*_duration_us`` families are
**microseconds** (ns / 1000), ``nv_model_load_duration_secs`` seconds. Labels ``model``,
``version``; per family: ``nv_inference_request_success`` = ``stats["success"].count``,
``_failure`` (+ ``reason``) = ``failures[reason]``, ``nv_inference_count`` /
``exec_count`` = ``inference_count`` / ``execution_count``, ``nv_inference_{request,queue,
compute_input,compute_infer,compute_output}_duration_us`` = ``stats[...].ns / 1000``
(``request`` is ``success``), ``nv_inference_pending_request_count`` = ``pending``,
``nv_model_load_duration_secs`` = ``load_ns / 1e9``, ``nv_cache_*`` = ``stats["cache_hit"]``
/ ``["cache_miss"]`` (cache on). Counters are written ``untyped`` (prometheus_client would
name them ``*_total``).

Server-wide CPU / GPU gauges are sampled every ``--metrics-interval-ms``; latency histogram
and summaries: :mod:`workbench.frontends.latency_metrics`; beyond Triton:
:mod:`workbench.frontends.metrics_histograms` and :func:`workbench_families`. Per-model
families are written by :mod:`workbench.frontends.metrics_text` (``generate_latest``'s bytes,
~10x faster), the others by ``generate_latest``. The families, units and why ``untyped``:
docs/metrics-tracing.md, "Prometheus metrics"."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from workbench import ModelStatistics, Server, ServerOptions
from workbench.common.switches import parse_switch
from workbench.frontends.latency_metrics import (
    DEFAULT_BUCKETS_MS,
    DEFAULT_QUANTILES,
    LatencyObserver,
    parse_quantiles,
)
from workbench.frontends.metrics_histograms import CONFIG_KEY as HISTOGRAMS_KEY
from workbench.frontends.metrics_histograms import histogram_families
from workbench.frontends.metrics_text import FamilySpec, ModelFamiliesText, Sample, gauge_text
from workbench.frontends.system_metrics import SystemReading, SystemSampler

log = logging.getLogger(__name__)

#: the Prometheus text format 0.0.4, as Triton answers. (prometheus_client >= 0.22 calls
#: ``text/plain; version=1.0.0`` ``CONTENT_TYPE_LATEST``; for these names the bytes are the same.)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

MODEL_LABELS = ("model", "version")
GPU_LABELS = ("gpu_uuid",)

#: (family, help, value) of Triton's per-model counters, always exported.
COUNTERS: tuple[tuple[str, str, Callable[[ModelStatistics], float]], ...] = (
    ("nv_inference_request_success",
     "Number of successful inference requests, all batch sizes",
     lambda s: s.metrics.stats["success"].count),
    ("nv_inference_count",
     "Number of inferences performed (does not include cached requests)",
     lambda s: s.metrics.inference_count),
    ("nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)",
     lambda s: s.metrics.execution_count),
)
FAILURE_HELP = "Number of failed inference requests, all batch sizes"
#: (family, help, statistics key) of the cumulative latency counters; value = ns / 1000 (µs).
LATENCY_COUNTERS = (
    ("nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     "success"),
    ("nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     "queue"),
    ("nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     "compute_input"),
    ("nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)",
     "compute_infer"),
    ("nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds "
     "(does not include cached requests)",
     "compute_output"),
)
#: (family, help, statistics key, field) of the per-model cache families (cache-enabled models).
CACHE_COUNTERS = (
    ("nv_cache_num_hits_per_model", "Number of response cache hits per model", "cache_hit", "count"),
    ("nv_cache_num_misses_per_model", "Number of response cache misses per model", "cache_miss",
     "count"),
    ("nv_cache_hit_duration_per_model",
     "Total cache hit duration per model, in microseconds", "cache_hit", "us"),
    ("nv_cache_miss_duration_per_model",
     "Total cache miss (insert+lookup) duration per model, in microseconds", "cache_miss", "us"),
)


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """What to export (tritonserver's metrics flags, already parsed).

    ``interval_s``: seconds between CPU/GPU samples (``--metrics-interval-ms`` / 1000).
    ``workbench_histograms``: the duration and batch-size histograms beyond Triton
    (:mod:`workbench.frontends.metrics_histograms`), off by default.
    """

    cpu: bool = True
    gpu: bool = True
    interval_s: float = 2.0
    counter_latencies: bool = True
    histogram_buckets_ms: tuple[float, ...] = ()
    quantiles: dict[float, float] = field(default_factory=dict)
    workbench_histograms: bool = False

    @classmethod
    def from_options(cls, options: ServerOptions) -> MetricsSettings:
        """From ``--allow-*-metrics``, ``--metrics-interval-ms`` and ``--metrics-config``.

        Raises:
            ValueError: a malformed ``summary_quantiles``.
        """
        config = options.metrics_config  # values checked by ServerOptions: true or false
        quantiles = {}
        if parse_switch(config.get("summary_latencies", "false")):
            text = config.get("summary_quantiles")
            quantiles = parse_quantiles(text) if text else dict(DEFAULT_QUANTILES)
        histogram = parse_switch(config.get("histogram_latencies", "false"))
        return cls(
            cpu=options.allow_cpu_metrics,
            gpu=options.allow_gpu_metrics,
            interval_s=options.metrics_interval_ms / 1000,
            counter_latencies=bool(parse_switch(config.get("counter_latencies", "true"))),
            histogram_buckets_ms=DEFAULT_BUCKETS_MS if histogram else (),
            quantiles=quantiles,
            workbench_histograms=bool(parse_switch(config.get(HISTOGRAMS_KEY, "false"))),
        )


def model_families(all_stats: list[ModelStatistics], counter_latencies: bool = True) -> Iterator[Metric]:
    """Triton's per-model families for the given versions (see the module table).

    Durations are converted from the statistics' nanoseconds to microseconds.
    """
    for name, help_text, value in COUNTERS:
        family = UnknownMetricFamily(name, help_text, labels=MODEL_LABELS)
        for stats in all_stats:
            family.add_metric([stats.name, stats.version], value(stats))
        yield family
        if name == "nv_inference_request_success":
            yield _failure_family(all_stats)
    if counter_latencies:
        for name, help_text, key in LATENCY_COUNTERS:
            family = UnknownMetricFamily(name, help_text, labels=MODEL_LABELS)
            for stats in all_stats:
                family.add_metric([stats.name, stats.version], stats.metrics.stats[key].ns / 1e3)
            yield family
    yield _gauge("nv_inference_pending_request_count",
                 "Instantaneous number of pending requests awaiting execution per-model.",
                 all_stats, lambda s: s.pending)
    yield _gauge("nv_model_load_duration_secs", "Model load time in seconds",
                 all_stats, lambda s: s.load_ns / 1e9)
    yield from _cache_families([s for s in all_stats if s.cache_enabled])


def _failure_family(all_stats: list[ModelStatistics]) -> Metric:
    """``nv_inference_request_failure`` with every reason present (0 until one happens)."""
    family = UnknownMetricFamily("nv_inference_request_failure", FAILURE_HELP,
                                 labels=(*MODEL_LABELS, "reason"))
    for stats in all_stats:
        reasons = dict.fromkeys(ModelStatistics.FAILURE_REASONS, 0) | stats.metrics.failures
        for reason, count in reasons.items():
            family.add_metric([stats.name, stats.version, reason], count)
    return family


def model_family_specs(counter_latencies: bool = True) -> list[FamilySpec]:
    """The families of :func:`model_families` (same order, values and texts) as
    :class:`~workbench.frontends.metrics_text.FamilySpec` for the cached text writer."""
    specs = []
    for name, help_text, value in COUNTERS:
        specs.append(FamilySpec(name, help_text, "untyped", _one(value)))
        if name == "nv_inference_request_success":
            specs.append(FamilySpec("nv_inference_request_failure", FAILURE_HELP, "untyped", _failures))
    if counter_latencies:
        for name, help_text, key in LATENCY_COUNTERS:
            specs.append(FamilySpec(name, help_text, "untyped", _one(_microseconds(key))))
    specs.append(FamilySpec("nv_inference_pending_request_count",
                            "Instantaneous number of pending requests awaiting execution per-model.",
                            "gauge", _one(lambda s: s.pending)))
    specs.append(FamilySpec("nv_model_load_duration_secs", "Model load time in seconds", "gauge",
                            _one(lambda s: s.load_ns / 1e9)))
    for name, help_text, key, kind in CACHE_COUNTERS:
        value = _count(key) if kind == "count" else _microseconds(key)
        specs.append(FamilySpec(name, help_text, "untyped", _one(value), only=_cache_enabled))
    return specs


def _microseconds(key: str) -> Callable[[ModelStatistics], float]:
    return lambda stats: stats.metrics.stats[key].ns / 1e3


def _count(key: str) -> Callable[[ModelStatistics], float]:
    return lambda stats: stats.metrics.stats[key].count


def _cache_enabled(stats: ModelStatistics) -> bool:
    return stats.cache_enabled


def _one(value: Callable[[ModelStatistics], float]) -> Callable[[ModelStatistics], tuple[Sample]]:
    return lambda stats: (((), value(stats)),)


def _failures(stats: ModelStatistics) -> tuple[Sample, ...]:
    reasons = dict.fromkeys(ModelStatistics.FAILURE_REASONS, 0) | stats.metrics.failures
    return tuple(((("reason", reason),), count) for reason, count in reasons.items())


def _gauge(name: str, help_text: str, all_stats: list[ModelStatistics],
           value: Callable[[ModelStatistics], float]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=MODEL_LABELS)
    for stats in all_stats:
        family.add_metric([stats.name, stats.version], value(stats))
    return family


def _cache_families(cached: list[ModelStatistics]) -> Iterator[Metric]:
    """Triton exports the per-model cache families only for models with the cache on."""
    if not cached:
        return
    for name, help_text, key, kind in CACHE_COUNTERS:
        family = UnknownMetricFamily(name, help_text, labels=MODEL_LABELS)
        for stats in cached:
            duration = stats.metrics.stats[key]
            family.add_metric([stats.name, stats.version],
                              duration.count if kind == "count" else duration.ns / 1e3)
        yield family


def system_families(reading: SystemReading) -> Iterator[Metric]:
    """``nv_cpu_*`` (when read) and ``nv_gpu_*`` / ``nv_energy_consumption`` (per GPU)."""
    if reading.cpu is not None:
        cpu = reading.cpu
        yield GaugeMetricFamily("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]",
                                value=cpu.utilization)
        yield GaugeMetricFamily("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes",
                                value=cpu.memory_total_bytes)
        yield GaugeMetricFamily("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes",
                                value=cpu.memory_used_bytes)
    if not reading.gpus:
        return
    gpu_families = (
        (GaugeMetricFamily, "nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization"),
        (GaugeMetricFamily, "nv_gpu_memory_total_bytes", "GPU total memory, in bytes",
         "memory_total_bytes"),
        (GaugeMetricFamily, "nv_gpu_memory_used_bytes", "GPU used memory, in bytes",
         "memory_used_bytes"),
        (GaugeMetricFamily, "nv_gpu_power_usage", "GPU power usage in watts", "power_usage_watts"),
        (GaugeMetricFamily, "nv_gpu_power_limit", "GPU power management limit in watts",
         "power_limit_watts"),
        (UnknownMetricFamily, "nv_energy_consumption",
         "GPU energy consumption in joules since the Triton Server started", "energy_joules"),
    )
    for kind, name, help_text, attribute in gpu_families:
        family = kind(name, help_text, labels=GPU_LABELS)
        for gpu in reading.gpus:
            value = getattr(gpu, attribute)
            if value is not None:
                family.add_metric([gpu.uuid], value)
        yield family


#: ``workbench_model_ready``'s name and help (:func:`workbench_families`)
READY_FAMILY = ("workbench_model_ready", "Whether a model version is READY (1) or not (0: loading, "
                "unloading, unavailable or unloaded)")


def _readiness_rows(server: Server) -> list[tuple[list[str], float]]:
    return [([name, version], 1.0 if is_ready else 0.0)
            for name, version, is_ready in server.model_readiness()]


def workbench_families(server: Server) -> Iterator[Metric]:
    """The families beyond Triton's (Triton exports neither; the alert rules of
    :mod:`workbench.deploy.alerts` need them):

    - ``workbench_model_ready{model,version}`` (gauge): 1 for a ``READY`` version, 0 for
      one loading, unloading or unavailable, every model the server knows
      (:meth:`Server.model_readiness`; ``version=""`` for a model that
      failed before any version loaded). Unlike the ``nv_inference_*`` series,
      an unloaded model stays in the scrape, at 0.
    - ``workbench_repository_polls_total`` / ``workbench_repository_poll_failures_total``
      (counters, ``poll`` mode only): :func:`poll_families`.
    """
    ready = GaugeMetricFamily(*READY_FAMILY, labels=MODEL_LABELS)
    for labels, value in _readiness_rows(server):
        ready.add_metric(labels, value)
    yield ready
    yield from poll_families(server)


def poll_families(server: Server) -> Iterator[Metric]:
    """Repository polls and those that failed (scan, sync or apply raised), ``poll`` mode only."""
    counts = server.poll_counts()
    if counts is not None:
        yield CounterMetricFamily("workbench_repository_polls", "Model repository polls "
                                  "(--model-control-mode=poll)", value=counts[0])
        yield CounterMetricFamily("workbench_repository_poll_failures", "Model repository "
                                  "polls that failed (scan, remote sync or apply raised)",
                                  value=counts[1])


class TritonMetricsCollector(Collector):
    """A prometheus_client collector that yields Triton's families at scrape time.

    ``collect()`` must run on the engine's event loop thread (the thread that records the
    statistics). CPU/GPU values are the latest :class:`SystemSampler` reading; if none was
    taken yet, the first scrape takes one.

    Args:
        server: the started engine.
        settings: what to export.
        latency: the histogram/summary observer registered with the server, if any.
    """

    def __init__(self, server: Server, settings: MetricsSettings,
                 latency: LatencyObserver | None = None) -> None:
        self.server = server
        self.settings = settings
        self.latency = latency
        self.system = SystemSampler(cpu=settings.cpu, gpu=settings.gpu)
        self.model_text = ModelFamiliesText(model_family_specs(settings.counter_latencies))

    def collect(self) -> Iterator[Metric]:
        all_stats = self.server.model_statistics()
        yield from model_families(all_stats, self.settings.counter_latencies)
        yield from self._other_families(all_stats)

    def render(self) -> bytes:
        """The scrape's bytes: those of ``generate_latest`` over :meth:`collect`, with the
        per-model families written by the cached :attr:`model_text` (issue 20: a scrape of
        100 models took ~30 ms on the event loop through ``generate_latest``), then the Python
        models' custom families (``Server.custom_metrics``, :mod:`workbench.stats.custom_metrics`:
        written as Triton's prometheus-cpp writes them, which ``generate_latest`` cannot)."""
        all_stats = self.server.model_statistics()
        between = _Families(list(self._latency_and_system_families(all_stats)))
        ready = gauge_text(*READY_FAMILY, MODEL_LABELS, _readiness_rows(self.server))
        return b"".join((self.model_text.render(all_stats).encode(), generate_latest(between),
                         ready.encode(), generate_latest(_Families(list(poll_families(self.server)))),
                         self.server.custom_metrics.render().encode()))

    def _other_families(self, all_stats: list[ModelStatistics]) -> Iterator[Metric]:
        yield from self._latency_and_system_families(all_stats)
        yield from workbench_families(self.server)

    def _latency_and_system_families(self, all_stats: list[ModelStatistics]) -> Iterator[Metric]:
        if self.latency is not None and self.latency.buckets_ms:
            yield self.latency.histogram_family(all_stats)
        if self.latency is not None and self.latency.quantiles:
            yield from self.latency.summary_families(all_stats)
        if self.settings.workbench_histograms:
            yield from histogram_families(all_stats)
        if self.settings.cpu or self.settings.gpu:
            yield from system_families(self.system.latest or self.system.sample())


class _Families:
    """Already collected families, in the shape ``generate_latest`` reads (``collect()``)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


class MetricsFrontend:
    """Triton's metrics endpoint over one engine: registry, ASGI app and CPU/GPU sampler.

    Uses its own ``CollectorRegistry`` (not prometheus_client's global one), so several
    servers in one process never mix. The ASGI :attr:`app` answers ``GET /metrics`` with
    the text format 0.0.4 (:data:`CONTENT_TYPE`) and 404 elsewhere. Use as
    ``async with MetricsFrontend(server, options):`` to run the CPU/GPU sampler every
    ``--metrics-interval-ms``; the app itself serves without it.

    Args:
        server: the engine (latency observers, if configured, are registered on it now).
        options: the server options (``allow_*_metrics``, ``metrics_*``).
    """

    def __init__(self, server: Server, options: ServerOptions) -> None:
        settings = MetricsSettings.from_options(options)
        latency = None
        if settings.histogram_buckets_ms or settings.quantiles:
            latency = LatencyObserver(settings.histogram_buckets_ms, settings.quantiles)
            server.add_success_observer(latency)
        self.collector = TritonMetricsCollector(server, settings, latency)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.app = create_metrics_app(self.collector.render)
        self._sampler: asyncio.Task | None = None

    def render(self) -> bytes:
        """One scrape in the Prometheus text format (call on the engine's event loop); the
        bytes of ``generate_latest(self.registry)``, written faster."""
        return self.collector.render()

    async def __aenter__(self) -> MetricsFrontend:
        settings = self.collector.settings
        if settings.cpu or settings.gpu:
            self._sampler = asyncio.create_task(self._sample_forever(settings.interval_s))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None

    async def _sample_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.to_thread(self.collector.system.sample)
            await asyncio.sleep(interval_s)


def create_metrics_app(render: Callable[[], bytes]) -> Starlette:
    """ASGI app: ``GET /metrics`` -> ``render()`` (e.g. :meth:`TritonMetricsCollector.render`)
    as text format 0.0.4.

    The scrape runs in the async endpoint, i.e. on the event loop thread, where the
    statistics are recorded (no locks, consistent values).
    """

    async def metrics(_: Request) -> Response:
        return Response(render(), media_type=CONTENT_TYPE)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


__all__ = ["CONTENT_TYPE", "MetricsFrontend", "MetricsSettings", "TritonMetricsCollector",
           "create_metrics_app", "model_families", "poll_families", "system_families", "workbench_families"]
