"""What a tuning run looks for: constraints a result must meet and the objective that ranks
the results that meet them.

Constraints (each optional): a latency SLA on a percentile (p99 by default, p95 and others
allowed; **milliseconds**), a minimum throughput (inferences/s), and memory budgets for the
model (host and GPU, **MiB**, for all its instances). Objectives, higher is better:

* ``throughput`` - inferences/s (perf_analyzer's batch-weighted infer/s);
* ``latency`` - the lowest latency at the chosen percentile (ranked as its negative);
* ``throughput_per_instance`` - inferences/s divided by the instances the setting runs;
* ``goodput`` - inferences/s whose latency met the SLA (requests over the SLA count for
  nothing; with no SLA, the same as throughput).

Model Analyzer's ``perf_throughput`` / ``perf_latency_p99`` objectives and
``perf_latency_p99`` / ``perf_throughput`` constraints are the first two; goodput and the
per-instance objective go beyond it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

OBJECTIVES = ("throughput", "latency", "throughput_per_instance", "goodput")


@dataclass(frozen=True, slots=True)
class Goals:
    """Constraints and objective of a run.

    Attributes:
        sla_ms: the latency target at :attr:`percentile`, **ms** (None: no SLA).
        percentile: which client latency percentile the SLA and the latency objective use
            (50, 90, 95 or 99).
        min_throughput: inferences/s a result must reach (None: any).
        host_memory_mb: host memory the model's instances may take, **MiB** (None: any).
        gpu_memory_mb: GPU memory the model's instances may take, **MiB** (None: any).
        objective: one of :data:`OBJECTIVES`.

    Raises:
        ValueError: an unknown objective or percentile, a bound <= 0.
    """

    sla_ms: float | None = None
    percentile: int = 99
    min_throughput: float | None = None
    host_memory_mb: float | None = None
    gpu_memory_mb: float | None = None
    objective: str = "throughput"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got '{self.objective}'")
        if self.percentile not in (50, 90, 95, 99):
            raise ValueError(f"percentile must be 50, 90, 95 or 99, got {self.percentile}")
        for name in ("sla_ms", "min_throughput", "host_memory_mb", "gpu_memory_mb"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")

    @property
    def sla_us(self) -> float | None:
        return None if self.sla_ms is None else self.sla_ms * 1000

    def text(self) -> str:
        """``p99 <= 10 ms, >= 100 infer/s, host memory <= 2,048 MiB; objective throughput``."""
        parts = []
        if self.sla_ms is not None:
            parts.append(f"p{self.percentile} ≤ {self.sla_ms:g} ms")
        if self.min_throughput is not None:
            parts.append(f"≥ {self.min_throughput:g} infer/s")
        if self.host_memory_mb is not None:
            parts.append(f"host memory ≤ {self.host_memory_mb:,.0f} MiB")
        if self.gpu_memory_mb is not None:
            parts.append(f"GPU memory ≤ {self.gpu_memory_mb:,.0f} MiB")
        return f"{', '.join(parts) or 'no constraint'}; objective {self.objective.replace('_', ' ')}"

    def as_dict(self) -> dict:
        return asdict(self)


__all__ = ["OBJECTIVES", "Goals"]
