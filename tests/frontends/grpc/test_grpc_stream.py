"""gRPC streaming and client cancellation, in-process, around a controllable fake backend
(the fake sits only at the backend boundary; the engine and schedulers are real)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model


@pytest_asyncio.fixture
async def fake_stub(tmp_path: Path, stub_for):
    """A stub over a server whose models ``fake1`` (one instance) and ``fake2`` (two) use
    the fake backend."""
    register_backend("fake", FakeBackend)
    write_fake_model(tmp_path, "fake1", count=1)
    write_fake_model(tmp_path, "fake2", count=2)
    BEHAVIOUR.reset()
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield await stub_for(server), server
    BEHAVIOUR.gate.set()


def fake_request(model: str, value: float, request_id: str = "") -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 1])
    data = np.full((1, 1), value, np.float32).tobytes()
    return pb.ModelInferRequest(model_name=model, id=request_id, inputs=[tensor], raw_input_contents=[data])


def value_of(response: pb.ModelInferResponse) -> float:
    return float(np.frombuffer(response.raw_output_contents[0], np.float32)[0])


async def wait_for_executions(count: int) -> None:
    for _ in range(500):
        if sum(BEHAVIOUR.executions.values()) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} executions, saw {BEHAVIOUR.executions}")


async def test_stream_error_mid_stream_keeps_the_stream_open(fake_stub) -> None:
    stub, _ = fake_stub
    call = stub.ModelStreamInfer()
    await call.write(fake_request("fake2", 1.0, "0"))
    await call.write(fake_request("nope", 2.0, "1"))
    await call.write(fake_request("fake2", 3.0, "2"))
    responses = [await call.read() for _ in range(3)]
    assert [r.infer_response.id for r in responses] == ["0", "1", "2"]
    assert [r.error_message for r in responses] == [
        "", "Request for unknown model: 'nope' is not found", ""
    ]
    assert value_of(responses[0].infer_response) == 1.0 and value_of(responses[2].infer_response) == 3.0
    assert all(r.infer_response.parameters["triton_final_response"].bool_param for r in responses)
    await call.write(fake_request("fake2", 4.0, "3"))  # still open after the error
    assert value_of((await call.read()).infer_response) == 4.0
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_stream_answers_in_request_order(fake_stub) -> None:
    stub, _ = fake_stub
    BEHAVIOUR.slow_values = {1.0}  # the first request takes longer than the second
    call = stub.ModelStreamInfer()
    for value in (1.0, 2.0):
        await call.write(fake_request("fake2", value, str(value)))
    await call.done_writing()
    responses = [r async for r in call]
    assert [value_of(r.infer_response) for r in responses] == [1.0, 2.0]


async def test_deadline_exceeded_request_is_dropped_not_executed(fake_stub) -> None:
    stub, server = fake_stub
    BEHAVIOUR.gate.clear()  # the only instance of fake1 blocks in its first execution
    holder = asyncio.ensure_future(stub.ModelInfer(fake_request("fake1", 1.0)))
    await wait_for_executions(1)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ModelInfer(fake_request("fake1", 2.0), timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.sleep(0.5)  # margin: the server's own deadline timer fires at the same time
    BEHAVIOUR.gate.set()
    assert value_of(await holder) == 1.0
    assert BEHAVIOUR.batches == [[1.0]]  # the abandoned request never reached the backend
    stats = (await stub.ModelStatistics(pb.ModelStatisticsRequest(name="fake1"))).model_stats[0]
    assert stats.execution_count == 1 and stats.inference_stats.success.count == 1
    assert stats.inference_stats.fail.count == 1
    [fake1] = [s for s in server.model_statistics() if s.name == "fake1"]
    assert fake1.failures == {"CANCELED": 1}


async def test_cancelled_stream_drops_its_queued_requests(fake_stub) -> None:
    stub, server = fake_stub
    BEHAVIOUR.gate.clear()
    holder = asyncio.ensure_future(stub.ModelInfer(fake_request("fake1", 1.0)))
    await wait_for_executions(1)
    call = stub.ModelStreamInfer()
    await call.write(fake_request("fake1", 2.0))
    await call.write(fake_request("fake1", 3.0))
    [fake1] = [s for s in server.model_statistics() if s.name == "fake1"]
    for _ in range(500):  # both stream requests queued behind the blocked one
        if fake1.pending == 2:
            break
        await asyncio.sleep(0.01)
    assert fake1.pending == 2
    call.cancel()
    await asyncio.sleep(0.5)  # margin for the server to see the stream's cancellation
    BEHAVIOUR.gate.set()
    await holder
    assert BEHAVIOUR.batches == [[1.0]]
    assert fake1.failures == {"CANCELED": 2} and fake1.execution_count == 1
