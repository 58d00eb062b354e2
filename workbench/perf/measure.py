"""One measurement step: warm up, measure a window, read the server's counters around it.

A step starts its load loop, lets it run ``warmup_ms`` (left out of every number), reads
the server's statistics, measures ``measurement_interval_ms``, reads the statistics again,
then stops sending and waits for the requests in flight. Only requests whose response
ended inside the window count (perf_analyzer's rule), so the drain at the end never
stretches the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from workbench.perf.clients import PerfClient
from workbench.perf.errors import PerfError, error_text
from workbench.perf.inputs import request_tensors
from workbench.perf.load import Load, make_load
from workbench.perf.model_info import ModelInfo
from workbench.perf.options import LoadLevel, PerfOptions
from workbench.perf.results import StepResult, summarize
from workbench.perf.server_stats import stats_delta


@dataclass(frozen=True, slots=True)
class Workload:
    """What every step of a measurement sends.

    Attributes:
        info: the model as read from its metadata and config.
        requests: the distinct prepared requests (:meth:`PerfClient.prepare`), sent
            round-robin.
    """

    info: ModelInfo
    requests: tuple[object, ...]


async def prepare_workload(client: PerfClient, options: PerfOptions) -> Workload:
    """Read the model through ``client`` and build its requests from ``options``.

    Raises:
        PerfError: the model is unknown or not ready ("failed to get model metadata: ..."
            with the server's text), a sequence or decoupled model, or inputs that cannot be
            built (batch size, ``--shape``, input data; :func:`request_tensors`).
    """
    name, version = options.model_name, options.model_version
    try:
        metadata = await client.model_metadata(name, version)
        config = await client.model_config(name, version)
    except Exception as exc:  # noqa: BLE001  (the target's error, whatever its client raises: made one line)
        raise PerfError(f"failed to get model metadata: {error_text(exc)}") from None
    info = ModelInfo.from_json(name, version, metadata, config)
    tensors = request_tensors(info, options)
    return Workload(info, tuple(client.prepare(name, version, t) for t in tensors))


async def run_step(client: PerfClient, workload: Workload, level: LoadLevel,
                   options: PerfOptions) -> StepResult:
    """Measure ``level`` once: warm-up, one window, server counters around it.

    Takes about ``warmup_ms + measurement_interval_ms`` plus the drain of the requests in
    flight (at most ``drain_timeout_s``). Cancelling the task stops the load and cancels the
    requests in flight at once.

    Raises:
        PerfError: a request failed and ``options.continue_on_error`` is off (the step stops
            at once; perf_analyzer aborts too), or no request succeeded in the window
            (perf_analyzer's "No valid requests recorded within time interval").
    """
    load = make_load(level, client, workload.requests, distribution=options.request_distribution,
                     max_inflight=options.max_inflight, seed=options.seed)
    stop_on_error = not options.continue_on_error
    load.start()
    try:
        await _run_for(load, options.warmup_ms, stop_on_error)
        before = await _statistics(client, options)
        start = time.monotonic_ns()
        await _run_for(load, options.measurement_interval_ms, stop_on_error)
        end = time.monotonic_ns()
        after = await _statistics(client, options)
    except BaseException:  # cancelled (a UI's stop button) or broken: no drain, cancel at once
        await load.stop(drain_timeout_s=0)
        raise
    await load.stop(options.drain_timeout_s)
    if stop_on_error and load.failed.is_set():
        raise PerfError(f"{level}: a request failed: {load.first_error} "
                        "(--continue-on-error counts failures instead)")
    server = None
    if before is not None and after is not None:
        server = stats_delta(before, after, options.model_name, options.model_version,
                             workload.info.response_cache)
    sent = sum(start <= t <= end for t in load.send_times_ns)
    result = summarize(level, options.batch_size, load.records, (start, end), sent,
                       percentile=options.percentile,
                       stability_percentage=options.stability_percentage, server=server,
                       latency_bound_us=options.goodput_latency_us)
    if result is None:
        failed = f" ({load.first_error})" if load.first_error else ""
        raise PerfError(f"{level}: No valid requests recorded within time interval{failed}. "
                        "Please use a larger time window.")
    return result


async def _run_for(load: Load, milliseconds: float, stop_on_error: bool) -> None:
    """Let the load run ``milliseconds``; return early on a failure when it stops the step."""
    if not stop_on_error:
        await asyncio.sleep(milliseconds / 1000)
        return
    with contextlib.suppress(asyncio.TimeoutError):  # TimeoutError itself from Python 3.11
        await asyncio.wait_for(load.failed.wait(), milliseconds / 1000)


async def _statistics(client: PerfClient, options: PerfOptions) -> dict | None:
    """The statistics snapshot, or None when not wanted or not available (a server without
    the extension: perf_analyzer then leaves the server columns out)."""
    if not options.server_stats:
        return None
    try:
        return await client.statistics(options.model_name, options.model_version)
    except Exception:  # noqa: BLE001  (no statistics extension, or the model went away: client side only)
        return None

