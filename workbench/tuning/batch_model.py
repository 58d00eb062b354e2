"""A fitted latency model of one execution: compute(b) ≈ a·b + c **µs** for a batch of b.

BentoML's adaptive batcher and Nexus fit batch latency the same way. The points come from
the server's statistics at every measured point (inferences per execution is the average
batch; every request of a batch is charged the batch's compute in Triton's statistics, so
the mean compute per request is the compute of one execution). With the fit, the capacity
of one instance at batch b is ``b / (a·b + c)`` executions' worth of inferences per µs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workbench.tuning.points import Point


@dataclass(frozen=True, slots=True)
class BatchModel:
    """``compute_us(b) = per_item_us * b + fixed_us``, fitted over ``samples`` points whose
    average batches ranged over ``batch_range``."""

    per_item_us: float
    fixed_us: float
    samples: int
    batch_range: tuple[float, float]

    def compute_us(self, batch: float) -> float:
        return self.per_item_us * batch + self.fixed_us

    def capacity(self, batch: float, instances: int = 1) -> float:
        """Inferences/s ``instances`` could run at batch ``batch`` if nothing else limited
        them (cores shared between instances lower it; the tuner measures that)."""
        cost = self.compute_us(batch)
        return instances * batch / cost * 1e6 if cost > 0 else float("inf")

    def text(self) -> str:
        return (f"compute per execution ≈ {self.per_item_us:.0f} µs × batch + {self.fixed_us:.0f} µs "
                f"(fitted on {self.samples} points, batches {self.batch_range[0]:.1f}–{self.batch_range[1]:.1f})")

    def as_dict(self) -> dict:
        return {"per_item_us": self.per_item_us, "fixed_us": self.fixed_us,
                "samples": self.samples, "batch_range": list(self.batch_range)}


def fit(points: Iterable[Point]) -> BatchModel | None:
    """Least squares over the points' (average batch, compute per execution); None with
    fewer than two points or batches that do not vary by at least 0.5."""
    pairs = [(b, c) for p in points if (b := p.avg_batch()) is not None
             and (c := p.compute_us_per_execution()) is not None]
    if len(pairs) < 2:
        return None
    xs, ys = [b for b, _ in pairs], [c for _, c in pairs]
    if max(xs) - min(xs) < 0.5:
        return None
    n = len(pairs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in pairs) / sxx
    a = max(a, 0.0)
    c = max(my - a * mx, 0.0)
    return BatchModel(a, c, n, (min(xs), max(xs)))


__all__ = ["BatchModel", "fit"]
