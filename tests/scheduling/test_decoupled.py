"""Decoupled models (0..n responses per request) through the engine, HTTP and gRPC.

The engine, schedulers and frontends are real; the ``repeat`` test backend sits at the
backend boundary and sends its responses from another thread after ``execute`` returns.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import DecoupledNotSupported, InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import FakeBackend, write_fake_model
from workbench.testing.repeat_backend import RepeatBackend, collect_stream, repeat_request, write_repeat_model


@pytest_asyncio.fixture
async def server(tmp_path: Path):
    register_backend("repeat", RepeatBackend)
    register_backend("fake", FakeBackend)
    write_repeat_model(tmp_path, "repeat")
    write_repeat_model(tmp_path, "repeat_slow", delay_ms=30)
    write_fake_model(tmp_path, "fake", count=1)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield server


async def test_stream_yields_each_response_then_an_empty_final(server: Server) -> None:
    responses = await collect_stream(server, repeat_request([7, 8, 9], request_id="r1"))
    assert [r.final for r in responses] == [False, False, False, True]
    assert [int(r.outputs[0].data[0]) for r in responses[:3]] == [7, 8, 9]
    assert [int(r.outputs[1].data[0]) for r in responses[:3]] == [0, 1, 2]
    assert responses[3].outputs == [] and {r.id for r in responses} == {"r1"}
    stats = (await server.statistics("repeat"))["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 1


async def test_zero_responses_is_only_a_final_flag(server: Server) -> None:
    responses = await collect_stream(server, repeat_request([]))
    assert [(r.outputs, r.final) for r in responses] == [([], True)]


async def test_an_error_response_ends_the_iteration(server: Server) -> None:
    seen = []
    with pytest.raises(InvalidArgument, match="negative value -1 at 1"):
        async for response in server.infer_stream(repeat_request([4, -1, 5])):
            seen.append(int(response.outputs[0].data[0]))
    assert seen == [4]


async def test_non_decoupled_model_streams_one_final_response(server: Server) -> None:
    request = InferenceRequest("fake", [Tensor("INPUT0", "FP32", np.ones((1, 1), np.float32))])
    responses = await collect_stream(server, request)
    assert len(responses) == 1 and responses[0].final


async def test_infer_needs_exactly_one_response(server: Server) -> None:
    response = await server.infer(repeat_request([5]))
    assert response.final and int(response.outputs[0].data[0]) == 5
    for values in ([], [1, 2]):
        with pytest.raises(DecoupledNotSupported):
            await server.infer(repeat_request(values))
    assert await server.model_ready("repeat")  # the model keeps serving


async def test_http_answers_501_with_tritons_text(server: Server, asgi_client) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [2], "data": [1, 2]}]}
    async with asgi_client(server) as http:
        many = await http.post("/v2/models/repeat/infer", json=body)
        body["inputs"][0].update(shape=[1], data=[3])
        one = await http.post("/v2/models/repeat/infer", json=body)
    assert many.status_code == 501
    assert many.json() == {"error": "HTTP end point doesn't support models with decoupled transaction policy"}
    assert one.status_code == 200
    assert [o["data"] for o in one.json()["outputs"]] == [[3], [0]]


async def test_http_data_then_an_error_is_the_501_too(server: Server, asgi_client) -> None:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [3], "data": [4, -1, 5]}]}
    first_error = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [2], "data": [-1, 5]}]}
    async with asgi_client(server) as http:
        mixed = await http.post("/v2/models/repeat/infer", json=body)
        alone = await http.post("/v2/models/repeat/infer", json=first_error)
    assert mixed.status_code == 501  # two responses (data, then an error): not one
    assert mixed.json() == {"error": "HTTP end point doesn't support models with decoupled transaction policy"}
    assert alone.status_code == 400  # the error is the one response: the client gets it
    assert "negative value -1 at 0" in alone.json()["error"]


def grpc_request(values: list[int], model: str = "repeat", request_id: str = "", empty_final: bool = False):
    tensor = pb.ModelInferRequest.InferInputTensor(name="IN", datatype="INT32", shape=[len(values)])
    message = pb.ModelInferRequest(
        model_name=model, id=request_id, inputs=[tensor],
        raw_input_contents=[np.array(values, np.int32).tobytes()],
    )
    if empty_final:
        message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


def decoded(message: pb.ModelStreamInferResponse) -> tuple[str, int | None, bool]:
    response = message.infer_response
    value = None
    if response.raw_output_contents:
        value = int(np.frombuffer(response.raw_output_contents[0], np.int32)[0])
    return response.id, value, response.parameters["triton_final_response"].bool_param


async def test_grpc_model_infer_is_unimplemented_for_many_responses(server: Server, stub_for) -> None:
    stub = await stub_for(server)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(grpc_request([1, 2]))
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert caught.value.details() == "ModelInfer RPC doesn't support models with decoupled transaction policy"


async def test_grpc_stream_interleaves_decoupled_requests(server: Server, stub_for) -> None:
    stub = await stub_for(server)
    call = stub.ModelStreamInfer()
    await call.write(grpc_request([1, 2, 3], "repeat_slow", "a", empty_final=True))
    await call.write(grpc_request([10, 20], "repeat_slow", "b"))
    await call.done_writing()
    received = [decoded(m) async for m in call]
    by_id = {rid: [(v, f) for i, v, f in received if i == rid] for rid in ("a", "b")}
    assert by_id["a"] == [(1, False), (2, False), (3, False), (None, True)]
    assert by_id["b"] == [(10, False), (20, False)]  # no empty final without the flag
    first_b = next(n for n, m in enumerate(received) if m[0] == "b")
    assert first_b < 3, f"'b' waited for 'a' to finish: {received}"


async def test_grpc_stream_error_response_keeps_stream_open(server: Server, stub_for) -> None:
    stub = await stub_for(server)
    call = stub.ModelStreamInfer()
    await call.write(grpc_request([4, -1], "repeat", "e"))
    await call.write(grpc_request([6], "repeat", "ok", empty_final=True))
    await call.done_writing()
    messages = [m async for m in call]
    errors = [m.error_message for m in messages if m.error_message]
    assert errors == ["negative value -1 at 1"]
    assert [decoded(m) for m in messages if m.infer_response.id == "ok"] == [("ok", 6, False), ("ok", None, True)]
