"""What every model did during a point: the statistics of all the models, read before and
after, per model (:func:`step_figures`). For an ensemble this is each step; for a BLS step
it includes the models it calls, which no config declares - the tuner finds them here
(:func:`called_models`) and can tune them (Model Analyzer cannot tune an ensemble containing
a BLS step).
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench.perf import PerfClient
from workbench.perf.server_stats import stats_delta


async def all_statistics(client: PerfClient) -> dict | None:
    """Every model's statistics (None where the server has no statistics extension)."""
    try:
        return await client.statistics("", "")
    except Exception:  # noqa: BLE001 - no statistics extension: no step figures
        return None


def step_figures(before: dict | None, after: dict | None, elapsed_s: float,
                 instances: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """Model -> ``executions``, ``inferences``, ``compute_us_per_execution`` (**µs**),
    ``utilization`` (busy share of ``elapsed_s`` per instance; ``instances``: each model's
    instance count, 1 when unknown) for every model that executed between the snapshots."""
    if before is None or after is None or elapsed_s <= 0:
        return {}
    names = {entry.get("name") for entry in after.get("model_stats", [])}
    out: dict[str, dict[str, float]] = {}
    for name in sorted(n for n in names if n):
        delta = stats_delta(before, after, name, "")
        if delta is None or delta.execution_count <= 0:
            continue
        compute_us = delta.compute_ns / 1000
        busy_s = delta.execution_count * compute_us / 1e6
        out[name] = {"executions": float(delta.execution_count), "inferences": float(delta.inference_count),
                     "compute_us_per_execution": round(compute_us, 1),
                     "utilization": round(busy_s / elapsed_s / max(instances.get(name, 1), 1), 3)}
    return out


def called_models(steps: Mapping[str, Mapping[str, float]], model: str) -> list[str]:
    """The models that executed for ``model`` (itself excluded), busiest first."""
    return sorted((n for n in steps if n != model), key=lambda n: -steps[n].get("utilization", 0.0))


__all__ = ["all_statistics", "called_models", "step_figures"]
