"""Memory per instance, measured, with its method shown.

After each setting is loaded the tuner reads the serving process's resident memory (RSS,
``/proc/<pid>/status``; after a garbage collection when the engine is in this process).
Across the settings of one model, RSS is fitted against the instance count by least squares:
the slope is the memory one more instance takes, the intercept what the model costs with no
instance (weights shared across instances show there). With a single instance count measured
there is no slope: the per-instance figure is then the RSS growth since the run began, an
upper bound. RSS also moves with allocator caches and the load generator's buffers (in
process), so figures are rounded to whole MiB and the method is printed beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from workbench.tuning.space import Setting


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """``base_mb + per_instance_mb × instances`` of host memory, **MiB**, and how it was
    found (``method``: one sentence)."""

    base_mb: float
    per_instance_mb: float
    method: str

    def for_instances(self, instances: int) -> float:
        return self.base_mb + self.per_instance_mb * instances

    def as_dict(self) -> dict:
        return {"base_mb": round(self.base_mb, 1), "per_instance_mb": round(self.per_instance_mb, 1),
                "method": self.method}


def estimate(readings: Mapping[str, float | None], settings: Sequence[Setting], start_mb: float | None,
             instances: Callable[[Setting], int]) -> MemoryEstimate | None:
    """Fit the RSS readings (label -> MiB after loading that setting) against the instances
    each setting runs (``instances``; for an ensemble, all its steps') - see the module
    docstring; None without readings."""
    pairs = []
    for setting in settings:
        rss = readings.get(setting.label)
        if rss is not None:
            pairs.append((instances(setting), rss))
    if not pairs:
        return None
    counts = {c for c, _ in pairs}
    if len(counts) < 2:
        if start_mb is None:
            return None
        count = next(iter(counts))
        growth = max(max(r for _, r in pairs) - start_mb, 0.0)
        return MemoryEstimate(0.0, growth / count,
                              f"RSS growth since the run began over {count} instance(s): an upper "
                              "bound (one instance count measured, no fit)")
    n = len(pairs)
    mx = sum(c for c, _ in pairs) / n
    my = sum(r for _, r in pairs) / n
    sxx = sum((c - mx) ** 2 for c, _ in pairs)
    slope = max(sum((c - mx) * (r - my) for c, r in pairs) / sxx, 0.0)
    base = my - slope * mx
    return MemoryEstimate(base, slope, f"least-squares fit of the serving process's RSS after each load "
                          f"against the instance count ({n} loads, counts {sorted(counts)})")


__all__ = ["MemoryEstimate", "estimate"]
