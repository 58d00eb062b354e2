"""How long a lone request really waits for a sub-millisecond ``max_queue_delay_microseconds``,
on both event loops the product runs on, and how many times the dispatcher woke for it.

One fake-backend model (``workbench.testing.fake_backend``: no compute) with
``preferred_batch_size: [ 4 ]`` and the delay under test; ``--requests`` serial requests (so
each one waits the whole delay alone). Reported per loop and delay: the median and p90 queue
duration from the server's statistics (µs) and ``Dispatcher.dispatch`` calls per request (3 =
arrival, delay's end, completion; far more = the loop re-armed a timer that fired early, a spin).
The asyncio selector loop is the Jupyter host's (tornado), uvloop is ``workbench serve``'s.

    .venv/bin/python bench/queue_delay_precision.py [--delays 100,400,600,1500] [--requests 200]

Run it with ``PYTHONPATH=<another tree>`` to measure other code. Results: bench/RESULTS.md,
"Queue delays at microsecond precision".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

import numpy as np
import uvloop

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.scheduling.dispatcher import Dispatcher
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model

CALLS = [0]
_dispatch = Dispatcher.dispatch


def _counted(self: Dispatcher) -> None:
    CALLS[0] += 1
    _dispatch(self)


async def measure(delay_us: int, requests: int) -> tuple[float, float, float]:
    """(median queue µs, p90 queue µs, dispatch calls per request) for one delay."""
    with tempfile.TemporaryDirectory() as repo:
        register_backend("fake", FakeBackend)
        write_fake_model(Path(repo), "fake", extra="dynamic_batching { preferred_batch_size: [ 4 ] "
                                                   f"max_queue_delay_microseconds: {delay_us} }}")
        BEHAVIOUR.reset()
        server = Server(ServerOptions(model_repository=[repo]))
        await server.start()
        try:
            waits = []
            CALLS[0] = 0
            for i in range(requests):
                request = InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.full((1, 1), i, np.float32))])
                before = (await server.statistics("fake"))["model_stats"][0]["inference_stats"]["queue"]["ns"]
                await server.infer(request)
                after = (await server.statistics("fake"))["model_stats"][0]["inference_stats"]["queue"]["ns"]
                waits.append((after - before) / 1000)
            calls = CALLS[0] / requests
        finally:
            await server.stop()
    waits.sort()
    return statistics.median(waits), waits[int(len(waits) * 0.9)], calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="100,400,600,1500", help="max_queue_delay_microseconds, comma-separated")
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    Dispatcher.dispatch = _counted  # type: ignore[method-assign]
    print("| loop | delay µs | queue median µs | queue p90 µs | dispatches per request |")
    print("|---|---:|---:|---:|---:|")
    for name, run in (("asyncio (Jupyter host)", asyncio.run), ("uvloop (workbench serve)", uvloop.run)):
        for delay in (int(d) for d in args.delays.split(",")):
            median, p90, calls = run(measure(delay, args.requests))
            print(f"| {name} | {delay} | {median:.0f} | {p90:.0f} | {calls:.1f} |")


if __name__ == "__main__":
    main()
