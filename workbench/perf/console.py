"""What ``workbench perf`` prints, in perf_analyzer's words and units (usec, infer/sec).

perf_analyzer prints its settings, a client/server block per step, then one summary line
per step (``Concurrency: 4, throughput: 1234.5 infer/sec, latency 812 usec``); so does
this, with the lines it cannot fill left out.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.perf.options import LoadLevel, PerfOptions, format_number
from workbench.perf.results import StepResult

#: perf_analyzer warns when more than this percent of the requests were sent late
DELAY_PCT_THRESHOLD = 1.0


def settings_text(options: PerfOptions, levels: Sequence[LoadLevel], kind: str) -> str:
    """perf_analyzer's ``*** Measurement Settings ***`` block."""
    latency = f"p{options.percentile} latency" if options.percentile else "average latency"
    limit = options.latency_threshold_ms or 0
    top = max(level.value for level in levels)
    load = (f"  Concurrency limit: {int(top)} concurrent requests"
            if levels[0].mode == "concurrency"
            else f"  Request Rate limit: {format_number(top)} requests per seconds")
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {options.batch_size}",
        f"  Service Kind: {kind}",
        '  Using "time_windows" mode for stabilization',
        f"  Measurement window: {options.measurement_interval_ms} msec",
        f"  Warm-up: {options.warmup_ms} msec per step",
        f"  Latency limit: {format_number(limit)} msec",
        load,
        "  Using asynchronous calls for inference",
        f"  Stabilizing using {latency}",
    ]
    if levels[0].mode == "request_rate":
        lines.insert(-2, f"  Using {options.request_distribution} distribution on request generation")
    return "\n".join(lines) + "\n"


def step_text(result: StepResult, kind: str) -> str:
    """The client / server block perf_analyzer prints after each step."""
    if result.level.mode == "concurrency":
        lines = [f"Request concurrency: {int(result.level.value)}"]
    else:
        lines = [f"Request Rate: {format_number(result.level.value)} inference requests per seconds"]
    lines += ["  Client: ", f"    Request count: {result.request_count}"]
    if result.delayed_pct > DELAY_PCT_THRESHOLD:
        lines += [f"    Avg send request rate: {result.send_rate_per_s:.2f} infer/sec",
                  "    [WARNING] workbench perf was not able to keep up with the desired request "
                  f"rate. {result.delayed_pct:.2f}% of the requests were delayed. "]
    lines.append(f"    Throughput: {format_number(result.throughput_infer_per_s)} infer/sec")
    if result.percentile is None:
        lines.append(f"    Avg latency: {result.latency_avg_us} usec "
                     f"(standard deviation {result.latency_std_us} usec)")
    lines += [f"    p{p} latency: {v} usec" for p, v in sorted(result.percentiles_us.items())]
    if kind in ("http", "grpc"):  # perf_analyzer's client-library line
        lines.append(_client_time(result, kind))
    if result.error_count:
        lines.append(f"    Failed requests: {result.error_count} ({'; '.join(result.errors)})")
    if not result.stable:
        lines.append("    [WARNING] throughput or latency moved more than the stability "
                     "percentage within the window; increase --measurement-interval")
    if result.server is not None:
        lines += _server_lines(result)
    return "\n".join(lines) + "\n"


def _client_time(result: StepResult, kind: str) -> str:
    name = "HTTP" if kind == "http" else "gRPC"
    total = result.response_wait_us + result.client_send_us + result.client_recv_us
    return (f"    Avg {name} time: {total} usec (send/recv "
            f"{result.client_send_us + result.client_recv_us} usec + response wait "
            f"{result.response_wait_us} usec)")


def _server_lines(result: StepResult) -> list[str]:
    s = result.server
    assert s is not None
    request_us = s.avg_us("success")
    compute_us = s.compute_ns // 1000
    overhead = max(request_us - s.avg_us("queue") - compute_us, 0)
    return [
        "  Server: ",
        f"    Inference count: {s.inference_count}",
        f"    Execution count: {s.execution_count}",
        f"    Successful request count: {s.count('success')}",
        f"    Avg request latency: {request_us} usec (overhead {overhead} usec + queue "
        f"{s.avg_us('queue')} usec + compute input {s.avg_us('compute_input')} usec + compute "
        f"infer {s.avg_us('compute_infer')} usec + compute output "
        f"{s.avg_us('compute_output')} usec)",
    ]


def summary_line(result: StepResult) -> str:
    """``Concurrency: 4, throughput: 1234.5 infer/sec, latency 812 usec`` (the stabilizing
    latency: the average, or the ``--percentile`` one)."""
    return (f"{result.level}, throughput: {format_number(result.throughput_infer_per_s)} "
            f"infer/sec, latency {result.stabilizing_latency_us} usec")


def summary_text(results: Sequence[StepResult]) -> str:
    """perf_analyzer's closing block: a title and :func:`summary_line` per step, in the
    order measured."""
    if not results:
        return ""
    which = f"p{results[0].percentile}" if results[0].percentile else "Average"
    lines = [f"Inferences/Second vs. Client {which} Batch Latency"]
    lines += [summary_line(r) for r in results]
    return "\n".join(lines) + "\n"
