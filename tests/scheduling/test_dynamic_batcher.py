"""Dynamic batcher: batches form from queued requests as Triton's dynamic_batching does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor, Unavailable
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.models import identity_graph, write_model
from workbench.testing.waits import queued, until


async def start(repo: Path, extra: str, count: int = 1) -> Server:
    register_backend("fake", FakeBackend)
    write_fake_model(repo, "fake", count=count, extra=extra)
    BEHAVIOUR.reset()
    server = Server(ServerOptions(model_repository=[str(repo)]))
    await server.start()
    return server


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
    await BEHAVIOUR.executing(1)  # the only instance is now busy with request 0
    rest = [asyncio.create_task(server.infer(request(i))) for i in range(1, 7)]
    await queued(server, "fake", 6)
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
    await BEHAVIOUR.executing(1)
    rest = [asyncio.create_task(server.infer(request(i, batch=3))) for i in (1, 2)]
    await queued(server, "fake", 2)
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
        for array, result in zip(arrays, results, strict=True):
            np.testing.assert_array_equal(result.outputs[0].data, array)
        assert await batch_sizes(server, "ident") == {2: 2}


async def test_stop_flushes_waiting_batches(tmp_path: Path) -> None:
    extra = "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 60000000 }"
    server = await start(tmp_path, extra)
    pending = [asyncio.create_task(server.infer(request(i))) for i in range(2)]
    await queued(server, "fake", 2)  # both wait for a batch of 4 (or the 60 s delay)
    await asyncio.wait_for(server.stop(), timeout=20)
    assert [float(r.outputs[0].data[0, 0]) for r in await asyncio.gather(*pending)] == [0.0, 1.0]


def prioritized(value: float, **parameters) -> InferenceRequest:
    req = request(value)
    req.parameters = parameters
    return req


async def blocked_server(tmp_path: Path, stopper, extra: str, count: int = 1):
    """A started fake model whose only instance is busy (gate closed) with request -1."""
    server = await start(tmp_path, extra, count=count)
    stopper(server)
    BEHAVIOUR.gate.clear()
    blocker = asyncio.create_task(server.infer(request(-1)))
    await BEHAVIOUR.executing(1)
    return server, blocker


async def test_high_priority_overtakes_a_queued_backlog(tmp_path: Path, stopper) -> None:
    extra = "dynamic_batching { priority_levels: 2 default_priority_level: 2 }"
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    backlog = [asyncio.create_task(server.infer(prioritized(i))) for i in range(1, 6)]
    await queued(server, "fake", 5)
    urgent = asyncio.create_task(server.infer(prioritized(100, priority=1)))
    await queued(server, "fake", 6)
    BEHAVIOUR.gate.set()
    await asyncio.gather(blocker, urgent, *backlog)
    assert BEHAVIOUR.batches == [[-1.0], [100.0, 1.0, 2.0, 3.0], [4.0, 5.0]]


async def test_max_queue_size_rejects_with_tritons_text(tmp_path: Path, stopper) -> None:
    extra = "dynamic_batching { default_queue_policy { max_queue_size: 2 } }"
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    waiting = [asyncio.create_task(server.infer(request(i))) for i in range(2)]
    await queued(server, "fake", 2)
    with pytest.raises(Unavailable, match=r"^Exceeds maximum queue size$"):
        await server.infer(request(9))
    BEHAVIOUR.gate.set()
    await asyncio.gather(blocker, *waiting)
    stats = (await server.statistics("fake"))["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] == 1 and stats["success"]["count"] == 3


async def test_queue_timeout_reject(tmp_path: Path, stopper) -> None:
    extra = ("dynamic_batching { default_queue_policy { timeout_action: REJECT "
             "default_timeout_microseconds: 100000 } }")
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    with pytest.raises(Unavailable, match=r"^Request timeout expired$"):
        await asyncio.wait_for(server.infer(request(1)), timeout=20)
    assert not blocker.done()  # rejected while the instance was still busy
    BEHAVIOUR.gate.set()
    await blocker
    assert BEHAVIOUR.batches == [[-1.0]]


async def test_per_request_timeout_only_where_override_allowed(tmp_path: Path, stopper) -> None:
    extra = ("dynamic_batching { default_queue_policy { allow_timeout_override: true "
             "default_timeout_microseconds: 3600000000 } }")
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    patient = asyncio.create_task(server.infer(request(1)))
    with pytest.raises(Unavailable, match="Request timeout expired"):
        await asyncio.wait_for(server.infer(prioritized(2, timeout=50_000)), timeout=20)
    BEHAVIOUR.gate.set()
    await asyncio.gather(blocker, patient)
    assert BEHAVIOUR.batches == [[-1.0], [1.0]]


async def test_a_request_timeout_only_shortens_the_default(tmp_path: Path, stopper) -> None:
    # Triton's PolicyQueue::Enqueue (L0_model_queue test_timeout_override): the override
    # counts only when it is below the level's default timeout; with no default (0) the
    # request has no queue timeout at all
    extra = ("dynamic_batching { default_queue_policy { allow_timeout_override: true "
             "default_timeout_microseconds: 50000 } }")
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    with pytest.raises(Unavailable, match=r"^Request timeout expired$"):  # the default's 50 ms
        await asyncio.wait_for(server.infer(prioritized(2, timeout=3_600_000_000)), timeout=20)
    BEHAVIOUR.gate.set()
    await blocker
    assert BEHAVIOUR.batches == [[-1.0]]


async def test_a_request_timeout_without_a_default_is_ignored(tmp_path: Path, stopper) -> None:
    extra = "dynamic_batching { default_queue_policy { allow_timeout_override: true } }"
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    waiting = asyncio.create_task(server.infer(prioritized(2, timeout=1)))
    await queued(server, "fake", 1)
    BEHAVIOUR.gate.set()  # its 1 µs has long passed when the instance frees: honoured, it would expire
    await asyncio.gather(blocker, waiting)
    assert BEHAVIOUR.batches == [[-1.0], [2.0]]


async def test_timeout_override_ignored_when_not_allowed(tmp_path: Path, stopper) -> None:
    server, blocker = await blocked_server(tmp_path, stopper, "dynamic_batching { }")
    waiting = asyncio.create_task(server.infer(prioritized(2, timeout=1)))
    await queued(server, "fake", 1)
    BEHAVIOUR.gate.set()  # its 1 µs has long passed when the instance frees: honoured, it would expire
    await asyncio.gather(blocker, waiting)
    assert BEHAVIOUR.batches == [[-1.0], [2.0]]


async def test_queue_timeout_delay_moves_request_behind(tmp_path: Path, stopper) -> None:
    extra = ("dynamic_batching { default_queue_policy { timeout_action: DELAY "
             "default_timeout_microseconds: 3600000000 allow_timeout_override: true } }")
    server, blocker = await blocked_server(tmp_path, stopper, extra)
    early = asyncio.create_task(server.infer(prioritized(1, timeout=50_000)))
    await queued(server, "fake", 1)
    expired_at = time.monotonic() + 0.05
    # request 2 may wait the default hour: only request 1's timeout (50 ms) expires, however slow
    late = asyncio.create_task(server.infer(request(2)))
    await queued(server, "fake", 2)
    await until(lambda: time.monotonic() > expired_at, "request 1's queue timeout to pass")
    BEHAVIOUR.gate.set()
    await asyncio.gather(blocker, early, late)
    assert BEHAVIOUR.batches == [[-1.0], [2.0, 1.0]]


async def test_bad_priority_parameter(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { priority_levels: 2 default_priority_level: 1 }")
    stopper(server)
    with pytest.raises(InvalidArgument, match="'priority' must be a non-negative integer"):
        await server.infer(prioritized(1, priority="high"))


def executions_done(server: Server) -> int:
    return sum(s.execution_count for s in server.model_statistics() if s.name == "fake")


async def held_first(server: Server) -> tuple[list[float], asyncio.Task, asyncio.Task]:
    """Request 1 executing and held (until ``BEHAVIOUR.release``), then request 2 sent, which
    runs on the other instance; returns the completion record and both tasks."""
    done: list[float] = []

    async def run(value: float) -> None:
        result = await server.infer(request(value))
        done.append(float(result.outputs[0].data[0, 0]))

    BEHAVIOUR.release.clear()
    BEHAVIOUR.held_values = {1.0}
    first = asyncio.create_task(run(1))
    await BEHAVIOUR.executing(1)
    second = asyncio.create_task(run(2))
    return done, first, second


async def test_preserve_ordering_releases_in_arrival_order(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { preserve_ordering: true }", count=2)
    stopper(server)
    done, first, second = await held_first(server)
    await until(lambda: executions_done(server) == 1, "request 2's execution to finish")
    await asyncio.sleep(0)  # a response released at once would resume its task on this round
    assert done == [] and not second.done()  # request 2's response waits for request 1's
    BEHAVIOUR.release.set()
    await asyncio.gather(first, second)
    assert done == [1.0, 2.0]
    assert len(BEHAVIOUR.batches) == 2  # they did run on separate instances


async def test_without_preserve_ordering_fast_requests_return_first(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { }", count=2)
    stopper(server)
    done, first, second = await held_first(server)
    await asyncio.wait_for(second, timeout=10)  # while request 1 is still held
    BEHAVIOUR.release.set()
    await first
    assert done == [2.0, 1.0]


# While an idle instance's batch fills (the queue delay running), each arrival is decided without a
# scan of the queue when nothing can have changed the decision (DynamicBatchPolicy._still_filling);
# these check the arrivals that must still dispatch at once.

async def test_a_filling_batch_leaves_when_it_reaches_max_batch_size(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { max_queue_delay_microseconds: 60000000 }")
    stopper(server)
    tasks = []
    for i in range(3):  # max_batch_size 4, one arrival at a time
        tasks.append(asyncio.create_task(server.infer(request(i))))
        await queued(server, "fake", i + 1)
    tasks.append(asyncio.create_task(server.infer(request(3))))
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)
    assert [float(r.outputs[0].data[0, 0]) for r in results] == [0.0, 1.0, 2.0, 3.0]
    assert await batch_sizes(server) == {4: 1}


async def test_a_filling_batch_counts_batch_sizes_towards_the_max(tmp_path: Path, stopper) -> None:
    server = await start(tmp_path, "dynamic_batching { max_queue_delay_microseconds: 60000000 }")
    stopper(server)
    first = asyncio.create_task(server.infer(request(1, batch=3)))
    await queued(server, "fake", 1)
    second = asyncio.create_task(server.infer(request(2)))  # 3 + 1 = max_batch_size 4
    await asyncio.wait_for(asyncio.gather(first, second), timeout=20)
    assert await batch_sizes(server) == {4: 1}


async def test_a_request_of_another_shape_closes_a_filling_batch_at_once(tmp_path: Path) -> None:
    config = """
name: "ident"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 60000000 }
"""
    write_model(tmp_path, "ident", config, identity_graph(TensorProto.FLOAT, ["b", "n"]))
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        def ident(n: int) -> InferenceRequest:
            return InferenceRequest("ident", [Tensor("INPUT0", "FP32", np.full((1, n), n, np.float32))])

        first = [asyncio.create_task(server.infer(ident(2))) for _ in range(2)]
        await queued(server, "ident", 2)
        other = asyncio.create_task(server.infer(ident(3)))  # closes the batch of the two before it
        await asyncio.wait_for(asyncio.gather(*first), timeout=20)
        assert await batch_sizes(server, "ident") == {2: 1}
        other.cancel()
