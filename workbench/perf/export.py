"""perf_analyzer's latency report (``-f results.csv``) and the same table as JSON records.

The CSV follows perf_analyzer's ``ReportWriter``: first column ``Concurrency`` or
``Request Rate``; the server columns only when server statistics were read; ``Server Cache
Hit`` / ``Server Cache Miss`` only for a model with the response cache enabled; one
``pN latency`` column per reported percentile; with ``verbose_csv`` (``--verbose-csv``)
``Avg latency`` (only when no ``--percentile`` was given), ``request/response`` and
``response wait``. Rows are sorted by increasing throughput, as perf_analyzer sorts them.
Every duration is whole **microseconds**; throughput is infer/sec (batch-weighted) printed
with 6 significant digits.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

from workbench.perf.options import format_number
from workbench.perf.results import StepResult

SERVER_COLUMNS = ("Network+Server Send/Recv", "Server Queue", "Server Compute Input",
                  "Server Compute Infer", "Server Compute Output")
CACHE_COLUMNS = ("Server Cache Hit", "Server Cache Miss")


def _with_server(results: Sequence[StepResult]) -> bool:
    return any(r.server is not None for r in results)


def _with_cache(results: Sequence[StepResult]) -> bool:
    return any(r.server is not None and r.server.response_cache for r in results)


def csv_columns(results: Sequence[StepResult], verbose_csv: bool = False) -> list[str]:
    """perf_analyzer's CSV header for these results.

    Raises:
        ValueError: no results.
    """
    if not results:
        raise ValueError("no results to report")
    first = results[0]
    columns = [first.level.label, "Inferences/Second", "Client Send"]
    if _with_server(results):
        columns += SERVER_COLUMNS
        columns += CACHE_COLUMNS if _with_cache(results) else ()
    columns.append("Client Recv")
    columns += [f"p{p} latency" for p in sorted(first.percentiles_us)]
    if verbose_csv:
        columns += ["Avg latency"] if first.percentile is None else []
        columns += ["request/response", "response wait"]
    return columns


def report_rows(results: Sequence[StepResult], verbose_csv: bool = False) -> list[dict]:
    """One dict per result, keyed by :func:`csv_columns`, numbers as numbers, sorted by
    increasing throughput (perf_analyzer's order)."""
    columns = csv_columns(results, verbose_csv)
    ordered = sorted(results, key=lambda r: r.throughput_infer_per_s)
    return [{c: v for c, v in zip(columns, _values(r, results, verbose_csv), strict=True)} for r in ordered]


def _values(result: StepResult, results: Sequence[StepResult], verbose_csv: bool) -> list:
    level = int(result.level.value) if result.level.mode == "concurrency" else result.level.value
    values: list = [level, result.throughput_infer_per_s, result.client_send_us]
    if _with_server(results):
        s = result.server
        keys = ("queue", "compute_input", "compute_infer", "compute_output")
        values += [result.network_us] + [s.avg_us(k) if s else 0 for k in keys]
        if _with_cache(results):
            values += [s.avg_us(k) if s else 0 for k in ("cache_hit", "cache_miss")]
    values.append(result.client_recv_us)
    values += [result.percentiles_us[p] for p in sorted(result.percentiles_us)]
    if verbose_csv:
        values += [result.latency_avg_us] if result.percentile is None else []
        values += [result.client_send_us + result.client_recv_us, result.response_wait_us]
    return values


def csv_text(results: Sequence[StepResult], verbose_csv: bool = False) -> str:
    """The CSV file perf_analyzer's ``-f`` writes, as text (header + one line per step)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_columns(results, verbose_csv))
    for row in report_rows(results, verbose_csv):
        writer.writerow([_cell(v) for v in row.values()])
    return buffer.getvalue()


def _cell(value: object) -> str:
    return format_number(value) if isinstance(value, float) else str(value)


def json_records(results: Sequence[StepResult], verbose_csv: bool = False) -> list[dict]:
    """The CSV's rows as JSON records (same keys, same order), each followed by what the
    CSV has no column for: ``Batch Size``, ``Request Count``, ``Errors``, ``Delayed
    Requests``, ``Send Rate`` (requests/s), ``Avg latency`` (µs, always), ``Min latency``,
    ``Max latency`` (µs) and ``Stable``."""
    ordered = sorted(results, key=lambda r: r.throughput_infer_per_s)
    records = []
    for row, result in zip(report_rows(results, verbose_csv), ordered, strict=True):
        row.update({
            "Batch Size": result.batch_size, "Request Count": result.request_count,
            "Errors": result.error_count, "Delayed Requests": result.delayed_count,
            "Send Rate": result.send_rate_per_s, "Avg latency": result.latency_avg_us,
            "Min latency": result.latency_min_us, "Max latency": result.latency_max_us,
            "Stable": result.stable,
        })
        records.append(row)
    return records


def write_csv(results: Sequence[StepResult], path: str | Path, verbose_csv: bool = False) -> None:
    """Write :func:`csv_text` to ``path`` (perf_analyzer's ``-f``)."""
    Path(path).write_text(csv_text(results, verbose_csv))


def write_json(results: Sequence[StepResult], path: str | Path, verbose_csv: bool = False) -> None:
    """Write :func:`json_records` to ``path`` as a JSON array (``--json``)."""
    Path(path).write_text(json.dumps(json_records(results, verbose_csv), indent=2) + "\n")
