"""The unary ModelInfer path's own request parser and response serializer (raw_wire): the same
messages and the same wire bytes as protobuf's, for large tensors with fewer copies."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceResponse, Server, ServerOptions, Tensor
from workbench.frontends.grpc.codec import encode_raw_response, encode_response
from workbench.frontends.grpc.raw_wire import (
    MIN_WALK_BYTES,
    RawInferRequest,
    parse_infer_request,
    serialize_infer_response,
)
from workbench.testing.models import build_datatype_repository

BIG = np.arange(MIN_WALK_BYTES // 2, dtype=np.float32)  # 128 KiB: past the walk threshold


def _bytes_tensor(name: str, values: list[bytes]) -> Tensor:
    return Tensor(name, "BYTES", np.array(values, dtype=object))


RESPONSES = {
    "one big output": InferenceResponse("m", "1", [Tensor("OUTPUT0", "FP32", BIG)], id="r"),
    "several outputs, parameters": InferenceResponse(
        "model", "3", [Tensor("A", "INT64", np.arange(6, dtype=np.int64).reshape(2, 3)),
                       Tensor("B", "FP32", BIG.reshape(2, -1)),
                       _bytes_tensor("C", [b"x", b"", "ü".encode()])],
        parameters={"p": "v", "n": 3, "flag": True}),
    "an output in shared memory": InferenceResponse(
        "m", "1", [Tensor("O", "FP32", BIG, {"shared_memory_region": "r"}),
                   Tensor("P", "FP32", np.zeros((0, 4), np.float32))]),
    "non-contiguous, big-endian": InferenceResponse(
        "m", "", [Tensor("T", "FP32", BIG.reshape(256, -1).T),
                  Tensor("E", "FP64", np.arange(4, dtype=">f8"))]),
}


@pytest.mark.parametrize("case", RESPONSES)
def test_serialized_response_is_protobufs_bytes(case: str) -> None:
    response = RESPONSES[case]
    expected = encode_response(response).SerializeToString()
    raw = encode_raw_response(response)
    assert serialize_infer_response(raw) == expected
    assert raw.full_message() == encode_response(response)
    assert pb.ModelInferResponse.FromString(serialize_infer_response(raw)) == encode_response(response)


def _big_request() -> pb.ModelInferRequest:
    tensors = [pb.ModelInferRequest.InferInputTensor(name=f"IN{i}", datatype="FP32", shape=[BIG.size])
               for i in range(2)]
    request = pb.ModelInferRequest(
        model_name="m", model_version="2", id="req", inputs=tensors,
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="OUT")],
        raw_input_contents=[BIG.tobytes(), (BIG + 1).tobytes()])
    request.parameters["k"].int64_param = 7
    return request


def test_parsed_request_holds_views_of_the_received_bytes() -> None:
    request = _big_request()
    data = request.SerializeToString()
    parsed = parse_infer_request(data)
    assert isinstance(parsed, RawInferRequest)
    assert [bytes(v) for v in parsed.raw_input_contents] == list(request.raw_input_contents)
    assert all(v.obj is data for v in parsed.raw_input_contents)  # no copy of the tensor bytes
    without_raw = pb.ModelInferRequest()
    without_raw.CopyFrom(request)
    del without_raw.raw_input_contents[:]
    assert parsed.message == without_raw
    assert (parsed.model_name, parsed.id, parsed.parameters["k"].int64_param) == ("m", "req", 7)


def test_raw_contents_anywhere_in_the_message_keep_their_order() -> None:
    request = _big_request()
    first, second = request.raw_input_contents
    head = pb.ModelInferRequest(raw_input_contents=[first]).SerializeToString()
    tail = pb.ModelInferRequest(raw_input_contents=[second]).SerializeToString()
    middle = pb.ModelInferRequest(model_name="m", inputs=request.inputs).SerializeToString()
    data = head + middle + tail  # protobuf concatenation = merge; repeated fields append
    parsed = parse_infer_request(data)
    assert [bytes(v) for v in parsed.raw_input_contents] == [first, second]
    assert parsed.model_name == "m" and len(parsed.inputs) == 2


def test_small_and_malformed_requests_are_protobufs_to_judge() -> None:
    small = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"1234"]).SerializeToString()
    assert isinstance(parse_infer_request(small), pb.ModelInferRequest)
    data = _big_request().SerializeToString()
    with pytest.raises(DecodeError):
        parse_infer_request(data[:-1])  # the last raw input is cut short
    bad_wire = bytes([7 << 3 | 0]) + b"\x01" + data  # field 7 as a varint: protobuf decides
    assert parse_infer_request(bad_wire) == pb.ModelInferRequest.FromString(bad_wire)


@pytest_asyncio.fixture
async def types_stub(tmp_path: Path, stub_for):
    async with Server(ServerOptions(model_repository=[str(build_datatype_repository(tmp_path))])) as server:
        yield await stub_for(server)


@pytest.mark.parametrize("datatype", ["FP32", "BYTES"])
async def test_large_round_trip_through_the_grpc_server(types_stub, datatype: str) -> None:
    if datatype == "BYTES":
        values = [bytes([65 + i % 26]) * (i % 97) for i in range(4096)]  # UTF-8 (ONNX strings)
        data = b"".join(len(v).to_bytes(4, "little") + v for v in values)
        shape = [1, len(values)]
    else:
        data, shape = BIG.tobytes(), [1, BIG.size]
    assert len(data) >= MIN_WALK_BYTES
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype=datatype, shape=shape)
    request = pb.ModelInferRequest(model_name=f"identity_{datatype.lower()}", inputs=[tensor],
                                   raw_input_contents=[data], id="big")
    response = await types_stub.ModelInfer(request)
    assert response.raw_output_contents[0] == data
    assert (response.id, list(response.outputs[0].shape)) == ("big", shape)


async def test_large_request_with_a_bad_size_is_invalid_argument(types_stub) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, BIG.size + 1])
    request = pb.ModelInferRequest(model_name="identity_fp32", inputs=[tensor],
                                   raw_input_contents=[BIG.tobytes()])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await types_stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Expected 131076, got 131072" in info.value.details()
