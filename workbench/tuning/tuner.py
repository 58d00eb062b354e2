"""A tuning run: :func:`tune` (the notebook API) and :class:`Tuner` (what ``workbench tune``
and the Tuning tab drive), one engine for the three fronts.

A run reads the served config, derives the search space from the model and the machine
unless one is given (:func:`workbench.tuning.space.default_space`; an ensemble's steps and
the models its BLS steps call: :mod:`workbench.tuning.ensembles`), takes a speed probe,
measures the served config first, then runs the strategy
(:mod:`workbench.tuning.strategies`), and finally reloads every model it changed from its
``config.pbtxt`` (also when stopped or failed): candidates are temporary loads only.
The result (:class:`~workbench.tuning.result.TuneResult`) recommends only from stable points
(:mod:`workbench.tuning.decide`); :func:`workbench.tuning.apply.apply_result` writes it.

Example, in a notebook on an engine in the same process::

    from workbench.tuning import tune
    result = await tune(server, "digits_mlp", sla_ms=5, strategy="quick")
    result            # the report: Pareto plot, reasoning, table
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import Server
from workbench.config_edits.knobs import parse_text, with_knob
from workbench.perf import PerfOptions, prepare_workload
from workbench.tuning.decide import decide
from workbench.tuning.ensembles import ensemble_space, is_composite, step_models
from workbench.tuning.goals import Goals
from workbench.tuning.lab import Lab, MeasureOptions, TuneEvent
from workbench.tuning.machine import Machine, SpeedProbe
from workbench.tuning.memory import estimate
from workbench.tuning.result import TuneResult
from workbench.tuning.resume import load_points
from workbench.tuning.space import SearchSpace, default_space, levels_from_text, parse_space, served_values
from workbench.tuning.strategies import STRATEGIES, batch_model, run_strategy
from workbench.tuning.targets import EngineTarget, RemoteTarget, Target, changed_message, completed_knobs


@dataclass(frozen=True)
class TuneSpec:
    """What to tune and how (every front fills one).

    Attributes:
        model: the model to tune (an ensemble: its steps are tuned).
        space: the space (text as ``--space`` takes it, or a :class:`SearchSpace`); None:
            derived from the model and the machine.
        levels: the load axis as text (``1:16`` doubling, ``1,2,8``), None: the default.
        load_mode: ``concurrency`` or ``request_rate``.
        goals: constraints and objective.
        strategy: ``quick`` or ``brute``.
        measure: how each point is measured (window, stability, budget).
        resume: a resume file to read and keep up to date (None: none).
    """

    model: str
    goals: Goals = field(default_factory=Goals)
    space: str | SearchSpace | None = None
    levels: str | None = None
    load_mode: str = "concurrency"
    strategy: str = "quick"
    measure: MeasureOptions | None = None
    resume: str | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got '{self.strategy}'")
        if self.load_mode not in ("concurrency", "request_rate"):
            raise ValueError(f"the load mode must be concurrency or request_rate, got '{self.load_mode}'")

    def measure_options(self) -> MeasureOptions:
        return self.measure or MeasureOptions(PerfOptions(self.model, measurement_interval_ms=2000, warmup_ms=500))


class Tuner:
    """One run against ``target`` (see the module docstring). :meth:`run` once;
    :meth:`stop` from anywhere on the loop ends it early with the points so far."""

    def __init__(self, target: Target, spec: TuneSpec,
                 on_event: Callable[[TuneEvent], None] | None = None) -> None:
        self.target, self.spec = target, spec
        self.on_event = on_event or (lambda _e: None)
        self.lab: Lab | None = None
        self._inner: asyncio.Task | None = None
        self._stop = False

    def stop(self) -> None:
        """End the run after the window in progress is cancelled (its point is dropped)."""
        self._stop = True
        if self._inner is not None:
            self._inner.cancel()

    async def run(self) -> TuneResult:
        """Search, restore the files' configs, decide.

        Raises:
            PerfError: the model is not ready or its inputs cannot be built (nothing changed).
            ValueError: a malformed space or levels, a resume file of another model.
        """
        spec, started = self.spec, time.monotonic()
        name = spec.model
        saved = load_points(spec.resume, name) if spec.resume else {}  # a wrong file: before any work
        machine = Machine.read()
        base = await self.target.served_config(name)
        bases: dict[str, ModelConfig] = {name: base}
        options = spec.measure_options()
        workload = await prepare_workload(self.target.client, replace(options.perf, model_name=name))
        composite = is_composite(base)
        if composite:
            self.on_event(TuneEvent("load", f"finding the models {name} runs", 0))
            for step in await step_models(self.target, base, workload, options.perf):
                bases[step] = await self.target.served_config(step)
        space = self._space(base, bases, machine)
        lab = self.lab = Lab(self.target, name, bases, space, spec.goals, options, self.on_event,
                             saved=saved, resume_path=spec.resume, track_steps=composite)
        lab.workload = workload
        lab.loaded = space.baseline()  # what serves now: measured without a reload
        probes = [await asyncio.to_thread(SpeedProbe.take)]
        start_mb = await self.target.memory_mb()
        lab.memory_mb[space.baseline().label] = start_mb
        stopped = False
        try:
            self._inner = asyncio.ensure_future(run_strategy(spec.strategy, lab))
            if self._stop:  # stopped while the run was preparing: no point is measured
                self._inner.cancel()
            try:
                await self._inner
            except asyncio.CancelledError:
                if not self._stop:
                    raise
                stopped = True
        finally:
            await self._restore(lab)
        probes.append(await asyncio.to_thread(SpeedProbe.take))
        tolerance = options.stability_percentage
        settings = list({p.setting: None for p in lab.points})
        memory = estimate(lab.memory_mb, settings, start_mb, lab.total_instances)
        model_mb = ({s.label: memory.per_instance_mb * lab.total_instances(s) for s in settings}
                    if memory is not None else {})
        decision = decide(lab.points, space.baseline(), spec.goals, model_mb, tolerance, lab.gpu_memory_mb)
        result = TuneResult(
            model=name, target=self.target.label, strategy=spec.strategy, space=space, goals=spec.goals,
            points=list(lab.points), decision=decision, machine=machine, probes=probes,
            memory_mb=model_mb, rss_mb=dict(lab.memory_mb), gpu_memory_mb=dict(lab.gpu_memory_mb), memory=memory,
            batch_model=batch_model(lab), failures=dict(lab.failures), skipped=dict(lab.skipped),
            windows=lab.windows_measured, wall_s=time.monotonic() - started, stopped=stopped)
        if decision.apply and decision.chosen is not None:
            result.config_text = await self._config_text(base, decision.chosen.setting.by_model(name).get(name, {}))
        self.on_event(TuneEvent("done", result.decision.why, len(lab.points), lab.planned))
        return result

    async def search_space(self) -> SearchSpace:
        """The space and load levels :meth:`run` would search (the given space, or one derived
        from the served config and the machine; an ensemble's or a Python model's steps are
        found by a short probe load, :data:`~workbench.tuning.ensembles.PROBE_MS`), without
        measuring or changing anything.

        Raises:
            PerfError: the model is not ready (a composite's inputs cannot be built).
            ValueError: a malformed space or levels.
        """
        name = self.spec.model
        base = await self.target.served_config(name)
        bases: dict[str, ModelConfig] = {name: base}
        if is_composite(base):
            perf = replace(self.spec.measure_options().perf, model_name=name)
            workload = await prepare_workload(self.target.client, perf)
            for step in await step_models(self.target, base, workload, perf):
                bases[step] = await self.target.served_config(step)
        return self._space(base, bases, Machine.read())

    def _space(self, base: ModelConfig, bases: dict[str, ModelConfig], machine: Machine) -> SearchSpace:
        spec = self.spec
        levels = levels_from_text(spec.load_mode, spec.levels) if spec.levels else ()
        if isinstance(spec.space, SearchSpace):
            return spec.space
        if spec.space:
            provisional = parse_space(spec.space, levels)
            space = parse_space(spec.space, levels, _served_by_key(bases, provisional))
        elif len(bases) > 1:
            space = ensemble_space({k: v for k, v in bases.items() if k != spec.model}, machine, levels)
        else:
            space = default_space(base, machine, levels)
        if not space.levels:
            space = SearchSpace(space.axes, default_space(base, machine).levels, space.served)
        return space

    async def _restore(self, lab: Lab) -> None:
        for changed in sorted(lab.changed):
            try:
                await self.target.restore(changed, lab.bases[changed])
            except Exception as exc:  # noqa: BLE001 - said, the others still restored
                lab.failures[f"restore {changed}"] = str(exc)
                self.on_event(TuneEvent("failed", f"restoring {changed}'s config: {exc}",
                                        len(lab.points)))

    async def _config_text(self, base: ModelConfig, knobs: dict) -> str | None:
        """The tuned model's file with the chosen knobs (comments kept); for a remote
        target, the served config with them (the file is on the server's side)."""
        if not knobs:
            return None
        if isinstance(self.target, EngineTarget):
            try:
                described = await self.target.server.config_files.model_config_file(self.spec.model)
                return with_knob(described["text"], **completed_knobs(parse_text(described["text"]), knobs))  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - a remote-mirrored model: no file here
                pass
        return text_format.MessageToString(changed_message(base, knobs))


def _served_by_key(bases: dict[str, ModelConfig], space: SearchSpace) -> dict[str, object]:
    """The served value of every key of ``space`` (``model/knob`` keys from that model)."""
    out: dict[str, object] = {}
    main = next(iter(bases))
    for key in space.axes:
        owner, _, knob = key.rpartition("/")
        config = bases.get(owner or main)
        if config is not None:
            value = served_values(config, [knob]).get(knob)
            if value is not None:
                out[key] = value
    return out


def make_target(where: Server | Target | str, protocol: str = "grpc", pid: int | None = None) -> Target:
    """A target from a :class:`workbench.Server`, a target, or a URL (``host:port``)."""
    if isinstance(where, Server):
        return EngineTarget(where)
    if isinstance(where, str):
        return RemoteTarget(where, protocol, pid)
    return where


async def tune(where: Server | Target | str, model: str, *, sla_ms: float | None = None,
               percentile: int = 99, objective: str = "throughput", min_throughput: float | None = None,
               host_memory_mb: float | None = None, gpu_memory_mb: float | None = None,
               space: str | SearchSpace | None = None, levels: str | None = None,
               load_mode: str = "concurrency", strategy: str = "quick", batch_size: int = 1,
               input_data: str = "random", shapes: dict | None = None,
               measurement_interval_ms: int = 2000, warmup_ms: int = 500,
               stability_percentage: float = 10.0, max_windows: int = 6, max_points: int | None = None,
               resume: str | None = None, protocol: str = "grpc", progress: bool = True,
               on_event: Callable[[TuneEvent], None] | None = None) -> TuneResult:
    """Tune ``model`` on ``where`` (a :class:`workbench.Server` in this process, or a v2
    server's ``host:port`` over ``protocol``) and return the result, which renders as the
    report in a notebook cell. Arguments as :class:`TuneSpec`, :class:`Goals` and
    :class:`MeasureOptions` (``sla_ms`` and ``measurement_interval_ms`` in **ms**);
    ``progress`` shows a progress bar (tqdm when installed, else a line per point).

    Raises:
        PerfError: the model is not ready, or its inputs cannot be built.
        ValueError: a malformed space, levels or goal.
    """
    goals = Goals(sla_ms=sla_ms, percentile=percentile, min_throughput=min_throughput,
                  host_memory_mb=host_memory_mb, gpu_memory_mb=gpu_memory_mb, objective=objective)
    perf = PerfOptions(model, batch_size=batch_size, input_data=input_data, shapes=shapes or {},
                       measurement_interval_ms=measurement_interval_ms, warmup_ms=warmup_ms)
    spec = TuneSpec(model, goals, space, levels, load_mode, strategy,
                    MeasureOptions(perf, stability_percentage, max_windows, max_points), resume)
    target = make_target(where, protocol)
    bar = _progress() if progress and on_event is None else None
    try:
        return await Tuner(target, spec, on_event or bar).run()
    finally:
        if bar is not None:
            bar.close()
        if target is not where:
            await target.close()


class _progress:
    """A progress bar of points (tqdm.auto when installed: a widget in a notebook)."""

    def __init__(self) -> None:
        try:
            from tqdm.auto import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(desc="tuning", unit="point")
        except ImportError:
            self.bar = None

    def __call__(self, event: TuneEvent) -> None:
        if self.bar is None:
            if event.kind in ("point", "failed", "done"):
                print(event.text, flush=True)
            return
        if event.kind == "point":
            self.bar.update(1)
        if event.planned:
            self.bar.total = event.planned
        self.bar.set_postfix_str(event.text[:60], refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["TuneSpec", "Tuner", "make_target", "tune"]
