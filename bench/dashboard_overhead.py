"""What an open dashboard costs the server: digits_mlp throughput, latency and server CPU per
request with and without a live dashboard, over HTTP, under one continuous load.

    /tmp/uivenv/bin/python bench/dashboard_overhead.py [--slices 24] [--slice-seconds 3]
        [--concurrency 16] [--interval 1.0]

The engine and its HTTP frontend run in this process on uvloop, as ``workbench serve`` runs
them (``digits_mlp`` copied from the sample repository into a temporary one, explicit mode).
The load comes from a separate process (this script with ``--client``: ``--concurrency``
closed-loop ``tritonclient.http.aio`` clients, batch 1, binary tensors) and runs without a
break while this process switches the dashboard on and off in short slices (ABBA order), so
the other work on a shared machine weighs on both states alike:

* on: the dashboard's per-session machinery runs: a ``LiveStatistics`` observing every
  request and the one periodic callback (``Dashboard.tick`` every ``--interval`` s: closes a
  statistics interval, streams the live plots' ColumnDataSources, the histogram);
* off: neither. The dashboard's Panel objects (all four tabs) are built once before the
  first slice and exist in both states; building them is timed on its own.

No browser is attached: sending the streamed rows over a websocket (a few hundred bytes a
second) is not in these numbers. Prints a markdown table per state (infer/s as the median
and the mean of its slices, pooled client p50 / p99 latency, server CPU per request: this
process's user + system time / requests, the mean tick time), the on/off throughput ratio of
each ABBA block (median, mean with a 95 % interval), the time to build the dashboard, and
the cost of the one per-request hook, the LiveStatistics observer, timed in isolation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from panel.io.callbacks import PeriodicCallback

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "repository" / "digits_mlp"
MODEL = "digits_mlp"


# ----------------------------------------------------------------- the load (child process)
async def client_main(port: int, seconds: float, concurrency: int) -> None:
    """Closed-loop clients for ``seconds``; prints ``[[wall end time, latency s], ...]``."""
    import tritonclient.http.aio as aioclient

    client = aioclient.InferenceServerClient(f"127.0.0.1:{port}", conn_limit=concurrency)
    pixels = np.random.default_rng(0).integers(0, 17, (1, 64)).astype(np.float32)
    done: list[tuple[float, float]] = []
    failures = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal failures
        while time.perf_counter() < deadline:
            tensor = aioclient.InferInput("pixels", [1, 64], "FP32")
            tensor.set_data_from_numpy(pixels, binary_data=True)
            start = time.perf_counter()
            try:
                await client.infer(MODEL, [tensor])
            except Exception:  # noqa: BLE001 - counted
                failures += 1
                continue
            done.append((time.time(), time.perf_counter() - start))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await client.close()
    print(json.dumps({"failed": failures, "done": done}))


# ----------------------------------------------------------------- the server (this process)
def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def successes(server) -> int:
    return sum(s.stats["success"].count for s in server.model_statistics())


class Switchable:
    """A built Dashboard whose live machinery (LiveStatistics + periodic tick) is switched on
    and off; ticks are timed."""

    def __init__(self, server, interval_s: float) -> None:
        import panel as pn

        from workbench.serving.live_stats import LiveStatistics
        from workbench.ui import Dashboard

        self._pn, self._live_type = pn, LiveStatistics
        pn.extension("codeeditor", "tabulator")
        start = time.perf_counter()
        self.board = Dashboard(server)
        view = pn.panel(self.board)  # typed Viewable | ServableMixin; a Viewer's view is a Viewable
        assert isinstance(view, pn.viewable.Viewable)
        view.get_root()  # the Bokeh models a session would send
        self.build_s = time.perf_counter() - start
        self.board.live.close()  # off until switched on
        self.server, self.interval_s = server, interval_s
        self.tick_s: list[float] = []
        self._callback: PeriodicCallback | None = None

    def _tick(self) -> None:
        start = time.perf_counter()
        self.board.tick()
        self.tick_s.append(time.perf_counter() - start)

    def on(self) -> None:
        if self._callback is not None:
            return  # already on (ABBA repeats a state)
        self.board.live.live = self._live_type(self.server, history=self.board.live.history)
        self._callback = self._pn.state.add_periodic_callback(
            self._tick, period=int(self.interval_s * 1000))

    def off(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None
        self.board.live.close()


def observer_ns(calls: int = 200_000) -> float:
    """Mean cost of the success observer a dashboard adds, ns per call (in isolation, on a
    server with no model: the observer appends the latency to a list)."""
    from workbench import ModelStatistics, Server, ServerOptions
    from workbench.serving.live_stats import LiveStatistics

    live = LiveStatistics(Server(ServerOptions(model_repository=["."])))
    stats = ModelStatistics(MODEL, "1")
    observe = live._observe  # the callable the engine calls per request
    start = time.perf_counter_ns()
    for i in range(calls):
        if i % 40_000 == 0:
            live._latencies.clear()  # as sample() does every interval
        observe(stats, 1000, 10, 10, 10, 10)
    elapsed = time.perf_counter_ns() - start
    live.close()
    return elapsed / calls


def abba(count: int) -> list[bool]:
    """on/off order: on, off, off, on, on, off, off, on, ..."""
    return [(i % 4) in (0, 3) for i in range(count)]


async def run_slices(server, port: int, args: argparse.Namespace, dashboard: Switchable) -> list[dict]:
    seconds = args.slices * args.slice_seconds
    client = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", f"--port={port}", f"--seconds={seconds + 4}",
        f"--concurrency={args.concurrency}", stdout=asyncio.subprocess.PIPE)
    reading = asyncio.ensure_future(client.communicate())
    await asyncio.sleep(2.0)  # the client's start-up and first requests
    slices = []
    for state in abba(args.slices):
        dashboard.on() if state else dashboard.off()
        ticks = len(dashboard.tick_s)
        begin = {"wall": time.time(), "n": successes(server), "cpu": cpu_s()}
        await asyncio.sleep(args.slice_seconds)
        slices.append({"on": state, "from": begin["wall"], "to": time.time(),
                       "requests": successes(server) - begin["n"], "cpu_s": cpu_s() - begin["cpu"],
                       "seconds": time.time() - begin["wall"], "ticks": dashboard.tick_s[ticks:]})
    dashboard.off()
    out, _ = await reading
    result = json.loads(out)
    for piece in slices:
        piece["latencies_s"] = [lat for end, lat in result["done"] if piece["from"] <= end < piece["to"]]
    slices[0]["client_failed"] = result["failed"]
    return slices


def block_ratios(slices: list[dict]) -> list[float]:
    """Per ABBA block of four slices: requests of its two on slices / its two off slices (the
    two states of a block share the machine's state of that moment)."""
    ratios = []
    for i in range(0, len(slices) - 3, 4):
        block = slices[i:i + 4]
        on = sum(s["requests"] / s["seconds"] for s in block if s["on"])
        off = sum(s["requests"] / s["seconds"] for s in block if not s["on"])
        ratios.append(on / off)
    return ratios


def row(name: str, slices: list[dict]) -> str:
    rates = [s["requests"] / s["seconds"] for s in slices]
    lat = sorted(x for s in slices for x in s["latencies_s"])
    p50, p99 = statistics.median(lat) * 1e3, lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3
    requests = sum(s["requests"] for s in slices)
    cpu_us = sum(s["cpu_s"] for s in slices) / requests * 1e6
    ticks = [t for s in slices for t in s["ticks"]]
    tick = f"{statistics.mean(ticks) * 1e3:.2f} ({len(ticks)})" if ticks else "-"
    return (f"| {name} | {len(slices)} | {requests} | {statistics.median(rates):.0f} | "
            f"{statistics.mean(rates):.0f} | {p50:.2f} | {p99:.2f} | {cpu_us:.0f} | {tick} |")


async def server_main(args: argparse.Namespace) -> int:
    from workbench import Server, ServerOptions
    from workbench.serving.http_service import http_service
    from workbench.serving.sockets import bind_socket

    with tempfile.TemporaryDirectory(prefix="dashboard_bench_") as tmp:
        shutil.copytree(SAMPLE, Path(tmp) / MODEL)
        options = ServerOptions(model_repository=[tmp], model_control_mode="explicit",
                                load_model=[MODEL], http_address="127.0.0.1", http_port=0)
        async with Server(options) as server:
            sock = bind_socket("127.0.0.1", 0)
            port = sock.getsockname()[1]
            http = http_service(server, options)
            serving = asyncio.ensure_future(http.serve(sockets=[sock]))
            try:
                dashboard = Switchable(server, args.interval)
                slices = await run_slices(server, port, args, dashboard)
            finally:
                http.should_exit = True
                await serving
    on = [s for s in slices if s["on"]]
    off = [s for s in slices if not s["on"]]
    print(f"digits_mlp over HTTP, {args.concurrency} closed-loop clients (another process), batch 1, "
          f"{args.slices} slices of {args.slice_seconds:g} s (ABBA), dashboard tick every "
          f"{args.interval:g} s; client failures: {slices[0]['client_failed']}\n")
    print("| dashboard | slices | requests | infer/s median | infer/s mean | p50 ms | p99 ms "
          "| server CPU µs/request | tick ms (count) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(row("off", off))
    print(row("on", on))
    pairs = ", ".join(f"{'on' if s['on'] else 'off'} {s['requests'] / s['seconds']:.0f}" for s in slices)
    print(f"\nper slice infer/s: {pairs}")
    ratios = block_ratios(slices)
    if len(ratios) > 1:
        mean, spread = statistics.mean(ratios), 1.96 * statistics.stdev(ratios) / len(ratios) ** 0.5
        print(f"on/off throughput per ABBA block (on, off, off, on): median {statistics.median(ratios):.3f}, "
              f"mean {mean:.3f} ± {spread:.3f} (95 %), {len(ratios)} blocks")
    print(f"building the dashboard (four tabs, Bokeh models): {dashboard.build_s * 1e3:.0f} ms")
    print(f"LiveStatistics observer, called directly: {observer_ns():.0f} ns per request")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slices", type=int, default=24, help="on/off slices (ABBA order)")
    parser.add_argument("--slice-seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--interval", type=float, default=1.0, help="dashboard tick, seconds")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        asyncio.run(client_main(args.port, args.seconds, args.concurrency))
        return 0
    try:  # as `workbench serve` runs
        import uvloop
    except ImportError:
        return asyncio.run(server_main(args))
    return uvloop.run(server_main(args))


if __name__ == "__main__":
    sys.exit(main())
