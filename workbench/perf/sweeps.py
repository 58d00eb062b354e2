"""Sweeps over load levels, and how to read them: the knee and the best setting under an SLA.

:func:`sweep` yields each step's :class:`StepResult` as soon as it is measured, so a UI can
plot throughput against p99 while the sweep runs (close the iterator to stop it). The two
readers are pure functions of a result list:

* :func:`knee` - the last level worth its latency. Going through the results by increasing
  load, the knee is the level *before* the first step whose throughput grows by less than
  ``min_gain_pct`` percent while its p99 grows by more than ``max_p99_growth_pct`` percent
  (defaults 10 % and 20 %): past it, more load mostly buys queueing. The rule compares
  neighbours, so it assumes steps that add a meaningful share of load each (a doubling
  sweep such as 1, 2, 4, 8, 16); with many tiny steps every gain looks small.
* :func:`best_under_sla` - the highest throughput whose p99 meets a latency target.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, Sequence

from workbench.perf.clients import PerfClient
from workbench.perf.measure import Workload, prepare_workload, run_step
from workbench.perf.options import LoadLevel, PerfOptions
from workbench.perf.results import StepResult


async def sweep(client: PerfClient, options: PerfOptions, levels: Sequence[LoadLevel],
                workload: Workload | None = None) -> AsyncGenerator[StepResult, None]:
    """Measure each level in order, yielding its result as soon as it is measured.

    Stops early after a step whose stabilizing latency reaches
    ``options.latency_threshold_ms`` (perf_analyzer's ``--latency-threshold``; that step is
    still yielded). A sweep of n levels takes about ``n * (warmup_ms +
    measurement_interval_ms)``.

    Args:
        workload: the model and prepared requests; read through ``client`` when None
            (:func:`workbench.perf.prepare_workload`).

    Raises:
        PerfError: as :func:`workbench.perf.prepare_workload` and
            :func:`workbench.perf.run_step`, from the step that failed; the steps before it
            were yielded already.
    """
    workload = workload or await prepare_workload(client, options)
    for level in levels:
        result = await run_step(client, workload, level, options)
        yield result
        threshold = options.latency_threshold_ms
        if threshold is not None and result.stabilizing_latency_us >= threshold * 1000:
            return


def knee(results: Sequence[StepResult], min_gain_pct: float = 10.0,
         max_p99_growth_pct: float = 20.0) -> StepResult | None:
    """The saturation point of a sweep (the rule is in the module docstring).

    Results are ordered by load level (concurrency or request rate), whatever order they
    come in; steps with errors are compared like the others.

    Returns:
        The knee, or None when no step saturates (fewer than two results, or throughput kept
        growing or p99 kept flat through the sweep: measure further).
    """
    ordered = sorted(results, key=lambda r: r.level.value)
    for before, after in itertools.pairwise(ordered):
        if before.throughput_infer_per_s <= 0 or before.p99_us <= 0:
            continue
        gain = _growth_pct(before.throughput_infer_per_s, after.throughput_infer_per_s)
        p99_growth = _growth_pct(before.p99_us, after.p99_us)
        if gain < min_gain_pct and p99_growth > max_p99_growth_pct:
            return before
    return None


def _growth_pct(before: float, after: float) -> float:
    return (after - before) / before * 100.0


def best_under_sla(results: Sequence[StepResult], p99_us: float) -> StepResult | None:
    """The step with the highest throughput whose p99 latency is at most ``p99_us``
    **microseconds** and that had no failed request; on a tie, the lower load.

    Returns:
        None when no step meets the target.
    """
    meeting = [r for r in results if r.p99_us <= p99_us and r.error_count == 0]
    if not meeting:
        return None
    return max(meeting, key=lambda r: (r.throughput_infer_per_s, -r.level.value))
