"""Tune several models, then plan them under one memory budget (:mod:`workbench.tuning.budget`).

Each model is tuned in turn with its own goals (its SLA), on the same target, so each one's
memory per instance is measured; the plan then picks one setting per model that fits the
budget with the highest combined objective. Example::

    from workbench.tuning import tune_models
    results, plan = await tune_models(server, {"digits_mlp": {"sla_ms": 5},
                                               "minilm_encoder": {"sla_ms": 80}},
                                      host_memory_mb=1024)
    plan              # the plan and its arithmetic
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench import Server
from workbench.tuning.budget import BudgetPlan, options_from_result, plan_budget
from workbench.tuning.result import TuneResult
from workbench.tuning.targets import Target
from workbench.tuning.tuner import tune


async def tune_models(where: Server | Target | str, models: Mapping[str, Mapping[str, Any]],
                      host_memory_mb: float, **common: Any) -> tuple[dict[str, TuneResult], BudgetPlan]:
    """Tune each model of ``models`` (name -> its own :func:`~workbench.tuning.tune`
    keyword arguments, e.g. ``{"sla_ms": 5}``; ``common`` applies to all), then plan them
    within ``host_memory_mb`` **MiB**.

    Raises:
        As :func:`~workbench.tuning.tune` for each model.
    """
    results: dict[str, TuneResult] = {}
    for name, own in models.items():
        results[name] = await tune(where, name, **{**common, **own})
    plan = plan_budget([options_from_result(r) for r in results.values()], host_memory_mb)
    return results, plan


__all__ = ["tune_models"]
