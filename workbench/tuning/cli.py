"""``workbench tune``: the tuner (:mod:`workbench.tuning`) from a shell.

    workbench tune -m digits_mlp --model-repository sample_models/repository --sla-ms 10
    workbench tune -m digits_mlp --model-repository DIR --show-space
    workbench tune -m digits_mlp -u localhost:8001 -i grpc --server-pid 1234 --json out.json --html out.html

Without ``-u`` the model is measured on an engine in this process over
``--model-repository`` (explicit model control mode, only that model loaded, with what it
needs); with ``-u`` on a running v2 server over the network (it must run in explicit mode:
candidates are loaded with a config override; ``--server-pid`` lets the tuner read its CPU
time and memory when it runs on this machine). Candidates are temporary loads; at the end,
stopped or not, every changed model is reloaded from its ``config.pbtxt``.

Progress goes to stderr (one updating line on a terminal, a line per event otherwise), the
summary (:meth:`~workbench.tuning.result.TuneResult.summary`) to stdout, the reports to
``--json`` / ``--csv`` / ``--html``. ``--apply`` writes a recommendation into
``config.pbtxt`` (comments kept, the previous file as ``config.pbtxt.bak``); in-process only:
for a server at ``-u`` the recommended config is printed, to put in its repository.
Ctrl-C stops the run: the window in progress is dropped, the partial result is printed and
exported, the model reloaded from its file; ``--resume FILE`` keeps every point in FILE as
it is measured and, run again, measures only the points FILE lacks.

Exit status: 0 with a recommendation or "nothing to apply" (the served config is the best);
1 when nothing could be recommended (every point unstable, or none met the goals: the
summary says which) or on an error (one line on stderr); 2 on bad flags (argparse); 130
when stopped by Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from workbench import WorkbenchError
from workbench.perf import PerfError, PerfOptions, shape_overrides
from workbench.perf.engine_run import started_engine
from workbench.perf.errors import error_text
from workbench.tuning.apply import apply_result
from workbench.tuning.goals import OBJECTIVES, Goals
from workbench.tuning.lab import MeasureOptions
from workbench.tuning.machine import Machine
from workbench.tuning.progress import ProgressLine
from workbench.tuning.result import TuneResult, write_exports
from workbench.tuning.resume import load_points
from workbench.tuning.space import SearchSpace, levels_from_text, parse_space
from workbench.tuning.strategies import STRATEGIES
from workbench.tuning.targets import EngineTarget, RemoteTarget, Target
from workbench.tuning.tuner import Tuner, TuneSpec

#: the exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it)
STOPPED = 130


def add_arguments(tune: argparse.ArgumentParser) -> None:
    """The flags of ``workbench tune`` (see the module docstring)."""
    tune.set_defaults(tune_parser=tune)
    tune.add_argument("-m", "--model-name", required=True, metavar="MODEL",
                      help="the model to tune (an ensemble: its steps)")
    tune.add_argument("-u", "--url", default=None,
                      help="host:port of a running v2 server in explicit model control mode "
                           "(default: an engine in this process on --model-repository)")
    tune.add_argument("-i", "--protocol", choices=["grpc", "http"], default="grpc", help="with -u (default grpc)")
    tune.add_argument("--server-pid", type=int, default=None, metavar="PID",
                      help="with -u: the server's process id on this machine (CPU time and memory are read)")
    tune.add_argument("--model-repository", default=None, metavar="DIR", help="without -u: the repository")
    goals = tune.add_argument_group("goals")
    goals.add_argument("--sla-ms", type=float, default=None, metavar="MS",
                       help="latency target at --percentile, in milliseconds (default: none)")
    goals.add_argument("--percentile", type=int, choices=[50, 90, 95, 99], default=99)
    goals.add_argument("--objective", choices=OBJECTIVES, default="throughput")
    goals.add_argument("--min-throughput", type=float, default=None, metavar="N",
                       help="inferences/s a result must reach")
    goals.add_argument("--host-memory-mb", type=float, default=None, metavar="N",
                       help="host memory the model may take, MiB (measured as the server's RSS)")
    search = tune.add_argument_group("search")
    search.add_argument("--strategy", choices=STRATEGIES, default="quick")
    search.add_argument("--space", default=None, metavar="'KNOB=V1,V2 ...'",
                        help="e.g. 'instance_count=1,2 max_batch_size=1,4,16 max_queue_delay_us=0,500 "
                             "dynamic_batching=true' (default: derived from the model and the machine; "
                             "--show-space prints it)")
    load = search.add_mutually_exclusive_group()
    load.add_argument("--concurrency", default=None, metavar="1:16",
                      help="the load axis: START:END (doubling), START:END:STEP or a list 1,2,8 "
                           "(default 1 up to 8 x the cores)")
    load.add_argument("--request-rate", default=None, metavar="100:800", help="a request-rate axis instead")
    search.add_argument("--show-space", action="store_true",
                        help="print the space and load levels and exit without measuring")
    data = tune.add_argument_group("requests")
    data.add_argument("-b", "--batch-size", type=int, default=1, metavar="BATCH", help="rows per request")
    data.add_argument("--input-data", default="random", metavar="random|zero|FILE",
                      help="random (default), zero, or a JSON file in perf_analyzer's format")
    data.add_argument("--shape", action="append", default=[], metavar="NAME:D1[,D2...]",
                      help="shape of an input with dynamic dims (repeatable)")
    measure = tune.add_argument_group("measurement (each point: windows until three agree)")
    measure.add_argument("--measurement-interval", type=int, default=2000, metavar="MS", help="window, ms")
    measure.add_argument("--warmup", type=int, default=500, metavar="MS",
                         help="load before a point's first window, ms (later windows: 200 ms)")
    measure.add_argument("--stability-percentage", type=float, default=10.0, metavar="PCT",
                         help="the last three windows must lie within this %% of their mean")
    measure.add_argument("--max-windows", type=int, default=6, metavar="N", help="windows before a point is unstable")
    measure.add_argument("--max-points", type=int, default=None, metavar="N",
                         help="stop after measuring this many points")
    out = tune.add_argument_group("results")
    out.add_argument("--json", default=None, metavar="OUT.json", help="every point and the decision")
    out.add_argument("--csv", default=None, metavar="OUT.csv", help="one row per point (latencies in µs)")
    out.add_argument("--html", default=None, metavar="OUT.html", help="the report: Pareto plot, reasoning, table")
    out.add_argument("--resume", default=None, metavar="STATE.json",
                     help="keep the points here as they are measured; run again to measure only the missing ones")
    out.add_argument("--apply", action="store_true",
                     help="write a recommendation into config.pbtxt (in-process only; comments kept, .bak)")


def spec_from_args(args: argparse.Namespace) -> TuneSpec:
    """Parsed flags -> :class:`TuneSpec`, every value checked before anything starts.

    Raises:
        ValueError, PerfError: a bad value or combination (a usage error).
    """
    if args.url is None and not args.model_repository:
        raise ValueError("an engine in this process needs --model-repository (or name a server with -u)")
    if args.url is not None and args.apply:
        raise ValueError("--apply writes config.pbtxt through an engine in this process; a server at -u has "
                         "its repository elsewhere: the recommended config is printed at the end of the run, "
                         "put it in the server's model repository")
    if args.server_pid is not None and args.url is None:
        raise ValueError("--server-pid goes with -u (the in-process engine is this process)")
    if args.max_points is not None and args.max_points < 1:
        raise ValueError(f"--max-points must be >= 1, got {args.max_points}")
    goals = Goals(sla_ms=args.sla_ms, percentile=args.percentile, min_throughput=args.min_throughput,
                  host_memory_mb=args.host_memory_mb, objective=args.objective)
    perf = PerfOptions(args.model_name, batch_size=args.batch_size, input_data=args.input_data,
                       shapes=shape_overrides(args.shape), measurement_interval_ms=args.measurement_interval,
                       warmup_ms=args.warmup)
    measure = MeasureOptions(perf, args.stability_percentage, args.max_windows, args.max_points)
    mode, levels = ("request_rate", args.request_rate) if args.request_rate else ("concurrency", args.concurrency)
    if levels is not None:
        levels_from_text(mode, levels)
    if args.space is not None:
        parse_space(args.space)
    if args.resume:
        load_points(args.resume, args.model_name)  # another model's file: refused now, not after a run
    return TuneSpec(args.model_name, goals, args.space, levels, mode, args.strategy, measure, args.resume)


@contextlib.asynccontextmanager
async def open_target(args: argparse.Namespace) -> AsyncIterator[Target]:
    """The target the flags name; an in-process engine is started (explicit mode, only the
    tuned model and what it needs) and stopped around it.

    Raises:
        PerfError: the engine failed to start.
    """
    if args.url is not None:
        remote = RemoteTarget(args.url, args.protocol, args.server_pid)
        try:
            yield remote
        finally:
            await remote.close()
        return
    async with started_engine(args.model_repository, args.model_name) as server:
        yield EngineTarget(server)


def space_text(model: str, space: SearchSpace, machine: Machine, given: bool) -> str:
    """What ``--show-space`` prints: the space in ``--space``'s form, the served setting, the
    load levels, and how many points that is."""
    origin = "as given" if given else f"derived from the model and the machine ({machine.text()})"
    settings, levels = space.size(), len(space.levels)
    return "\n".join([
        f"{model}: the search space, {origin}",
        f"space:  {space.text() or '(none: only the load axis)'}",
        f"served: {space.baseline().label}",
        f"load:   {space.levels_text()}",
        f"{settings} setting(s) x {levels} load level(s): brute force measures up to {settings * levels} "
        "points; the quick search starts at the served config and measures a fraction of them.",
        "Narrow it with --space '...' (the 'space:' line is in its form) and --concurrency / --request-rate.",
    ]) + "\n"


async def run(args: argparse.Namespace, spec: TuneSpec, out: TextIO | None = None,
              err: TextIO | None = None) -> int:
    """Tune as the flags say (see the module docstring); returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    progress = ProgressLine(err)
    try:
        async with open_target(args) as target:
            tuner = Tuner(target, spec, progress)
            if args.show_space:
                space = await tuner.search_space()
                print(space_text(spec.model, space, Machine.read(), spec.space is not None), end="", file=out)
                return 0
            result = await _measure(tuner, err)
            progress.close()
            print(result.summary(), file=out, flush=True)
            write_exports(result, args.json, args.csv, args.html)
            if result.stopped:
                again = f" --resume {args.resume}" if args.resume else " --resume STATE.json next time"
                print(f"workbench tune: stopped; the partial result is above, nothing was written to config.pbtxt "
                      f"(run again with{again} to continue)", file=err)
                return STOPPED
            return await _keep(args, target, result, out)
    except (PerfError, WorkbenchError, ValueError, OSError) as exc:
        progress.close()
        print(f"workbench tune: error: {error_text(exc)}", file=err)
        return 1


async def _measure(tuner: Tuner, err: TextIO) -> TuneResult:
    """:meth:`Tuner.run`, stopped cleanly by the first Ctrl-C (a second one interrupts at once)."""
    loop = asyncio.get_running_loop()

    def interrupted() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        print("\nworkbench tune: stopping (Ctrl-C): the window in progress is dropped and the model is "
              "reloaded from its config.pbtxt; Ctrl-C again to abort at once", file=err, flush=True)
        tuner.stop()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
        loop.add_signal_handler(signal.SIGINT, interrupted)
    try:
        return await tuner.run()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)


async def _keep(args: argparse.Namespace, target: Target, result: TuneResult, out: TextIO) -> int:
    """Write, print or offer the recommendation; the exit status."""
    decision = result.decision
    if decision.chosen is None:
        return 1
    if not decision.apply:
        return 0
    if isinstance(target, RemoteTarget):
        where = f"{result.model}/config.pbtxt"
        if result.config_text:
            print(f"\nThe recommended config: put it in the server's model repository as {where}, then reload "
                  f"the model (the load API, a poll, or a restart):\n\n{result.config_text}", file=out)
        else:
            knobs = decision.chosen.setting.by_model(result.model)
            print("\nThe recommended knobs, to set in each model's config.pbtxt in the server's repository: "
                  + "; ".join(f"{m}: {' '.join(f'{k}={v}' for k, v in ks.items())}" for m, ks in knobs.items()),
                  file=out)
        return 0
    if not args.apply:
        print("\nNot written: run with --apply to write it into config.pbtxt (comments kept, the previous "
              "file as config.pbtxt.bak).", file=out)
        return 0
    assert isinstance(target, EngineTarget)
    written = await apply_result(target.server, result)
    status = 0
    for name, write in written.items():
        if write["reloaded"]:
            state = "reloaded: the model serves it"
        elif not write["kept"]:
            state, status = f"its reload failed, the previous file was put back: {write['reason']}", 1
        else:
            state = f"not reloaded: {write['reason']}"
        backup = f" (the previous file kept as {write['backup']})" if write["backup"] else ""
        print(f"\n{name}: wrote {write['path']}{backup}; {state}", file=out)
        for dependent in write["dependents"]:
            print(f"  {dependent}", file=out)
    if not written:
        print("\nNothing to write: config.pbtxt already holds the chosen values.", file=out)
    return status


def main(args: argparse.Namespace) -> int:
    """``workbench tune``: check the flags (exit 2 through argparse on a bad one), then
    :func:`run` on a fresh event loop (uvloop's when installed, as ``workbench perf``)."""
    try:
        spec = spec_from_args(args)
    except (ValueError, PerfError) as exc:
        args.tune_parser.error(error_text(exc))
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard] on Linux
        return asyncio.run(run(args, spec))
    return uvloop.run(run(args, spec))


__all__ = ["STOPPED", "add_arguments", "main", "open_target", "run", "space_text", "spec_from_args"]
