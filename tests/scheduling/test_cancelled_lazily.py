"""Cancelled queued requests cost the dispatcher a visit each, not a pass over the queue
per batch (issue 18: they are skipped when a batch forming from the head reaches them).

Visits are counted, not timed: the test's event loop hands out futures that count
``done()`` calls, the check every scheduler makes for a request whose client went away.
The engine and schedulers run unchanged; the fake backend blocks the one instance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model

T = TypeVar("T")

QUEUED = 400  # half of them cancelled before the instance frees


class CountingFuture(asyncio.Future):
    """A future that counts how often anyone asks whether it is done."""

    visits = 0

    def done(self) -> bool:
        CountingFuture.visits += 1
        return super().done()


class CountingLoop(asyncio.SelectorEventLoop):
    def create_future(self) -> asyncio.Future:
        return CountingFuture(loop=self)


def run_counting(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a :class:`CountingLoop` (``asyncio.Runner(loop_factory=)`` is
    Python 3.11+; this project supports 3.10)."""
    loop = CountingLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def request(value: float) -> InferenceRequest:
    return InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.full((1, 1), value, np.float32))])


async def drain_behind_a_busy_instance(repo: Path, extra: str) -> tuple[int, int]:
    """Queue QUEUED requests behind a blocked execution, cancel every other one, let them
    run; (done() calls while the queue drained, executions)."""
    register_backend("fake", FakeBackend)
    write_fake_model(repo, "fake", count=1, extra=extra)
    BEHAVIOUR.reset()
    BEHAVIOUR.gate.clear()
    async with Server(ServerOptions(model_repository=[str(repo)])) as server:
        try:
            blocker = asyncio.create_task(server.infer(request(-1)))
            tasks = [asyncio.create_task(server.infer(request(i))) for i in range(QUEUED)]
            for _ in range(10_000):  # yield (no time passes) until every request is queued
                if sum(s.pending for s in server.model_statistics()) == QUEUED:
                    break
                await asyncio.sleep(0)
            assert sum(s.pending for s in server.model_statistics()) == QUEUED
            for task in tasks[1::2]:
                task.cancel()
            await asyncio.gather(*tasks[1::2], return_exceptions=True)
            CountingFuture.visits = 0
            BEHAVIOUR.gate.set()
            results = await asyncio.gather(blocker, *tasks[::2])
            visits = CountingFuture.visits
        finally:
            BEHAVIOUR.gate.set()
        assert [float(r.outputs[0].data[0, 0]) for r in results[1:]] == [float(i) for i in range(0, QUEUED, 2)]
        assert sum(s.pending for s in server.model_statistics()) == 0
        return visits, len(BEHAVIOUR.batches)


@pytest.mark.parametrize("extra", ["dynamic_batching { }", ""], ids=["dynamic_batcher", "fifo"])
def test_cancelled_requests_cost_one_visit_each_not_one_per_batch(tmp_path: Path, extra: str) -> None:
    visits, executions = run_counting(drain_behind_a_busy_instance(tmp_path, extra))
    # the dynamic batcher forms batches of 4 (max_batch_size), the default scheduler of 1
    assert executions == 1 + (QUEUED // 2) // (4 if extra else 1)
    # each request is visited a few times in all (queued, taken, answered); a scan of the
    # whole queue per batch would be ~QUEUED**2 / 16 visits
    assert visits <= 3 * QUEUED, visits
