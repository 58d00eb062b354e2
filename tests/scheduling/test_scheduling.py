"""Direct scheduler behaviour around a controllable backend (the fake sits at the backend boundary)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.waits import queued, until


@pytest_asyncio.fixture
async def fake_server(tmp_path: Path):
    register_backend("fake", FakeBackend)
    write_fake_model(tmp_path, "fake", count=2)
    BEHAVIOUR.reset()
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield server
    BEHAVIOUR.gate.set()
    BEHAVIOUR.barrier = None


def request(value: float) -> InferenceRequest:
    return InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.full((1, 1), value, np.float32))])


def cancelled(server: Server) -> int:
    return sum(s.failures.get("CANCELED", 0) for s in server.model_statistics() if s.name == "fake")


async def test_instances_execute_in_parallel(fake_server: Server) -> None:
    BEHAVIOUR.barrier = threading.Barrier(2, timeout=10)  # breaks unless two executions overlap
    results = await asyncio.gather(fake_server.infer(request(1)), fake_server.infer(request(2)))
    assert sorted(float(r.outputs[0].data[0, 0]) for r in results) == [1.0, 2.0]
    assert sorted(BEHAVIOUR.executions) == ["fake_0_0", "fake_0_1"]


async def test_busy_instances_leave_requests_queued_and_loop_free(fake_server: Server) -> None:
    BEHAVIOUR.gate.clear()
    pending = [asyncio.create_task(fake_server.infer(request(i))) for i in range(6)]
    await BEHAVIOUR.executing(2)
    await queued(fake_server, "fake", 4)
    # both instances blocked in execute; the event loop still answers
    assert await fake_server.model_ready("fake")
    assert sum(BEHAVIOUR.executions.values()) == 2
    assert not any(task.done() for task in pending)
    BEHAVIOUR.gate.set()
    values = [float(r.outputs[0].data[0, 0]) for r in await asyncio.gather(*pending)]
    assert values == [float(i) for i in range(6)]
    assert sum(BEHAVIOUR.executions.values()) == 6  # one request per execution


async def test_cancelled_request_is_dropped_from_the_queue(fake_server: Server) -> None:
    BEHAVIOUR.gate.clear()
    blockers = [asyncio.create_task(fake_server.infer(request(i))) for i in range(2)]
    await BEHAVIOUR.executing(2)
    abandoned = asyncio.create_task(fake_server.infer(request(99)))
    await queued(fake_server, "fake", 1)
    abandoned.cancel()
    BEHAVIOUR.gate.set()
    await asyncio.gather(*blockers)
    # dropped when an instance came free: counted as a CANCELED failure, never executed
    await until(lambda: cancelled(fake_server) == 1, "the cancelled request to be dropped")
    assert sum(BEHAVIOUR.executions.values()) == 2
    with pytest.raises(asyncio.CancelledError):
        await abandoned
