"""``workbench perf``: the product's own load generator, perf_analyzer's numbers from Python.

It sends requests at a fixed concurrency (closed loop) or at a request rate (open loop,
constant or Poisson spacing) to a server over HTTP or gRPC, or to a :class:`workbench.Server`
in this process, and reports what perf_analyzer reports - client-side throughput
(batch-weighted infer/sec), latency average and p50/p90/p95/p99 in **microseconds**, the
server's queue / compute split from its statistics - as perf_analyzer's CSV, as JSON
records, or as :class:`StepResult` objects.

In a notebook or the dashboard, on an engine in the same process::

    from workbench.perf import InProcessClient, LoadLevel, PerfOptions, knee, sweep

    options = PerfOptions("digits_mlp", measurement_interval_ms=2000)
    levels = [LoadLevel.concurrency(c) for c in (1, 2, 4, 8, 16)]
    results = [r async for r in sweep(InProcessClient(server), options, levels)]
    knee(results)

Against a remote server, ``remote_client("localhost:8001", "grpc")`` instead (close it
with ``await client.close()``); from a shell, ``workbench perf -m digits_mlp``.

Layering: like the hosts and the UI, this package uses only the names
:mod:`workbench` exports.
"""

from workbench.perf.clients import InProcessClient, PerfClient
from workbench.perf.console import settings_text, step_text, summary_line, summary_text
from workbench.perf.errors import PerfError
from workbench.perf.export import csv_columns, csv_text, json_records, write_csv, write_json
from workbench.perf.inputs import shape_overrides
from workbench.perf.measure import Workload, prepare_workload, run_step
from workbench.perf.model_info import InputSpec, ModelInfo
from workbench.perf.options import LoadLevel, PerfOptions, levels_from_range, parse_range
from workbench.perf.remote import GrpcClient, HttpClient, remote_client
from workbench.perf.results import StepResult
from workbench.perf.server_stats import ServerStats
from workbench.perf.sweeps import best_under_sla, knee, sweep

__all__ = [
    "GrpcClient",
    "HttpClient",
    "InProcessClient",
    "InputSpec",
    "LoadLevel",
    "ModelInfo",
    "PerfClient",
    "PerfError",
    "PerfOptions",
    "ServerStats",
    "StepResult",
    "Workload",
    "best_under_sla",
    "csv_columns",
    "csv_text",
    "json_records",
    "knee",
    "levels_from_range",
    "parse_range",
    "prepare_workload",
    "remote_client",
    "run_step",
    "settings_text",
    "shape_overrides",
    "step_text",
    "summary_line",
    "summary_text",
    "sweep",
    "write_csv",
    "write_json",
]
