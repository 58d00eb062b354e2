"""Live statistics: once a second, what each model version did in the last interval.

The engine keeps Triton's cumulative counters (``Server.model_statistics()``: counts and
nanosecond sums) and calls success observers with each request's durations. A
:class:`LiveStatistics` turns both into per-interval samples for the dashboards and the
Jupyter extension's statistics stream: throughput, latency percentiles (which cumulative
counters cannot give), queue vs compute time, the batch sizes executed and pending requests.

Cost on the serving path while attached: three list appends per successful request (the
observer: request, queue and compute durations); everything else runs once per interval on
the event loop. Detach when nobody watches (:meth:`LiveStatistics.close`) and the cost is zero.

In-process load (the Tuning tab, ``workbench perf`` in process, ``workbench.tuning.tune``)
reaches the engine through ``Server.infer`` like the frontends do, so a request does not say
where it came from; the in-process load generator says instead that it sends one
(:class:`InProcessLoad`, around each request of ``workbench.perf.InProcessClient``), and
a sample taken over an interval in which one ran is marked ``in_process``: the dashboards
plot those intervals apart from network traffic (network requests arriving during a sweep are
counted with the sweep).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field

import numpy as np

from workbench import ModelStatistics, Server
from workbench.stats.statistics import BatchingLimits

#: latencies kept per model version and interval; past it, later requests are sampled out
MAX_LATENCIES_PER_INTERVAL = 50_000


@dataclass(frozen=True, slots=True)
class LiveSample:
    """What one model version did during one interval.

    Attributes:
        time: end of the interval, seconds since the epoch.
        interval_s: the interval's length, seconds.
        model, version: the model version.
        requests_per_s: successful requests per second.
        inferences_per_s: batch-weighted inferences per second (perf_analyzer's "infer/sec"
            counts requests; a request of batch 4 is 4 inferences here, as Triton's
            ``inference_count``).
        failures: requests that failed during the interval.
        p50_us, p95_us, p99_us: request latency percentiles in the server (Triton's
            ``request`` duration: from arrival to response), **microseconds**; None when no
            request succeeded during the interval.
        queue_us, compute_us: mean queue time and mean compute time (input + infer + output)
            per successful request, **microseconds**; None without requests.
        batch_sizes: executions during the interval by batch size (``{batch size: count}``).
        pending: requests queued, not executing, at the end of the interval.
        queue_p99_us, compute_p99_us: 99th percentile of the queue and of the compute
            duration per request, **microseconds**; None without requests.
        limits: the version's served batching settings (max_batch_size, preferred sizes,
            queue delay in µs, instances).
        in_process: an in-process load generator ran during the interval
            (:class:`InProcessLoad`): the traffic is (mostly) a sweep, not the network's.
    """

    time: float
    interval_s: float
    model: str
    version: str
    requests_per_s: float
    inferences_per_s: float
    failures: int
    p50_us: float | None
    p95_us: float | None
    p99_us: float | None
    queue_us: float | None
    compute_us: float | None
    batch_sizes: dict[int, int] = field(default_factory=dict)
    pending: int = 0
    queue_p99_us: float | None = None
    compute_p99_us: float | None = None
    limits: BatchingLimits = field(default_factory=BatchingLimits)
    in_process: bool = False

    @property
    def busy(self) -> bool:
        """Requests succeeded or failed during the interval."""
        return self.requests_per_s > 0 or self.failures > 0

    def as_dict(self) -> dict:
        """JSON-ready (batch sizes keyed by string)."""
        data = asdict(self)
        data["batch_sizes"] = {str(k): v for k, v in self.batch_sizes.items()}
        return data


#: per engine: in-process requests in flight, and when the last one ended (monotonic s)
_IN_PROCESS: weakref.WeakKeyDictionary[Server, list[float]] = weakref.WeakKeyDictionary()


class InProcessLoad:
    """Mark one in-process request (or a whole in-process run) on ``server`` while the
    ``with`` block runs (see the module docstring); costs a dict lookup and two additions."""

    __slots__ = ("_state",)

    def __init__(self, server: Server) -> None:
        state = _IN_PROCESS.get(server)
        if state is None:
            state = _IN_PROCESS[server] = [0, 0.0]
        self._state = state

    def __enter__(self) -> None:
        self._state[0] += 1

    def __exit__(self, *exc_info: object) -> None:
        self._state[0] -= 1
        self._state[1] = time.monotonic()


def in_process_since(server: Server, start: float) -> bool:
    """An in-process load generator ran on ``server`` at some moment since ``start``
    (monotonic seconds)."""
    state = _IN_PROCESS.get(server)
    return state is not None and (state[0] > 0 or state[1] >= start)


@dataclass(slots=True)
class _Totals:
    """The cumulative counters of one version at one moment."""

    requests: int
    inferences: int
    failures: int
    queue_ns: int
    compute_ns: int
    executions: dict[int, int]

    @classmethod
    def of(cls, stats: ModelStatistics) -> _Totals:
        s = stats.stats
        return cls(
            requests=s["success"].count,
            inferences=stats.inference_count,
            failures=s["fail"].count,
            queue_ns=s["queue"].ns,
            compute_ns=s["compute_input"].ns + s["compute_infer"].ns + s["compute_output"].ns,
            executions={size: b.compute_infer.count for size, b in stats.batch_stats.items()},
        )


class LiveStatistics:
    """Per-interval samples of every READY model version of ``server``.

    Args:
        server: the engine to watch (its success observers and ``model_statistics()``).
        history: samples kept per model version (at one per second, 600 = ten minutes).

    Use :meth:`sample` on your own clock, or ``async for samples in live.stream(1.0)``;
    :meth:`close` detaches from the engine. Run it on the engine's event loop (the observer
    is called there).
    """

    def __init__(self, server: Server, history: int = 600) -> None:
        self._server = server
        #: per version: the interval's request, queue and compute durations (ns)
        self._latencies: dict[tuple[str, str], tuple[list[int], list[int], list[int]]] = {}
        self._previous: dict[tuple[str, str], _Totals] = {}
        self._last = time.monotonic()
        self.history: dict[tuple[str, str], deque[LiveSample]] = {}
        self._history_length = history
        self._closed = False
        for stats in server.model_statistics():  # the first interval starts now
            self._previous[(stats.name, stats.version)] = _Totals.of(stats)
        server.add_success_observer(self._observe)

    def _observe(self, stats: ModelStatistics, request_ns: int, queue_ns: int, input_ns: int,
                 infer_ns: int, output_ns: int) -> None:
        kept = self._latencies.get((stats.name, stats.version))
        if kept is None:
            kept = self._latencies[(stats.name, stats.version)] = ([], [], [])
        requests, queues, computes = kept
        if len(requests) < MAX_LATENCIES_PER_INTERVAL:
            requests.append(request_ns)
            queues.append(queue_ns)
            computes.append(input_ns + infer_ns + output_ns)

    def sample(self) -> list[LiveSample]:
        """Close the current interval: one sample per READY model version, by name then
        version (versions loaded during the interval count from their load)."""
        now = time.monotonic()
        interval = max(now - self._last, 1e-6)
        in_process = in_process_since(self._server, self._last)
        self._last = now
        wall = time.time()
        latencies, self._latencies = self._latencies, {}
        samples = []
        current: dict[tuple[str, str], _Totals] = {}
        for stats in self._server.model_statistics():
            key = (stats.name, stats.version)
            totals = current[key] = _Totals.of(stats)
            samples.append(_sample(wall, interval, stats, totals, self._previous.get(key),
                                   latencies.get(key, ([], [], [])), in_process))
        self._previous = current
        for sample in samples:
            key = (sample.model, sample.version)
            if key not in self.history:
                self.history[key] = deque(maxlen=self._history_length)
            self.history[key].append(sample)
        return samples

    async def stream(self, interval_s: float = 1.0) -> AsyncGenerator[list[LiveSample], None]:
        """Yield :meth:`sample` every ``interval_s`` seconds until :meth:`close`."""
        while not self._closed:
            await asyncio.sleep(interval_s)
            if self._closed:
                break
            yield self.sample()

    def close(self) -> None:
        """Detach from the engine (no more cost per request); idempotent."""
        self._closed = True
        self._server.remove_success_observer(self._observe)


def _sample(
    wall: float,
    interval: float,
    stats: ModelStatistics,
    totals: _Totals,
    before: _Totals | None,
    latencies: tuple[list[int], list[int], list[int]],
    in_process: bool = False,
) -> LiveSample:
    """The sample of one version from its totals now and at the interval's start."""
    if before is None:
        before = _Totals(0, 0, 0, 0, 0, {})
    requests = totals.requests - before.requests
    p50 = p95 = p99 = queue_p99 = compute_p99 = None
    if latencies[0]:
        p50, p95, p99 = (float(v) / 1000 for v in np.percentile(latencies[0], [50, 95, 99]))
        queue_p99, compute_p99 = (float(np.percentile(values, 99)) / 1000 for values in latencies[1:])
    executions = {
        size: count - before.executions.get(size, 0)
        for size, count in sorted(totals.executions.items())
        if count - before.executions.get(size, 0) > 0
    }
    return LiveSample(
        time=wall,
        interval_s=interval,
        model=stats.name,
        version=stats.version,
        requests_per_s=requests / interval,
        inferences_per_s=(totals.inferences - before.inferences) / interval,
        failures=totals.failures - before.failures,
        p50_us=p50,
        p95_us=p95,
        p99_us=p99,
        queue_us=(totals.queue_ns - before.queue_ns) / requests / 1000 if requests else None,
        compute_us=(totals.compute_ns - before.compute_ns) / requests / 1000 if requests else None,
        batch_sizes=executions,
        pending=stats.pending,
        queue_p99_us=queue_p99,
        compute_p99_us=compute_p99,
        limits=stats.batching,
        in_process=in_process,
    )


__all__ = [
    "MAX_LATENCIES_PER_INTERVAL",
    "InProcessLoad",
    "LiveSample",
    "LiveStatistics",
    "in_process_since",
]
