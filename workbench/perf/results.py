"""One measured step (:class:`StepResult`) and how it is computed from request records.

The arithmetic is perf_analyzer's (``InferenceProfiler``): a request belongs to the window
its response *ended* in; throughput = requests x batch size / window seconds; percentiles
are the sorted latencies at index ``int(p/100 * (n - 1) + 0.5)``; averages and
percentiles are reported in whole **microseconds**, truncated.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from workbench.perf.load import RequestRecord
from workbench.perf.options import LoadLevel
from workbench.perf.server_stats import ServerStats

#: the percentiles perf_analyzer always reports
DEFAULT_PERCENTILES = (50, 90, 95, 99)


def percentile_ns(sorted_ns: Sequence[int], percentile: float) -> int:
    """perf_analyzer's percentile of sorted latencies: the element at index
    ``int(percentile / 100 * (n - 1) + 0.5)`` (nearest rank, no interpolation).

    Raises:
        ValueError: no latencies.
    """
    if not sorted_ns:
        raise ValueError("no latencies")
    return sorted_ns[int(percentile / 100.0 * (len(sorted_ns) - 1) + 0.5)]


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one load level measured, client side and (when read) server side.

    Latencies are client-side, from the load loop beginning a request to its end, in whole
    **microseconds** (perf_analyzer's CSV unit).

    Attributes:
        level: the load (concurrency or request rate).
        batch_size: rows per request.
        window_s: the measured window, **seconds**.
        request_count: successful requests that ended in the window.
        error_count: failed requests that ended in the window.
        delayed_count: request-rate mode: successful requests sent behind schedule.
        sent_count: requests sent during the window.
        throughput_infer_per_s: ``request_count * batch_size / window_s`` (perf_analyzer's
            batch-weighted "infer/sec").
        send_rate_per_s: ``sent_count / window_s``.
        latency_avg_us, latency_std_us, latency_min_us, latency_max_us: over the window's
            successful requests (sample standard deviation; 0 with one request).
        percentiles_us: 50, 90, 95, 99 and the requested percentile -> latency, **µs**.
        stabilizing_latency_us: the requested percentile, or the average without one:
            perf_analyzer's latency in its summary lines and stability check.
        percentile: the requested percentile (None = average latency stabilizes).
        client_send_us: mean time the load loop spent before issuing the client call (data
            selection, request object), **µs**. perf_analyzer's "Client Send" also covers the
            client library's serialization; here that lands in ``network_us``.
        client_recv_us: mean time after the client call returned, **µs** (perf_analyzer's
            "Client Recv" covers response deserialization, which tritonclient does inside
            the call: it also lands in ``network_us``).
        response_wait_us: mean duration of the client call itself, **µs**.
        network_us: perf_analyzer's "Network+Server Send/Recv", **µs**: the client's wait
            (average latency minus client send and recv) minus the server's mean queue,
            compute and cache time, capped at 0. It holds the client library's
            (de)serialization, the network and the server's protocol handling; 0 without
            server statistics.
        server: the server's counters over the window (None if not read or nothing grew).
        stable: throughput and stabilizing latency of the window's thirds within
            ``stability_percentage`` of each other.
        errors: distinct failure messages seen in the window (at most 5).
        within_bound_count: successful requests of the window whose latency was at most
            ``PerfOptions.goodput_latency_us`` (None when no bound was given): goodput is
            ``within_bound_count * batch_size / window_s``.
    """

    level: LoadLevel
    batch_size: int
    window_s: float
    request_count: int
    error_count: int
    delayed_count: int
    sent_count: int
    throughput_infer_per_s: float
    send_rate_per_s: float
    latency_avg_us: int
    latency_std_us: int
    latency_min_us: int
    latency_max_us: int
    percentiles_us: dict[int, int]
    stabilizing_latency_us: int
    percentile: int | None
    client_send_us: int
    client_recv_us: int
    response_wait_us: int
    network_us: int = 0
    server: ServerStats | None = None
    stable: bool = True
    errors: tuple[str, ...] = field(default_factory=tuple)
    within_bound_count: int | None = None

    @property
    def p50_us(self) -> int:
        return self.percentiles_us[50]

    @property
    def p90_us(self) -> int:
        return self.percentiles_us[90]

    @property
    def p95_us(self) -> int:
        return self.percentiles_us[95]

    @property
    def p99_us(self) -> int:
        return self.percentiles_us[99]

    @property
    def delayed_pct(self) -> float:
        """Percent of the window's requests sent behind schedule (perf_analyzer warns above 1 %)."""
        return 100.0 * self.delayed_count / self.request_count if self.request_count else 0.0

    def as_dict(self) -> dict:
        """JSON-ready, snake_case, units in the names (µs, per second)."""
        return {
            "mode": self.level.mode, "value": self.level.value, "batch_size": self.batch_size,
            "window_s": self.window_s, "request_count": self.request_count,
            "error_count": self.error_count, "delayed_count": self.delayed_count,
            "sent_count": self.sent_count, "throughput_infer_per_s": self.throughput_infer_per_s,
            "send_rate_per_s": self.send_rate_per_s, "latency_avg_us": self.latency_avg_us,
            "latency_std_us": self.latency_std_us, "latency_min_us": self.latency_min_us,
            "latency_max_us": self.latency_max_us,
            "percentiles_us": {str(p): v for p, v in self.percentiles_us.items()},
            "stabilizing_latency_us": self.stabilizing_latency_us, "percentile": self.percentile,
            "client_send_us": self.client_send_us, "client_recv_us": self.client_recv_us,
            "response_wait_us": self.response_wait_us, "network_us": self.network_us,
            "server": self.server.as_dict() if self.server else None,
            "stable": self.stable, "errors": list(self.errors),
            "within_bound_count": self.within_bound_count,
        }


def summarize(level: LoadLevel, batch_size: int, records: Sequence[RequestRecord],
              window_ns: tuple[int, int], sent_count: int, *, percentile: int | None = None,
              stability_percentage: float = 10.0,
              server: ServerStats | None = None,
              latency_bound_us: float | None = None) -> StepResult | None:
    """A :class:`StepResult` from the records of the requests that ended in the window.

    Args:
        records: every record of the step (those ending outside ``window_ns`` are skipped).
        window_ns: (start, end) of the window, ``time.monotonic_ns()``.
        sent_count: requests sent during the window.
        percentile: the stabilizing percentile (None = average latency).
        latency_bound_us: count the successful requests at most this slow, **µs**
            (:attr:`StepResult.within_bound_count`); None = not counted.

    Returns:
        None when no request succeeded in the window (perf_analyzer: "No valid requests
        recorded within time interval").
    """
    start, end = window_ns
    inside = [r for r in records if start <= r.end_ns <= end]
    good = [r for r in inside if r.ok]
    if not good:
        return None
    window_s = (end - start) / 1e9
    latencies = sorted(r.end_ns - r.start_ns for r in good)
    wanted = sorted(set(DEFAULT_PERCENTILES) | ({percentile} if percentile else set()))
    percentiles = {p: percentile_ns(latencies, p) // 1000 for p in wanted}
    avg_ns = sum(latencies) // len(latencies)
    send_ns = sum(r.call_ns - r.start_ns for r in good) // len(good)
    recv_ns = sum(r.end_ns - r.return_ns for r in good) // len(good)
    return StepResult(
        level=level, batch_size=batch_size, window_s=window_s, request_count=len(good),
        error_count=len(inside) - len(good), delayed_count=sum(r.delayed for r in good),
        sent_count=sent_count, throughput_infer_per_s=len(good) * batch_size / window_s,
        send_rate_per_s=sent_count / window_s, latency_avg_us=avg_ns // 1000,
        latency_std_us=_std_us(latencies, avg_ns), latency_min_us=latencies[0] // 1000,
        latency_max_us=latencies[-1] // 1000, percentiles_us=percentiles,
        stabilizing_latency_us=percentiles[percentile] if percentile else avg_ns // 1000,
        percentile=percentile,
        client_send_us=send_ns // 1000, client_recv_us=recv_ns // 1000,
        response_wait_us=sum(r.return_ns - r.call_ns for r in good) // len(good) // 1000,
        network_us=_network_us(avg_ns - send_ns - recv_ns, server), server=server,
        stable=_stable(good, window_ns, percentile, stability_percentage),
        errors=tuple(dict.fromkeys(r.error for r in inside if not r.ok))[:5],
        within_bound_count=(None if latency_bound_us is None else
                            bisect.bisect_right(latencies, latency_bound_us * 1000)),
    )


def _network_us(wait_ns: int, server: ServerStats | None) -> int:
    if server is None:
        return 0
    accounted = (server.avg_ns("queue") + server.compute_ns + server.avg_ns("cache_hit")
                 + server.avg_ns("cache_miss"))
    return max(wait_ns - accounted, 0) // 1000


def _std_us(latencies: Sequence[int], avg_ns: int) -> int:
    if len(latencies) < 2:
        return 0
    variance = sum((x - avg_ns) ** 2 for x in latencies) / (len(latencies) - 1)
    return int(math.sqrt(variance)) // 1000


def _stable(good: Sequence[RequestRecord], window_ns: tuple[int, int], percentile: int | None,
            stability_percentage: float) -> bool:
    """perf_analyzer's stability rule (max / min <= 1 + threshold for throughput and for the
    stabilizing latency) over the window's three thirds instead of three windows."""
    start, end = window_ns
    third = (end - start) / 3
    throughputs, latencies = [], []
    for i in range(3):
        lo, hi = start + i * third, start + (i + 1) * third
        part = sorted(r.end_ns - r.start_ns for r in good if lo <= r.end_ns <= hi)
        if not part:
            return False
        throughputs.append(len(part))
        latencies.append(percentile_ns(part, percentile) if percentile else sum(part) / len(part))
    limit = 1 + stability_percentage / 100.0
    return max(throughputs) / min(throughputs) <= limit and max(latencies) / min(latencies) <= limit
