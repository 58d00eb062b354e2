"""Dynamic batcher: batches form from queued requests as Triton's dynamic_batching does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest_asyncio
from onnx import TensorProto

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.models import identity_graph, write_model


async def start(repo: Path, extra: str, count: int = 1) -> Server:
    register_backend("fake", FakeBackend)
    write_fake_model(repo, "fake", count=count, extra=extra)
    BEHAVIOUR.gate.set()
    BEHAVIOUR.barrier = None
    BEHAVIOUR.executions.clear()
    server = Server(ServerOptions(model_repository=[str(repo)]))
    await server.start()
    return server


@pytest_asyncio.fixture
async def stopper():
    servers: list[Server] = []
    yield servers.append
    BEHAVIOUR.gate.set()
    for server in servers:
        await server.stop()


def request(value: float, batch: int = 1) -> InferenceRequest:
    return InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.full((batch, 1), value, np.float32))])


async def batch_sizes(server: Server, model: str = "fake") -> dict[int, int]:
    stats = (await server.statistics(model))["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


async def test_queued_requests_become_batches_up_to_max(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { }")
    stopper(server)
    BEHAVIOUR.gate.clear()
    first = asyncio.create_task(server.infer(request(0)))
    await asyncio.sleep(0.1)  # the only instance is now busy with request 0
    rest = [asyncio.create_task(server.infer(request(i))) for i in range(1, 7)]
    await asyncio.sleep(0.1)
    BEHAVIOUR.gate.set()
    results = await asyncio.gather(first, *rest)
    assert [float(r.outputs[0].data[0, 0]) for r in results] == [float(i) for i in range(7)]
    assert await batch_sizes(server) == {1: 1, 4: 1, 2: 1}  # max_batch_size 4
    stats = (await server.statistics("fake"))["model_stats"][0]
    assert stats["inference_count"] == 7 and stats["execution_count"] == 3


async def test_requests_count_by_their_batch_size(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { }")
    stopper(server)
    BEHAVIOUR.gate.clear()
    first = asyncio.create_task(server.infer(request(0)))
    await asyncio.sleep(0.1)
    rest = [asyncio.create_task(server.infer(request(i, batch=3))) for i in (1, 2)]
    await asyncio.sleep(0.1)
    BEHAVIOUR.gate.set()
    results = await asyncio.gather(first, *rest)
    assert [r.outputs[0].data.shape for r in results] == [(1, 1), (3, 1), (3, 1)]
    assert await batch_sizes(server) == {1: 1, 3: 2}  # 3 + 3 would exceed 4


async def test_preferred_batch_size_leaves_before_the_delay(tmp_path: Path, stopper) -> None:
    extra = "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 60000000 }"
    server = await start(tmp_path, extra)
    stopper(server)
    results = await asyncio.wait_for(
        asyncio.gather(server.infer(request(1)), server.infer(request(2))), timeout=20
    )
    assert len(results) == 2
    assert await batch_sizes(server) == {2: 1}


async def test_max_queue_delay_then_partial_batch(tmp_path: Path, stopper) -> None:
    extra = "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 50000 }"
    server = await start(tmp_path, extra)
    stopper(server)
    results = await asyncio.gather(*(server.infer(request(i)) for i in range(3)))
    assert [float(r.outputs[0].data[0, 0]) for r in results] == [0.0, 1.0, 2.0]
    assert await batch_sizes(server) == {3: 1}
    stats = (await server.statistics("fake"))["model_stats"][0]["inference_stats"]
    assert stats["queue"]["ns"] / stats["queue"]["count"] >= 50_000_000 * 0.9  # waited the delay


async def test_different_shapes_are_not_batched_together(tmp_path: Path) -> None:
    config = """
name: "ident"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 100000 }
"""
    write_model(tmp_path, "ident", config, identity_graph(TensorProto.FLOAT, ["b", "n"]))
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        arrays = [np.full((1, n), n, np.float32) for n in (2, 2, 3, 3)]
        requests = [InferenceRequest("ident", [Tensor("INPUT0", "FP32", a)]) for a in arrays]
        results = await asyncio.gather(*(server.infer(r) for r in requests))
        for array, result in zip(arrays, results):
            np.testing.assert_array_equal(result.outputs[0].data, array)
        assert await batch_sizes(server, "ident") == {2: 2}


async def test_stop_flushes_waiting_batches(tmp_path: Path) -> None:
    extra = "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 60000000 }"
    server = await start(tmp_path, extra)
    pending = [asyncio.create_task(server.infer(request(i))) for i in range(2)]
    await asyncio.sleep(0.1)
    await asyncio.wait_for(server.stop(), timeout=20)
    assert [float(r.outputs[0].data[0, 0]) for r in await asyncio.gather(*pending)] == [0.0, 1.0]
