"""The measuring side of a tuning run: load a setting, measure a point until it is stable,
remember it (and save it for ``--resume``), and report progress.

Strategies (:mod:`workbench.tuning.strategies`) decide *what* to measure and call
:meth:`Lab.measure`; the lab decides *how*: each point is a series of
:func:`workbench.perf.run_step` windows at one load level, the first after a full warm-up,
the next ones after a short one (the load is already warm), until the last three agree
(:func:`workbench.tuning.points.stability`) or ``max_windows``. A point whose first two
windows are both over twice the SLA is cut short: it can never be chosen, so it is not
repeated until stable (it is shown as unstable, "over the SLA").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.perf import LoadLevel, PerfOptions, StepResult, Workload, prepare_workload, run_step
from workbench.tuning.goals import Goals
from workbench.tuning.machine import SpeedProbe
from workbench.tuning.points import Point, stability
from workbench.tuning.resume import point_key, save_points
from workbench.tuning.space import SearchSpace, Setting
from workbench.tuning.steps import all_statistics, step_figures
from workbench.tuning.targets import Target

#: the warm-up before each window after a point's first, **ms** (the load is running already)
REWARM_MS = 200


@dataclass(frozen=True)
class MeasureOptions:
    """How each point is measured.

    Attributes:
        perf: the model, its inputs, the window (``measurement_interval_ms``) and the
            first warm-up (``warmup_ms``) of every point.
        stability_percentage: windows agree when within this many percent of their mean
            (perf_analyzer's ``--stability-percentage``).
        max_windows: windows a point may take before it is marked unstable (perf_analyzer's
            ``--max-trials``, default 10; 6 here).
        max_points: the most points a run may measure (None: the strategy decides).
    """

    perf: PerfOptions
    stability_percentage: float = 10.0
    max_windows: int = 6
    max_points: int | None = None

    def __post_init__(self) -> None:
        if self.max_windows < 3:
            raise ValueError(f"max_windows must be >= 3 (three windows must agree), got {self.max_windows}")
        if self.stability_percentage <= 0:
            raise ValueError("the stability percentage must be > 0")


@dataclass(frozen=True)
class TuneEvent:
    """Progress of a run, for a progress bar or a log line.

    Attributes:
        kind: ``"load"`` (a setting is being loaded), ``"window"`` (one window measured),
            ``"point"`` (a point finished; ``point`` is set), ``"skip"`` (a setting left
            out, ``text`` says why), ``"failed"`` (a setting failed to load or measure),
            ``"done"``.
        text: one line for people.
        points: points measured so far; ``planned``: the strategy's estimate of the total
            (None when it cannot tell).
    """

    kind: str
    text: str
    points: int
    planned: int | None = None
    point: Point | None = None


class BudgetSpent(Exception):
    """The run measured ``max_points`` points (the strategy stops, the result stands)."""


@dataclass
class Lab:
    """One run's measuring context (see the module docstring). ``bases``: the served config
    of every model a setting may change (the tuned model; an ensemble's steps too)."""

    target: Target
    model: str
    bases: Mapping[str, ModelConfig]
    space: SearchSpace
    goals: Goals
    options: MeasureOptions
    on_event: Callable[[TuneEvent], None] = lambda _e: None
    saved: dict[str, Point] = field(default_factory=dict)
    resume_path: str | None = None
    points: list[Point] = field(default_factory=list)
    memory_mb: dict[str, float | None] = field(default_factory=dict)
    gpu_memory_mb: dict[str, float | None] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    windows_measured: int = 0
    planned: int | None = None
    loaded: Setting | None = None
    changed: set[str] = field(default_factory=set)
    workload: Workload | None = None
    #: read every model's statistics around each point (ensembles and BLS models)
    track_steps: bool = False

    def emit(self, kind: str, text: str, point: Point | None = None) -> None:
        self.on_event(TuneEvent(kind, text, len(self.points), self.planned, point))

    async def prepare(self) -> None:
        """Read the model's metadata and build the requests (before anything changes).

        Raises:
            PerfError: as :func:`workbench.perf.prepare_workload`.
        """
        self.workload = await prepare_workload(self.target.client, self.perf_options())

    def perf_options(self) -> PerfOptions:
        return replace(self.options.perf, continue_on_error=True, percentile=self.goals.percentile,
                       stability_percentage=self.options.stability_percentage,
                       goodput_latency_us=self.goals.sla_us)

    def point_of(self, setting: Setting, level: LoadLevel) -> Point | None:
        key = point_key(setting, level)
        return next((p for p in self.points if point_key(p.setting, p.level) == key), None)

    def points_of(self, setting: Setting) -> list[Point]:
        return sorted((p for p in self.points if p.setting == setting), key=lambda p: p.level.value)

    async def use(self, setting: Setting) -> bool:
        """Make ``setting`` the served one (a temporary load per model it changes). False,
        with the reason in :attr:`failures`, when a load fails."""
        if self.loaded == setting:
            return True
        self.emit("load", f"loading {setting.label}")
        try:
            for name, knobs in setting.by_model(self.model).items():
                await self.target.load(name, self.bases[name], knobs)
                self.changed.add(name)
        except Exception as exc:  # noqa: BLE001 - one setting's failure does not end the run
            self.failures[setting.label] = _text(exc)
            self.loaded = None
            self.emit("failed", f"{setting.label}: {_text(exc)}")
            return False
        self.loaded = setting
        if setting.label not in self.memory_mb:
            self.memory_mb[setting.label] = await self.target.memory_mb()
            self.gpu_memory_mb[setting.label] = await self.target.gpu_memory_mb()
        return True

    async def measure(self, setting: Setting, level: LoadLevel) -> Point | None:
        """The point of ``setting`` at ``level``: measured once per run (again from the
        resume file when it has it). None when the setting could not be loaded or no
        request succeeded (the reason is in :attr:`failures`).

        Raises:
            BudgetSpent: ``max_points`` points were measured already.
        """
        known = self.point_of(setting, level)
        if known is not None:
            return known
        if setting.label in self.failures:
            return None
        saved = self.saved.get(point_key(setting, level))
        if saved is not None:
            self._keep(saved)
            return saved
        limit = self.options.max_points
        if limit is not None and sum(not p.from_resume for p in self.points) >= limit:
            raise BudgetSpent(f"{limit} points measured (the run's limit)")
        if not await self.use(setting):
            return None
        try:
            point = await self._windows(setting, level)
        except Exception as exc:  # noqa: BLE001 - no valid request, a broken model: reported
            self.failures[setting.label] = _text(exc)
            self.emit("failed", f"{setting.label} at {level}: {_text(exc)}")
            return None
        self._keep(point)
        return point

    async def _windows(self, setting: Setting, level: LoadLevel) -> Point:
        assert self.workload is not None, "prepare() first"
        first = self.perf_options()
        again = replace(first, warmup_ms=min(first.warmup_ms, REWARM_MS))
        windows: list[StepResult] = []
        cpu_before, inferences = self.target.cpu_seconds(), 0
        stats_before = await all_statistics(self.target.client) if self.track_steps else None
        started = time.monotonic()
        stable, spread_t, spread_l = False, 0.0, 0.0
        sla = self.goals.sla_us
        while len(windows) < self.options.max_windows:
            step = await run_step(self.target.client, self.workload, level, again if windows else first)
            windows.append(step)
            inferences += step.request_count * step.batch_size
            self.windows_measured += 1
            self.emit("window", f"{setting.label} at {level}: window {len(windows)} "
                      f"{step.throughput_infer_per_s:.1f} infer/s, p{self.goals.percentile} "
                      f"{step.percentiles_us.get(self.goals.percentile, step.p99_us) / 1000:.2f} ms")
            stable, spread_t, spread_l = stability(windows, self.goals.percentile,
                                                   self.options.stability_percentage)
            if stable:
                break
            if sla is not None and len(windows) == 2 and all(
                    w.percentiles_us.get(self.goals.percentile, w.p99_us) > 2 * sla for w in windows):
                break  # hopeless: over twice the SLA twice, never chosen
        cpu_after = self.target.cpu_seconds()
        cpu = (None if cpu_before is None or cpu_after is None or not inferences
               else (cpu_after - cpu_before) / inferences)
        steps = {}
        if self.track_steps:
            steps = step_figures(stats_before, await all_statistics(self.target.client),
                                 time.monotonic() - started, self.instance_counts(setting))
        probe = (await asyncio.to_thread(SpeedProbe.take)).kloops_per_s  # off the engine's loop
        return Point(setting, level, tuple(windows), stable, spread_t, spread_l, cpu, steps=steps, probe=probe)

    def total_instances(self, setting: Setting) -> int:
        """Instances ``setting`` runs: the tuned model's, or all its steps' for an ensemble
        (the ensemble itself has none)."""
        counts = self.instance_counts(setting)
        steps = [name for name in counts if name != self.model]
        return sum(counts[n] for n in steps) if steps else counts[self.model]

    def instance_counts(self, setting: Setting) -> dict[str, int]:
        """Instances of every model ``setting`` serves with (the served configs' where it
        does not say)."""
        counts = {name: (config.instance_group[0].count or 1) if config.instance_group else 1
                  for name, config in self.bases.items()}
        for name, knobs in setting.by_model(self.model).items():
            if isinstance(knobs.get("instance_count"), int):
                counts[name] = knobs["instance_count"]
        return counts

    def _keep(self, point: Point) -> None:
        self.points.append(point)
        state = "stable" if point.stable else "UNSTABLE"
        self.emit("point", f"{point.setting.label} at {point.level}: {point.throughput:.1f} infer/s, "
                  f"p{self.goals.percentile} {point.latency_us(self.goals.percentile) / 1000:.2f} ms "
                  f"({state}, {len(point.windows)} windows)", point)
        if self.resume_path:
            save_points(self.resume_path, self.model,
                        {"space": self.space.as_dict(), "goals": self.goals.as_dict(),
                         "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                        [p.as_dict(self.goals) for p in self.points])


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


__all__ = ["BudgetSpent", "Lab", "MeasureOptions", "TuneEvent"]
