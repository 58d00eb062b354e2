"""The tuner: a config search under a latency SLA and a memory budget, for one model, an
ensemble's steps, or several models sharing a budget - what Model Analyzer's ``profile``
does, behind ``workbench tune``, :func:`tune` in a notebook and the dashboard's Tuning tab.

* the search space from the model and the machine (:mod:`workbench.tuning.space`);
* strategies: brute force and a guided quick search (:mod:`workbench.tuning.strategies`);
* honest points: repeated until three windows agree, never recommended when unstable
  (:mod:`workbench.tuning.points`, :mod:`workbench.tuning.decide`);
* goals: SLA at a percentile, minimum throughput, memory budgets; objectives throughput,
  latency, throughput per instance, goodput (:mod:`workbench.tuning.goals`);
* memory per instance, measured (:mod:`workbench.tuning.memory`), and a plan for several
  models under one budget (:mod:`workbench.tuning.budget`);
* the report (:mod:`workbench.tuning.result`) and Apply (:mod:`workbench.tuning.apply`).

Layering: an adapter like :mod:`workbench.perf`; it uses the names :mod:`workbench`
exports, :mod:`workbench.perf` and :mod:`workbench.config_edits`.
"""

from workbench.tuning.apply import NothingToApply, apply_result
from workbench.tuning.budget import BudgetPlan, ModelOption, options_from_result, plan_budget
from workbench.tuning.decide import Decision, decide
from workbench.tuning.goals import OBJECTIVES, Goals
from workbench.tuning.lab import MeasureOptions, TuneEvent
from workbench.tuning.machine import Machine, SpeedProbe
from workbench.tuning.points import Point
from workbench.tuning.result import TuneResult
from workbench.tuning.several import tune_models
from workbench.tuning.space import SearchSpace, Setting, default_space, parse_space
from workbench.tuning.strategies import STRATEGIES
from workbench.tuning.targets import EngineTarget, RemoteTarget, Target
from workbench.tuning.tuner import Tuner, TuneSpec, make_target, tune

__all__ = [
    "OBJECTIVES",
    "STRATEGIES",
    "BudgetPlan",
    "Decision",
    "EngineTarget",
    "Goals",
    "Machine",
    "MeasureOptions",
    "ModelOption",
    "NothingToApply",
    "Point",
    "RemoteTarget",
    "SearchSpace",
    "Setting",
    "SpeedProbe",
    "Target",
    "TuneEvent",
    "TuneResult",
    "TuneSpec",
    "Tuner",
    "apply_result",
    "decide",
    "default_space",
    "make_target",
    "options_from_result",
    "parse_space",
    "plan_budget",
    "tune",
    "tune_models",
]
