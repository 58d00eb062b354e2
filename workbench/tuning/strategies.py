"""Search strategies: which settings and load levels a run measures.

* :func:`brute_force` - every setting of the space, each swept up the load axis until the
  SLA is broken or throughput stops growing (Model Analyzer's brute search does the same per
  config). For small spaces.
* :func:`quick_search` - a hill climb from the served config over one-axis neighbours, as
  Model Analyzer's quick search, with three savings on top:

  1. **Load targeting by Little's law.** At a stable point with throughput X and latency L
     under an SLA S, more load can raise throughput at most ~S/L-fold before the SLA binds,
     so the next level measured is the one near ``concurrency × S / L`` (L the median
     latency here, steadier than the tail; at most two steps
     of the axis up; one step back down when it overshoots), not every level in turn.
  2. **Early stopping.** After each point of a candidate, an upper bound of what it can
     reach on the load axis (Little's law: at concurrency C throughput is C / mean latency,
     and the mean latency does not fall with more load, so no level up to the top C_max
     gives more than C_max / the mean latency measured here) is compared with the best
     stable result so far: a candidate that cannot catch up within the tolerance is dropped.
  3. **A fitted batch model** (:mod:`workbench.tuning.batch_model`): the server's statistics
     say how full the batches were. A larger ``max_batch_size`` is skipped when the batches
     formed at the highest load measured averaged under 3/4 of the current one (nothing
     would change: the batcher never reached the limit).

  It stops when no untried neighbour of the best setting beats it by more than the
  tolerance (or the run's point budget is spent).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from workbench.perf import LoadLevel
from workbench.tuning.batch_model import BatchModel, fit
from workbench.tuning.decide import best_point
from workbench.tuning.goals import Goals
from workbench.tuning.lab import BudgetSpent, Lab
from workbench.tuning.points import Point, score
from workbench.tuning.space import Setting

STRATEGIES = ("quick", "brute")
#: throughput growth below which more load is not worth measuring (Model Analyzer: 5 %)
MIN_GAIN = 1.05


async def brute_force(lab: Lab) -> None:
    """Measure every setting (see the module docstring), after the served config (also
    when the space leaves its values out: the baseline every result is judged against)."""
    settings = lab.space.settings()
    if lab.space.baseline() not in settings:
        settings.insert(0, lab.space.baseline())
    lab.planned = len(settings) * len(lab.space.levels)
    try:
        for setting in settings:
            await _sweep_up(lab, setting, lab.space.levels, jump=False)
    except BudgetSpent as spent:
        lab.emit("skip", str(spent))


async def quick_search(lab: Lab) -> None:
    """A guided hill climb (see the module docstring)."""
    tolerance = lab.options.stability_percentage / 100
    current = lab.space.baseline()
    lab.planned = None
    try:
        await sweep_setting(lab, current, None)
        tried = {current}
        while True:
            best_here = setting_score(lab, current)
            moved = False
            for candidate in ordered_neighbours(lab, current, tried):
                tried.add(candidate)
                incumbent = max((v for s in tried if (v := setting_score(lab, s)) is not None), default=None)
                await sweep_setting(lab, candidate, incumbent)
                found = setting_score(lab, candidate)
                if found is not None and (best_here is None or found > best_here + abs(best_here) * tolerance):
                    current, moved = candidate, True
                    break
            if not moved:
                return
    except BudgetSpent as spent:
        lab.emit("skip", str(spent))


def setting_score(lab: Lab, setting: Setting) -> float | None:
    """The objective of ``setting``'s best stable point meeting the goals (None: none)."""
    best = best_point(lab.points_of(setting), lab.goals, lab.memory_mb)
    return None if best is None else score(best, lab.goals)


def ordered_neighbours(lab: Lab, setting: Setting, tried: set[Setting]) -> list[Setting]:
    """The untried neighbours of ``setting`` worth measuring, most promising first: for an
    ensemble, the knobs of its busiest step first (the utilization its statistics showed at
    ``setting``'s highest load); then more instances, larger batches, longer queue delays,
    then the smaller values. A larger ``max_batch_size`` the batches measured say cannot
    matter is skipped (and said so)."""
    found = []
    for other in lab.space.neighbours(setting):
        if other in tried:
            continue
        reason = predicted_same(lab, setting, other)
        if reason is not None:
            tried.add(other)
            lab.skipped[other.label] = reason
            lab.emit("skip", f"{other.label}: {reason}")
            continue
        found.append(other)

    points = lab.points_of(setting)
    steps = points[-1].steps if points else {}

    def rank(other: Setting) -> tuple[float, int, str]:
        for key, value in other.values:
            before = setting.get(key)
            if before != value:
                up = _greater(value, before)
                order = ("instance_count", "max_batch_size", "max_queue_delay_us")
                owner, _, knob = key.rpartition("/")
                busy = steps.get(owner, {}).get("utilization", 0.0) if owner else 0.0
                return (-busy, order.index(knob) if knob in order and up else len(order) + (0 if up else 1), key)
        return (0.0, 99, "")

    return sorted(found, key=rank)


def _greater(a: object, b: object) -> bool:
    try:
        return a > b  # type: ignore[operator]
    except TypeError:
        return len(a) > len(b) if isinstance(a, tuple) and isinstance(b, tuple) else False


def predicted_same(lab: Lab, setting: Setting, other: Setting) -> str | None:
    """Why ``other`` (one axis away) would measure as ``setting`` does, or None. Today one
    rule: a larger ``max_batch_size`` when the batches formed at ``setting``'s highest
    measured load averaged under 3/4 of its limit."""
    changed = [(k, v) for k, v in other.values if setting.get(k) != v]
    if len(changed) != 1 or changed[0][0].rpartition("/")[2] != "max_batch_size":
        return None
    key, value = changed[0]
    limit = setting.get(key)
    if not isinstance(limit, int) or not isinstance(value, int) or value <= limit or "/" in key:
        return None
    points = lab.points_of(setting)
    if not points:
        return None
    top = points[-1]
    batch = top.avg_batch()
    if batch is None or batch >= 0.75 * limit:
        return None
    return (f"batches averaged {batch:.1f} of max_batch_size {limit} at {top.level}: "
            f"a larger limit changes nothing at these loads")


async def sweep_setting(lab: Lab, setting: Setting, incumbent: float | None) -> list[Point]:
    """Measure ``setting`` up the load axis with Little's-law jumps and early stopping."""
    return await _sweep_up(lab, setting, lab.space.levels, jump=True, incumbent=incumbent)


async def _sweep_up(lab: Lab, setting: Setting, levels: Sequence[LoadLevel], jump: bool,
                    incumbent: float | None = None) -> list[Point]:
    goals = lab.goals
    sla = goals.sla_us
    measured: dict[int, Point] = {}
    i = 0
    while 0 <= i < len(levels) and i not in measured:
        point = await lab.measure(setting, levels[i])
        if point is None:
            break
        measured[i] = point
        latency = point.latency_us(goals.percentile)
        if goals.objective == "latency" and (goals.min_throughput is None or point.throughput >= goals.min_throughput):
            break  # more load only adds latency
        margin = 1 - lab.options.stability_percentage / 100
        if jump and incumbent is not None and ceiling(point, levels, goals) < incumbent * margin:
            lab.skipped.setdefault(setting.label, f"stopped early at {point.level}: cannot reach the best so far")
            lab.emit("skip", f"{setting.label}: stopped early at {point.level} (cannot beat the best so far)")
            break
        if sla is not None and latency > sla:
            if jump and i - 1 >= 0 and (i - 1) not in measured:
                i -= 1  # overshot: the level between
                continue
            break
        lower = [k for k in measured if k < i]
        before = measured[max(lower)] if lower else None
        if before is not None and point.throughput < before.throughput * MIN_GAIN:
            break  # saturated
        i = _next_level(i, point, levels, sla) if jump else i + 1
    return [measured[k] for k in sorted(measured)]


def _next_level(i: int, point: Point, levels: Sequence[LoadLevel], sla: float | None) -> int:
    """The next level index: near ``level × SLA / median latency`` (Little's law; the median,
    steadier than the tail, for the jump; the SLA itself is checked on the percentile), one
    to two steps up."""
    if sla is None:
        return i + 1
    target = point.level.value * sla / max(point.latency_us(50), 1.0)
    j = i + 1
    while j + 1 < len(levels) and j + 1 <= i + 2 and levels[j + 1].value <= target:
        j += 1
    return j


def ceiling(point: Point, levels: Sequence[LoadLevel], goals: Goals) -> float:
    """An upper bound of the objective ``point``'s setting can reach at any level of the axis
    (see the module docstring). Under concurrency C, throughput is C / (mean latency) by
    Little's law, and the mean latency does not fall as load rises, so no level up to the
    axis' top C_max gives more than ``C_max × batch / mean latency here``; under a request
    rate, no more than the top rate. The latency objective cannot improve with more load."""
    if goals.objective == "latency":
        return score(point, goals)
    batch = point.windows[-1].batch_size
    top = levels[-1].value
    if point.level.mode == "concurrency":
        mean_s = statistics.median(w.latency_avg_us for w in point.windows[-3:]) / 1e6
        ceiling = top * batch / max(mean_s, 1e-9)
    else:
        ceiling = top * batch
    return ceiling / max(point.instances, 1) if goals.objective == "throughput_per_instance" else ceiling


def batch_model(lab: Lab) -> BatchModel | None:
    """The batch model fitted over every point of the run (None when it cannot be fitted)."""
    return fit(lab.points)


async def run_strategy(name: str, lab: Lab) -> None:
    """Run strategy ``name`` (:data:`STRATEGIES`).

    Raises:
        ValueError: an unknown strategy.
    """
    if name == "quick":
        await quick_search(lab)
    elif name == "brute":
        await brute_force(lab)
    else:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got '{name}'")


__all__ = ["STRATEGIES", "batch_model", "brute_force", "ceiling", "ordered_neighbours", "predicted_same",
           "quick_search", "run_strategy", "setting_score", "sweep_setting"]
