"""Constructed measurements for the tuner's pure tests: StepResults and Points with chosen
throughput and latency (the arithmetic under test is the tuner's, not perf's)."""

from __future__ import annotations

from workbench.perf import LoadLevel, ServerStats, StepResult
from workbench.tuning.points import Point, stability
from workbench.tuning.space import Setting


def step(throughput: float, p99_ms: float, *, level: int = 1, errors: int = 0, within: int | None = None,
         batch: float | None = None, compute_us: float = 100.0) -> StepResult:
    """A one-second window at concurrency ``level`` with these figures; ``batch``: the
    server's average batch (server statistics attached), None for none."""
    p99 = int(p99_ms * 1000)
    server = None
    if batch is not None:
        executions = max(int(throughput / batch), 1)
        requests = int(throughput)
        infer_ns = int(compute_us * 1000 * requests)
        server = ServerStats("1", int(throughput), executions,
                             {"compute_input": (requests, 0), "compute_infer": (requests, infer_ns),
                              "compute_output": (requests, 0), "success": (requests, 0)})
    return StepResult(level=LoadLevel.concurrency(level), batch_size=1, window_s=1.0,
                      request_count=int(throughput), error_count=errors, delayed_count=0,
                      sent_count=int(throughput), throughput_infer_per_s=throughput, send_rate_per_s=throughput,
                      latency_avg_us=p99 // 2, latency_std_us=0, latency_min_us=p99 // 4, latency_max_us=p99,
                      percentiles_us={50: p99 // 2, 90: p99 * 9 // 10, 95: p99 * 19 // 20, 99: p99},
                      stabilizing_latency_us=p99, percentile=99, client_send_us=0, client_recv_us=0,
                      response_wait_us=p99 // 2, server=server, within_bound_count=within)


def point(setting: Setting, throughputs: list[float], p99_ms: float, *, level: int = 1, tolerance: float = 10.0,
          **kwargs) -> Point:
    """A point whose windows have these throughputs (its stability judged by the real rule)."""
    windows = tuple(step(t, p99_ms, level=level, **kwargs) for t in throughputs)
    stable, spread_t, spread_l = stability(windows, 99, tolerance)
    return Point(setting, LoadLevel.concurrency(level), windows, stable, spread_t, spread_l)


def setting(**values) -> Setting:
    return Setting(tuple(values.items()))
