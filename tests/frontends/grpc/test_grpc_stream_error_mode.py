"""``ModelStreamInfer`` with the ``triton_grpc_error: true`` header (Triton's gRPC status mode):
the first request that fails in the engine ends the stream with its error as the gRPC status;
without the header (and for a request that never reached the engine) the error stays a message
in the stream. Fakes at the backend boundary only (the fake and repeat backends)."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.repeat_backend import RepeatBackend, write_repeat_model

ERROR_MODE = (("triton_grpc_error", "true"),)


@pytest_asyncio.fixture
async def stub(tmp_path: Path, stub_for):
    register_backend("fake", FakeBackend)
    register_backend("repeat", RepeatBackend)
    write_fake_model(tmp_path, "fake1", count=1)
    write_repeat_model(tmp_path, "repeat")
    BEHAVIOUR.reset()
    BEHAVIOUR.error_values = {2.0}
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield await stub_for(server)
    BEHAVIOUR.gate.set()


def fake_request(value: float, model: str = "fake1") -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 1])
    return pb.ModelInferRequest(model_name=model, id=f"{value:g}", inputs=[tensor],
                                raw_input_contents=[np.full((1, 1), value, np.float32).tobytes()])


def repeat_message(values: list[int]) -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="IN", datatype="INT32", shape=[len(values)])
    return pb.ModelInferRequest(model_name="repeat", inputs=[tensor],
                                raw_input_contents=[np.array(values, np.int32).tobytes()])


async def ended_with(call, code: grpc.StatusCode, details: str) -> None:
    """The next read finds the stream ended with ``code`` and ``details``."""
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await call.read()
    assert (ended.value.code(), ended.value.details()) == (code, details)


async def test_a_failed_request_ends_the_stream_with_its_status(stub) -> None:
    """NVIDIA's lifecycle test_triton_grpc_error_error_on: an answer, then the error as the
    stream's status (INVALID_ARGUMENT here: the fake's error), nothing after it."""
    call = stub.ModelStreamInfer(metadata=ERROR_MODE)
    await call.write(fake_request(1.0))
    first = await call.read()
    assert not first.error_message and first.infer_response.id == "1"
    await call.write(fake_request(2.0))
    await ended_with(call, grpc.StatusCode.INVALID_ARGUMENT, "fake error for value 2")


async def test_a_decoupled_error_response_ends_the_stream_after_the_responses_before_it(stub) -> None:
    call = stub.ModelStreamInfer(metadata=ERROR_MODE)
    await call.write(repeat_message([5, -1, 6]))
    first = await call.read()
    assert np.frombuffer(first.infer_response.raw_output_contents[0], np.int32).tolist() == [5]
    await ended_with(call, grpc.StatusCode.INVALID_ARGUMENT, "negative value -1 at 1")


async def test_an_unknown_model_stays_an_error_message_in_the_stream(stub) -> None:
    """As Triton: a request that cannot be created answers in the stream, which stays open."""
    call = stub.ModelStreamInfer(metadata=ERROR_MODE)
    await call.write(fake_request(1.0, model="nope"))
    assert (await call.read()).error_message == "Request for unknown model: 'nope' is not found"
    await call.write(fake_request(3.0))
    assert not (await call.read()).error_message
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


@pytest.mark.parametrize("metadata", [(), (("triton_grpc_error", "false"),)])
async def test_without_the_header_the_stream_stays_open(stub, metadata) -> None:
    call = stub.ModelStreamInfer(metadata=metadata)
    for value in (2.0, 1.0):
        await call.write(fake_request(value))
    replies = [await call.read() for _ in range(2)]
    assert [r.error_message for r in replies] == ["fake error for value 2", ""]
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
