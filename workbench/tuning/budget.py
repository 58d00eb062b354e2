"""Several models under one memory budget: which setting each model runs so that they all
fit and the combined objective is highest - the production guide's sum (2.1 GB × 4 +
4.8 GB × 2 + 1.5 GB × 6 = 27 GB of 80) done by the tool.

Each model's options come from its tuning result (:func:`options_from_result`): for every
setting measured, its best stable point meeting that model's goals, and the memory the
setting's instances take (``per-instance memory × instances``, from the result's measured
estimate, :mod:`workbench.tuning.memory`). The plan (:func:`plan_budget`) picks one option
per model - a multiple-choice knapsack solved exactly by keeping, model after model, only
the (memory, value) combinations no other combination beats in both. The value of an
option is its objective relative to that model's served config (1.0 = as served), so a
model measured in thousands of inferences/s does not drown one measured in tens; a model
with no option that fits makes the plan infeasible, said so with the smallest it needs.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.tuning.decide import best_point
from workbench.tuning.goals import Goals
from workbench.tuning.points import Point, score
from workbench.tuning.result import TuneResult
from workbench.tuning.resume import point_from_dict


@dataclass(frozen=True, slots=True)
class ModelOption:
    """One way to run one model.

    Attributes:
        model: the model; ``setting``: the setting's label; ``instances``: its instances.
        memory_mb: what its instances take, **MiB** (``per_instance_mb × instances``).
        per_instance_mb: the measured memory of one instance, **MiB**.
        objective: the objective at the setting's best stable point meeting the goals
            (inferences/s for throughput objectives); ``relative``: that over the served
            config's (1.0 = as served).
        level: the load level that point was measured at (``concurrency 8``).
    """

    model: str
    setting: str
    instances: int
    memory_mb: float
    per_instance_mb: float
    objective: float
    relative: float
    level: str


@dataclass(frozen=True)
class BudgetPlan:
    """The chosen option per model (empty when infeasible), the budget, and why."""

    budget_mb: float
    chosen: tuple[ModelOption, ...]
    why: str

    @property
    def total_mb(self) -> float:
        return sum(o.memory_mb for o in self.chosen)

    def arithmetic(self) -> str:
        """``digits_mlp 6.5 MiB × 2 + minilm_encoder 88.0 MiB × 1 = 101.0 MiB of 512 MiB``."""
        if not self.chosen:
            return self.why
        terms = " + ".join(f"{o.model} {o.per_instance_mb:,.1f} MiB × {o.instances}" for o in self.chosen)
        return f"{terms} = {self.total_mb:,.1f} MiB of {self.budget_mb:,.0f} MiB"

    def text(self) -> str:
        lines = [self.why, self.arithmetic()] if self.chosen else [self.why]
        lines += [f"  {o.model}: {o.setting} ({o.objective:,.1f} at {o.level}, {o.relative:.2f}× served)"
                  for o in self.chosen]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"budget_mb": self.budget_mb, "total_mb": round(self.total_mb, 1), "why": self.why,
                "arithmetic": self.arithmetic(),
                "chosen": [{"model": o.model, "setting": o.setting, "instances": o.instances,
                            "memory_mb": round(o.memory_mb, 1), "per_instance_mb": round(o.per_instance_mb, 1),
                            "objective": round(o.objective, 3), "relative": round(o.relative, 3),
                            "level": o.level} for o in self.chosen]}

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{html.escape(o.model)}</td><td>{html.escape(o.setting)}</td>"
                       f"<td>{o.instances}</td><td>{o.memory_mb:,.1f}</td><td>{o.objective:,.1f}</td>"
                       f"<td>{o.relative:.2f}×</td></tr>" for o in self.chosen)
        table = ("<table><tr><th>model</th><th>setting</th><th>instances</th><th>memory MiB</th>"
                 f"<th>objective</th><th>vs served</th></tr>{rows}</table>") if rows else ""
        return f"<p>{html.escape(self.why)}</p><p><code>{html.escape(self.arithmetic())}</code></p>{table}"


def options_from_result(result: TuneResult) -> list[ModelOption]:
    """One option per setting of ``result`` that has a stable point meeting its goals (the
    best such point); none without a memory estimate (the plan needs memory)."""
    if result.memory is None:
        return []
    per_instance = result.memory.per_instance_mb
    served = result.decision.baseline
    served_score = score(served, result.goals) if served is not None else None
    options = []
    for setting in dict.fromkeys(p.setting for p in result.points):
        best = best_point([p for p in result.points if p.setting == setting], result.goals, result.memory_mb)
        if best is not None:
            options.append(_option(result.model, setting.label, best, result.goals, per_instance, served_score))
    return options


def options_from_json(data: dict) -> list[ModelOption]:
    """:func:`options_from_result` for a result saved by ``workbench tune --json``
    (:meth:`TuneResult.as_dict`): its points, goals, memory estimate and baseline.

    Raises:
        ValueError: not a ``workbench tune --json`` document.
    """
    try:
        goals = Goals(**data["goals"])
        points = [point_from_dict(p) for p in data["points"]]
        memory = data.get("memory")
        baseline = point_from_dict(data["baseline"]) if data.get("baseline") else None
        model = data["model"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a workbench tune --json result (missing {exc})") from None
    if not memory:
        return []
    per_instance = float(memory["per_instance_mb"])
    served_score = score(baseline, goals) if baseline is not None else None
    options = []
    for setting in dict.fromkeys(p.setting for p in points):
        mine = [p for p in points if p.setting == setting]
        best = best_point(mine, goals, {setting.label: per_instance * mine[0].instances})
        if best is not None:
            options.append(_option(model, setting.label, best, goals, per_instance, served_score))
    return options


def _option(model: str, label: str, best: Point, goals: Goals, per_instance: float,
            served_score: float | None) -> ModelOption:
    value = score(best, goals)
    relative = value / served_score if served_score else 1.0
    if goals.objective == "latency" and served_score:
        relative = served_score / value  # both negative: lower latency -> above 1
    return ModelOption(model, label, best.instances, per_instance * best.instances, per_instance, value,
                       relative, str(best.level))


def plan_budget(options: Sequence[Sequence[ModelOption]], budget_mb: float) -> BudgetPlan:
    """The best option per model within ``budget_mb`` **MiB** (see the module docstring);
    ``options``: each model's options. Exact; ties go to less memory."""
    states: list[tuple[float, float, tuple[ModelOption, ...]]] = [(0.0, 0.0, ())]
    for model_options in options:
        if not model_options:
            continue
        merged = [(mem + o.memory_mb, value + o.relative, (*chosen, o))
                  for mem, value, chosen in states for o in model_options
                  if mem + o.memory_mb <= budget_mb]
        if not merged:
            smallest = min(o.memory_mb for o in model_options)
            name = model_options[0].model
            return BudgetPlan(budget_mb, (), f"infeasible: {name} needs at least {smallest:,.1f} MiB "
                              f"beside the others' smallest options, over the {budget_mb:,.0f} MiB budget")
        merged.sort(key=lambda s: (s[0], -s[1]))
        states, best_value = [], float("-inf")
        for state in merged:  # keep the states no cheaper state beats
            if state[1] > best_value:
                states.append(state)
                best_value = state[1]
    _, value, chosen = max(states, key=lambda s: (s[1], -s[0]))
    models = len(chosen)
    return BudgetPlan(budget_mb, chosen,
                      f"{models} model(s) within {budget_mb:,.0f} MiB: combined objective {value:.2f} (the "
                      f"sum of each model's objective relative to its served config; {models:.2f} = all as served)")


__all__ = ["BudgetPlan", "ModelOption", "options_from_json", "options_from_result", "plan_budget"]
