"""``workbench perf``: perf_analyzer's flags over :mod:`workbench.perf`.

    workbench perf -m digits_mlp -u localhost:8000 -i http --concurrency-range 1:16:4 -f out.csv
    workbench perf -m digits_mlp --service-kind=triton_c_api --model-repository=DIR

Flags keep perf_analyzer's names, short forms and defaults; the ones it lacks
(``--warmup-interval``, ``--continue-on-error``, ``--json``, ``--max-inflight``, ``--seed``)
are marked in their help. Exit status 0 on success, 1 on any measurement error (printed as
one line, no traceback), 2 on bad flags (argparse).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from workbench.perf.clients import InProcessClient, PerfClient
from workbench.perf.console import settings_text, step_text, summary_text
from workbench.perf.engine_run import started_engine
from workbench.perf.errors import PerfError
from workbench.perf.export import write_csv, write_json
from workbench.perf.inputs import shape_overrides
from workbench.perf.measure import prepare_workload
from workbench.perf.options import LoadLevel, PerfOptions, levels_from_range
from workbench.perf.remote import remote_client
from workbench.perf.results import StepResult
from workbench.perf.sweeps import sweep


def add_arguments(perf: argparse.ArgumentParser) -> None:
    """perf_analyzer's flags, on the ``perf`` sub-command's parser."""
    perf.add_argument("-m", "--model-name", required=True)
    perf.add_argument("-x", "--model-version", default="", help="default: the latest ready version")
    perf.add_argument("-u", "--url", default=None, help="host:port (default localhost:8000 for "
                                                        "http, localhost:8001 for grpc)")
    perf.add_argument("-i", "--protocol", choices=["http", "grpc"], default="http")
    perf.add_argument("--service-kind", choices=["triton", "triton_c_api"], default="triton",
                      help="triton: a server at --url; triton_c_api: a workbench engine in this "
                           "process on --model-repository")
    perf.add_argument("--model-repository", default=None, help="with --service-kind=triton_c_api")
    perf.add_argument("-b", "--batch-size", type=int, default=1)
    load = perf.add_mutually_exclusive_group()
    load.add_argument("--concurrency-range", default=None, metavar="START[:END[:STEP]]",
                      help="requests kept in flight (default 1)")
    load.add_argument("--request-rate-range", default=None, metavar="START[:END[:STEP]]",
                      help="requests sent per second")
    perf.add_argument("--request-distribution", choices=["constant", "poisson"], default="constant")
    perf.add_argument("-p", "--measurement-interval", type=int, default=5000, metavar="MS")
    perf.add_argument("--warmup-interval", type=int, default=1000, metavar="MS",
                      help="load before each window, left out of the numbers (workbench only)")
    perf.add_argument("--percentile", type=int, default=None,
                      help="latency percentile for stability and the summary (default: average)")
    perf.add_argument("-s", "--stability-percentage", type=float, default=10.0)
    perf.add_argument("-l", "--latency-threshold", type=float, default=None, metavar="MS",
                      help="stop the sweep once the stabilizing latency reaches this")
    perf.add_argument("--max-inflight", type=int, default=1024,
                      help="request-rate mode: requests in flight at most (workbench only)")
    _add_data_arguments(perf)
    perf.add_argument("-f", "--latency-report-file", default=None, help="write the CSV report")
    perf.add_argument("--verbose-csv", action="store_true")
    perf.add_argument("--json", dest="json_file", default=None, metavar="FILE",
                      help="write the report as JSON records (workbench only)")
    perf.add_argument("--continue-on-error", action="store_true",
                      help="count failed requests instead of stopping (workbench only)")


def _add_data_arguments(perf: argparse.ArgumentParser) -> None:
    perf.add_argument("--input-data", default="random",
                      help="random (default), zero, or a JSON file in perf_analyzer's format")
    perf.add_argument("--zero-input", action="store_true", help="same as --input-data=zero")
    perf.add_argument("--shape", action="append", default=[], metavar="NAME:D1[,D2...]",
                      help="shape of an input with dynamic dims (repeatable)")
    perf.add_argument("--string-length", type=int, default=128)
    perf.add_argument("--string-data", default=None)
    perf.add_argument("--seed", type=int, default=None,
                      help="seed of random data and Poisson gaps (workbench only)")


def options_from_args(args: argparse.Namespace) -> PerfOptions:
    """Parsed flags -> :class:`PerfOptions`.

    Raises:
        PerfError: an invalid value (:class:`PerfOptions` checks).
    """
    return PerfOptions(
        model_name=args.model_name, model_version=args.model_version,
        batch_size=args.batch_size,
        input_data="zero" if args.zero_input else args.input_data,
        shapes=shape_overrides(args.shape), string_length=args.string_length,
        string_data=args.string_data, measurement_interval_ms=args.measurement_interval,
        warmup_ms=args.warmup_interval, percentile=args.percentile,
        stability_percentage=args.stability_percentage,
        request_distribution=args.request_distribution, max_inflight=args.max_inflight,
        latency_threshold_ms=args.latency_threshold,
        continue_on_error=args.continue_on_error, seed=args.seed,
    )


def levels_from_args(args: argparse.Namespace) -> list[LoadLevel]:
    """The levels of ``--request-rate-range`` or ``--concurrency-range`` (default c=1)."""
    if args.request_rate_range:
        return levels_from_range("request_rate", args.request_rate_range)
    return levels_from_range("concurrency", args.concurrency_range or "1")


@contextlib.asynccontextmanager
async def open_target(args: argparse.Namespace) -> AsyncIterator[PerfClient]:
    """The client the flags name; an in-process engine is started (explicit mode, only the
    measured model and what it needs) and stopped around it.

    Raises:
        PerfError: ``triton_c_api`` without a repository, or the engine failed to start.
    """
    if args.service_kind == "triton_c_api":
        if not args.model_repository:
            raise PerfError("--service-kind=triton_c_api needs --model-repository")
        async with started_engine(args.model_repository, args.model_name) as server:
            yield InProcessClient(server)
        return
    client = remote_client(args.url, args.protocol)
    try:
        yield client
    finally:
        await client.close()


async def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Measure as the flags say, print perf_analyzer's blocks to ``out`` (default stdout),
    write the reports.

    Reports hold the steps measured before a failing step, if any. Returns the exit status
    (errors are printed to stderr as one line).
    """
    out = out or sys.stdout
    results: list[StepResult] = []
    try:
        options = options_from_args(args)
        levels = levels_from_args(args)
        async with open_target(args) as client:
            workload = await prepare_workload(client, options)  # model errors before settings
            print(settings_text(options, levels, client.kind), file=out, flush=True)
            try:
                async for result in sweep(client, options, levels, workload):
                    print(step_text(result, client.kind), file=out, flush=True)
                    results.append(result)
            finally:
                _write_reports(args, results)
        print(summary_text(results), end="", file=out, flush=True)
    except PerfError as exc:
        print(f"workbench perf: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _write_reports(args: argparse.Namespace, results: list[StepResult]) -> None:
    if not results:
        return
    if args.latency_report_file:
        write_csv(results, args.latency_report_file, args.verbose_csv)
    if args.json_file:
        write_json(results, args.json_file, args.verbose_csv)


def main(args: argparse.Namespace) -> int:
    """``workbench perf``: :func:`run` on a fresh event loop (uvloop's when installed, as
    ``workbench serve`` uses: its timers keep a request-rate schedule tighter)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard] on Linux
        return asyncio.run(run(args))
    return uvloop.run(run(args))
