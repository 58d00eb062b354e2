"""The dispatcher's own event-loop CPU per request, with an instance that does nothing.

``CONCURRENCY`` client tasks call ``Dispatcher.enqueue`` in a closed loop on a dispatcher given
a :class:`~workbench.scheduling.dynamic_batcher.DynamicBatchPolicy` (``max_batch_size`` 32, no
queue delay) and one instance whose ``execute`` returns empty responses at once: no engine, no
validation, no framework, so what the loop thread spends per request is the scheduling code's
(admission, counts, batch forming, the hand-off to the instance thread and back, statistics,
the answer). Reported per round: requests/s, the loop thread's CPU per request
(``time.thread_time``, robust to other load on the machine) and the mean batch size.

    PYTHONPATH=<tree> .venv/bin/python bench/dispatcher_hot_path.py [--seconds 3] [--rounds 3]

Results: bench/RESULTS.md, "Issue 35: the dispatcher / batch-policy seam".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelDynamicBatching

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes, InstanceSpec, ModelInstance
from workbench.scheduling.dispatcher import Dispatcher
from workbench.scheduling.dynamic_batcher import dynamic_batcher
from workbench.statistics import ModelStatistics


class _Instant(ModelInstance):
    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        return [BackendResponse(outputs={}) for _ in requests]


async def _client(scheduler: Dispatcher, data: np.ndarray, until: float, done: list[int]) -> None:
    enqueue = scheduler.enqueue
    while time.monotonic() < until:
        await enqueue(BackendRequest({"INPUT0": data}, ("OUTPUT0",), {}), time.monotonic_ns())
        done[0] += 1


async def _main(args: argparse.Namespace) -> None:
    stats = ModelStatistics("bench", "1")
    scheduler = dynamic_batcher([_Instant(InstanceSpec(name="bench_0", group_name="bench", kind="KIND_CPU"))],
                                stats, max_batch_size=32, batching=ModelDynamicBatching())
    data = np.zeros((1, 64), np.float32)
    rounds = []
    for index in range(args.rounds + 1):  # the first round warms up
        done = [0]
        wall0, cpu0, executions0 = time.monotonic(), time.thread_time(), stats.execution_count
        until = wall0 + (1.0 if index == 0 else args.seconds)
        await asyncio.gather(*(_client(scheduler, data, until, done) for _ in range(args.concurrency)))
        wall, cpu = time.monotonic() - wall0, time.thread_time() - cpu0
        if index:
            rounds.append((done[0] / wall, 1e6 * cpu / done[0], done[0] / max(1, stats.execution_count - executions0)))
    await scheduler.stop()
    for req_s, cpu_us, batch in rounds:
        print(f"round: {req_s:.0f} req/s, loop CPU {cpu_us:.2f} us/req, batch {batch:.1f}")
    print(f"median: {statistics.median(r[0] for r in rounds):.0f} req/s, loop CPU "
          f"{statistics.median(r[1] for r in rounds):.2f} us/req")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
