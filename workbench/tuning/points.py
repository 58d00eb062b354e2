"""A measured point: one setting at one load level, repeated until stable, and how it is
judged against the :class:`~workbench.tuning.goals.Goals`.

**Stability** is perf_analyzer's rule: a point is measured window after window until its
last three windows agree - throughput and the latency at the goals' percentile each within
``stability_percentage`` of their mean (perf_analyzer: ``--stability-percentage``, default
10 %) - or until ``max_windows`` windows, when it is *unstable*. The point's figures are the
medians of its last three windows. An unstable point is shown but never recommended.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workbench.perf import LoadLevel, StepResult
from workbench.tuning.goals import Goals
from workbench.tuning.space import Setting

#: windows that must agree
STABLE_WINDOWS = 3


def spread_pct(values: Sequence[float]) -> float:
    """(max - min) / mean of ``values``, in percent (0 for fewer than two or a zero mean)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return 0.0 if mean <= 0 else (max(values) - min(values)) / mean * 100.0


def deviation_pct(values: Sequence[float]) -> float:
    """The largest distance of ``values`` from their mean, in percent of the mean (0 for fewer
    than two or a zero mean): what the stability rule compares with its tolerance (a spread,
    max - min, can reach twice the tolerance on a stable point)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return 0.0 if mean <= 0 else max(abs(v - mean) for v in values) / mean * 100.0


def window_latency_us(result: StepResult, percentile: int) -> float:
    return float(result.percentiles_us.get(percentile, result.p99_us))


def stability(windows: Sequence[StepResult], percentile: int, tolerance_pct: float) -> tuple[bool, float, float]:
    """``(stable, throughput spread %, latency spread %)`` of the last :data:`STABLE_WINDOWS`
    windows: stable when every one of them is within ``tolerance_pct`` of their mean, in
    throughput and in latency (perf_analyzer's rule)."""
    last = windows[-STABLE_WINDOWS:]
    if len(last) < STABLE_WINDOWS:
        return False, 0.0, 0.0
    throughput = spread_pct([w.throughput_infer_per_s for w in last])
    latency = spread_pct([window_latency_us(w, percentile) for w in last])
    mean_t = statistics.fmean(w.throughput_infer_per_s for w in last)
    mean_l = statistics.fmean(window_latency_us(w, percentile) for w in last)
    within = all(abs(w.throughput_infer_per_s - mean_t) <= mean_t * tolerance_pct / 100
                 and abs(window_latency_us(w, percentile) - mean_l) <= mean_l * tolerance_pct / 100
                 for w in last)
    return within, throughput, latency


@dataclass(frozen=True)
class Point:
    """One setting measured at one load level.

    Attributes:
        setting: the config setting.
        level: the load.
        windows: every window measured (the last three decide).
        stable: the last three windows agree (see the module docstring).
        throughput_spread_pct, latency_spread_pct: (max - min) / mean of the last three.
        cpu_s_per_inference: CPU seconds the serving process spent per inference over the
            windows (**seconds**; None where not readable: a remote server). For an
            in-process engine it includes the load generator's own work.
        from_resume: read from a saved run instead of measured now.
        steps: for an ensemble (or a BLS model), every model that executed during the
            point -> ``executions``, ``inferences``, ``compute_us_per_execution`` (**µs**) and
            ``utilization`` (the share of the point's wall time its instances were busy,
            0..1 per instance): what shows the bottleneck step.
        probe: the machine's speed probe right after the point
            (:attr:`workbench.tuning.machine.SpeedProbe.kloops_per_s`): a slow probe beside a
            slow point says the machine, not the config, was slow.
    """

    setting: Setting
    level: LoadLevel
    windows: tuple[StepResult, ...]
    stable: bool
    throughput_spread_pct: float
    latency_spread_pct: float
    cpu_s_per_inference: float | None = None
    from_resume: bool = False
    steps: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    probe: float | None = None

    def deviation_pct(self, percentile: int) -> float:
        """The largest deviation of the last three windows from their mean, throughput or the
        latency at ``percentile``, in **%**: the figure the stability rule tests (a point is
        stable when it is within the tolerance, with three windows)."""
        last = self.windows[-STABLE_WINDOWS:]
        return max(deviation_pct([w.throughput_infer_per_s for w in last]),
                   deviation_pct([window_latency_us(w, percentile) for w in last]))

    def _median(self, read) -> float:
        return float(statistics.median(read(w) for w in self.windows[-STABLE_WINDOWS:]))

    @property
    def throughput(self) -> float:
        """Median inferences/s."""
        return self._median(lambda w: w.throughput_infer_per_s)

    def latency_us(self, percentile: int) -> float:
        """Median latency at ``percentile`` (50, 90, 95, 99), **µs**."""
        return self._median(lambda w: window_latency_us(w, percentile))

    @property
    def p99_us(self) -> float:
        return self.latency_us(99)

    @property
    def errors(self) -> int:
        return sum(w.error_count for w in self.windows)

    @property
    def goodput(self) -> float | None:
        """Median inferences/s within the SLA (None when the windows did not count them)."""
        if any(w.within_bound_count is None for w in self.windows):
            return None
        return self._median(lambda w: (w.within_bound_count or 0) * w.batch_size / w.window_s)

    @property
    def instances(self) -> int:
        """Instances the tuned model runs with in this setting (those of every step for an
        ensemble's setting; 1 where the setting does not say)."""
        counts = [v for k, v in self.setting.values if k.rpartition("/")[2] == "instance_count"]
        return sum(counts) if counts else 1  # type: ignore[arg-type]

    def avg_batch(self) -> float | None:
        """The batch size the server formed on average in the last windows (inferences per
        execution, from its statistics), None without statistics."""
        pairs = [(w.server.inference_count, w.server.execution_count)
                 for w in self.windows[-STABLE_WINDOWS:] if w.server is not None]
        executions = sum(e for _, e in pairs)
        return sum(i for i, _ in pairs) / executions if executions else None

    def compute_us_per_execution(self) -> float | None:
        """Mean compute (input + infer + output) of one execution, **µs** (every request of a
        batch is charged its batch's compute in Triton's statistics), None without them."""
        values = [w.server.compute_ns / 1000 for w in self.windows[-STABLE_WINDOWS:]
                  if w.server is not None and w.server.compute_ns]
        return statistics.median(values) if values else None

    def as_dict(self, goals: Goals | None = None) -> dict:
        percentile = goals.percentile if goals else 99
        return {
            "setting": self.setting.as_dict(), "label": self.setting.label,
            "level": {"mode": self.level.mode, "value": self.level.value},
            "throughput_infer_per_s": round(self.throughput, 3),
            "latency_us": {str(p): round(self.latency_us(p)) for p in (50, 90, 95, 99)},
            "percentile": percentile,
            "goodput_infer_per_s": None if self.goodput is None else round(self.goodput, 3),
            "errors": self.errors, "stable": self.stable,
            "throughput_spread_pct": round(self.throughput_spread_pct, 1),
            "latency_spread_pct": round(self.latency_spread_pct, 1),
            "windows": len(self.windows), "avg_batch": self.avg_batch(),
            "compute_us_per_execution": self.compute_us_per_execution(),
            "cpu_s_per_inference": self.cpu_s_per_inference,
            "from_resume": self.from_resume,
            "steps": {k: dict(v) for k, v in self.steps.items()},
            "probe_kops": None if self.probe is None else round(self.probe, 1),
            "window_results": [w.as_dict() for w in self.windows],
        }


def meets(point: Point, goals: Goals, memory_mb: float | None = None, gpu_memory_mb: float | None = None) -> list[str]:
    """Why ``point`` fails the goals' constraints (empty: it meets them): failed requests,
    the SLA, the minimum throughput, the host and GPU memory budgets (``memory_mb``,
    ``gpu_memory_mb``: the setting's measured memory, **MiB**; None: not measured)."""
    why = []
    if point.errors:
        why.append(f"{point.errors} failed request(s)")
    if goals.sla_us is not None and point.latency_us(goals.percentile) > goals.sla_us:
        why.append(f"p{goals.percentile} {point.latency_us(goals.percentile) / 1000:.2f} ms > SLA {goals.sla_ms:g} ms")
    if goals.min_throughput is not None and point.throughput < goals.min_throughput:
        why.append(f"{point.throughput:.1f} infer/s < {goals.min_throughput:g}")
    if goals.host_memory_mb is not None and memory_mb is not None and memory_mb > goals.host_memory_mb:
        why.append(f"memory {memory_mb:,.0f} MiB > budget {goals.host_memory_mb:,.0f} MiB")
    if goals.gpu_memory_mb is not None and gpu_memory_mb is not None and gpu_memory_mb > goals.gpu_memory_mb:
        why.append(f"GPU memory {gpu_memory_mb:,.0f} MiB > budget {goals.gpu_memory_mb:,.0f} MiB")
    return why


def score(point: Point, goals: Goals) -> float:
    """The objective's value for ``point`` (higher is better; see
    :mod:`workbench.tuning.goals`)."""
    if goals.objective == "latency":
        return -point.latency_us(goals.percentile)
    if goals.objective == "throughput_per_instance":
        return point.throughput / max(point.instances, 1)
    if goals.objective == "goodput":
        good = point.goodput
        return point.throughput if good is None else good
    return point.throughput


__all__ = ["STABLE_WINDOWS", "Point", "meets", "score", "spread_pct", "stability"]
