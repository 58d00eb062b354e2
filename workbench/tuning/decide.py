"""Which measured point to recommend, and why - honestly.

Only a *stable* point that meets every constraint is ever recommended
(:func:`workbench.tuning.points.meets`); among those, the highest objective wins
(:func:`workbench.tuning.points.score`). The recommendation says what it beat, and when a
better-looking point was passed over because it was unstable. A candidate that does not beat
the served config's best stable point by more than the stability tolerance is not worth a
config change: the served config is kept ("nothing to apply"); nor one that does not beat
the served config's best *unstable* point either (the gain would not be proven). When no point meets the
constraints, stable or not, the run recommends nothing and says so (a point over the SLA is
cut short, never repeated until stable: its instability is not the reason). When no point is
stable the run recommends nothing and says what to do (longer windows, more windows, a quieter
machine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from workbench.tuning.goals import Goals
from workbench.tuning.points import Point, meets, score
from workbench.tuning.space import Setting


@dataclass(frozen=True)
class Decision:
    """The outcome of a run.

    Attributes:
        chosen: the recommended point (None: nothing recommended).
        baseline: the served config's best stable point meeting the constraints (None if
            it has none).
        apply: the chosen setting differs from the served one and beats it (Apply writes it).
        why: the reasoning, in sentences.
    """

    chosen: Point | None
    baseline: Point | None
    apply: bool
    why: str


def best_point(points: Sequence[Point], goals: Goals, memory: Mapping[str, float | None],
               stable_only: bool = True, gpu_memory: Mapping[str, float | None] | None = None) -> Point | None:
    """The highest-scoring point meeting the constraints (stable ones only by default); on
    a tie the lower load. ``memory`` / ``gpu_memory``: label -> the setting's host / GPU
    memory, **MiB**."""
    gpu = gpu_memory or {}
    eligible = [p for p in points if (p.stable or not stable_only)
                and not meets(p, goals, memory.get(p.setting.label), gpu.get(p.setting.label))]
    return max(eligible, key=lambda p: (score(p, goals), -p.level.value), default=None)


def decide(points: Sequence[Point], baseline_setting: Setting, goals: Goals,
           memory: Mapping[str, float | None], tolerance_pct: float,
           gpu_memory: Mapping[str, float | None] | None = None) -> Decision:
    """The recommendation of a run (see the module docstring); ``memory`` / ``gpu_memory``:
    label -> the setting's host / GPU memory, **MiB**."""

    if not points:
        return Decision(None, None, False, "nothing was measured")
    unstable = [p for p in points if not p.stable]
    if len(unstable) == len(points) and all(meets(p, goals, memory.get(p.setting.label)) for p in points):
        return Decision(None, None, False, _none_meets(points, goals, memory))
    if len(unstable) == len(points):
        worst = max(p.deviation_pct(goals.percentile) for p in points)
        return Decision(None, None, False,
                        f"every measurement was unstable (windows up to {worst:.0f} % off their mean, "
                        f"tolerance {tolerance_pct:g} %): nothing is recommended. Use longer windows "
                        "(--measurement-interval), more windows (--max-windows), a larger "
                        "--stability-percentage, or a quieter machine.")
    chosen = best_point(points, goals, memory, gpu_memory=gpu_memory)
    baseline = best_point([p for p in points if p.setting == baseline_setting], goals, memory, gpu_memory=gpu_memory)
    if chosen is None:
        near = best_point(points, goals, memory, stable_only=False, gpu_memory=gpu_memory)
        hint = (f" The best unstable point ({near.setting.label} at {near.level}) is not trusted."
                if near is not None else "")
        return Decision(None, baseline, False,
                        f"no stable measurement meets {goals.text()}.{hint} Relax the SLA, lower "
                        "the load range, or add instances / hardware.")
    lines = [f"{chosen.setting.label} at {chosen.level}: {_figures(chosen, goals)}, the best stable "
             f"point meeting {goals.text()}."]
    passed = best_point(points, goals, memory, stable_only=False, gpu_memory=gpu_memory)
    if passed is not None and not passed.stable and score(passed, goals) > score(chosen, goals):
        lines.append(f"{passed.setting.label} at {passed.level} measured higher "
                     f"({_figures(passed, goals)}) but its windows were up to "
                     f"{passed.deviation_pct(goals.percentile):.0f} % off their mean: not trusted.")
    if chosen.setting == baseline_setting:
        lines.append("That is the served config: nothing to apply.")
        return Decision(chosen, baseline, False, " ".join(lines))
    if baseline is not None:
        gain = _gain_pct(chosen, baseline, goals)
        if gain <= tolerance_pct:
            lines.append(f"It beats the served config ({_figures(baseline, goals)}) by only {gain:.1f} %, "
                         f"within the {tolerance_pct:g} % measurement tolerance: keeping the served config.")
            return Decision(chosen, baseline, False, " ".join(lines))
    served_best = best_point([p for p in points if p.setting == baseline_setting], goals, memory,
                             stable_only=False, gpu_memory=gpu_memory)
    if served_best is not None and not served_best.stable and _gain_pct(chosen, served_best, goals) <= tolerance_pct:
        lines.append(f"The served config measured {_figures(served_best, goals)} at {served_best.level} in "
                     f"unstable windows: the gain is not proven, keeping the served config (measure again "
                     f"with longer windows or on a quieter machine).")
        return Decision(chosen, baseline, False, " ".join(lines))
    if baseline is None:
        lines.append("The served config has no stable point meeting the goals" + (
            f", and its best unstable one ({_figures(served_best, goals)}) is beaten beyond the "
            f"{tolerance_pct:g} % tolerance." if served_best is not None else "."))
        return Decision(chosen, baseline, True, " ".join(lines))
    gain = _gain_pct(chosen, baseline, goals)
    lines.append(f"It beats the served config ({_figures(baseline, goals)}) by {gain:.0f} %.")
    return Decision(chosen, baseline, True, " ".join(lines))


def _none_meets(points: Sequence[Point], goals: Goals, memory: Mapping[str, float | None]) -> str:
    """Why nothing is recommended when no point meets the constraints, stable or not (the
    closest point's reasons): not an unstable machine - a point over the SLA is cut after
    two windows, never repeated until stable."""
    closest = min(points, key=lambda p: (len(meets(p, goals, memory.get(p.setting.label))),
                                         p.latency_us(goals.percentile)))
    why = "; ".join(meets(closest, goals, memory.get(closest.setting.label)))
    return (f"no measurement meets {goals.text()} (the closest, {closest.setting.label} at "
            f"{closest.level}: {why}): nothing is recommended. Relax the SLA, lower the load "
            "range, or add instances / hardware.")


def _gain_pct(chosen: Point, baseline: Point, goals: Goals) -> float:
    new, old = score(chosen, goals), score(baseline, goals)
    if goals.objective == "latency":
        new, old = -old, -new  # lower latency is the gain
    return (new - old) / abs(old) * 100 if old else float("inf")


def _figures(point: Point, goals: Goals) -> str:
    return (f"{point.throughput:.1f} infer/s, p{goals.percentile} "
            f"{point.latency_us(goals.percentile) / 1000:.2f} ms")


__all__ = ["Decision", "best_point", "decide"]
