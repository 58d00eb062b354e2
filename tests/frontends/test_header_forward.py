"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: matching headers reach
the model as request parameters (Triton's rules: case-insensitive partial match, ``(?-i)``,
reserved names refused), over HTTP, gRPC ``ModelInfer`` and ``ModelStreamInfer``."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import InvalidArgument, Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server
from workbench.frontends.header_forward import compile_forward_pattern, forwarded_parameters
from workbench.hosts.cli import build_parser, options_from_args
from workbench.testing.python_backend import copy_python_model

pytestmark = pytest.mark.asyncio(loop_scope="module")
RESERVED = "Header 'sequence_id' is reserved for Triton usage and cannot be forwarded."


async def test_pattern_rules() -> None:
    pattern = compile_forward_pattern("MY_HEADER.*")
    headers = [("my_header_1", "a"), (b"x-my_header_2", b"b"), ("other", "c")]
    assert forwarded_parameters(pattern, headers) == {"my_header_1": "a", "x-my_header_2": "b"}
    assert forwarded_parameters(compile_forward_pattern("(?-i)MY_HEADER.*"), headers) == {}
    assert forwarded_parameters(compile_forward_pattern(""), headers) == {}
    for name in ("sequence_id", "timeout", "triton_anything", "binary_data_output"):
        with pytest.raises(InvalidArgument, match="is reserved for Triton usage and cannot be forwarded"):
            forwarded_parameters(compile_forward_pattern(".*"), [(name, "v")])
    assert forwarded_parameters(compile_forward_pattern("^my"), [("sequence_id", "v")]) == {}


async def test_flags_reach_the_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}",
                                      "--http-header-forward-pattern=.*",
                                      "--grpc-header-forward-pattern", "(?-i)MY.*"])
    options = options_from_args(args)
    assert options.http_header_forward_pattern == ".*"
    assert options.grpc_header_forward_pattern == "(?-i)MY.*"
    with pytest.raises(ValueError):
        ServerOptions(http_header_forward_pattern="(unclosed")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("forward")
    copy_python_model(repo, "add_sub")
    options = ServerOptions(model_repository=[str(repo)], http_header_forward_pattern="my_.*")
    async with Server(options) as engine:
        yield engine


BODY = {"inputs": [{"name": f"INPUT{i}", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}
                   for i in range(2)]}


async def test_http_headers_become_parameters(server: Server, asgi_client) -> None:
    async with asgi_client(server) as http:
        reply = await http.post("/v2/models/add_sub/infer", json={**BODY, "parameters": {"k": 1}},
                                headers={"My_Header_1": 'a "quoted" \\ value', "other": "x"})
        assert reply.status_code == 200, reply.text
        info = json.loads(reply.json()["parameters"]["info"])
        assert info["parameters"] == {"k": 1, "my_header_1": 'a "quoted" \\ value'}


async def test_http_reserved_header_is_refused(tmp_path_factory, asgi_client) -> None:
    repo = tmp_path_factory.mktemp("forward_all")
    copy_python_model(repo, "add_sub")
    options = ServerOptions(model_repository=[str(repo)], http_header_forward_pattern=".*")
    async with Server(options) as engine, asgi_client(engine) as http:
        reply = await http.post("/v2/models/add_sub/infer", json=BODY, headers={"sequence_id": "1"})
    assert reply.status_code == 400 and reply.json()["error"] == RESERVED


def _request() -> pb.ModelInferRequest:
    inputs = [pb.ModelInferRequest.InferInputTensor(name=f"INPUT{i}", datatype="FP32", shape=[4])
              for i in range(2)]
    raw = [np.arange(4, dtype=np.float32).tobytes()] * 2
    return pb.ModelInferRequest(model_name="add_sub", inputs=inputs, raw_input_contents=raw)


async def _grpc(server: Server, pattern: str):
    from tritonclient.grpc import service_pb2_grpc

    grpc_server, port = create_grpc_server(server, ServerOptions(
        grpc_address="127.0.0.1", grpc_port=0, grpc_header_forward_pattern=pattern))
    await grpc_server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    return grpc_server, channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


async def test_grpc_metadata_becomes_parameters_unary_and_stream(server: Server) -> None:
    grpc_server, channel, stub = await _grpc(server, "MY_HEADER.*")
    try:
        metadata = (("my_header_1", "v1"), ("other", "x"))
        reply = await stub.ModelInfer(_request(), metadata=metadata)
        assert json.loads(reply.parameters["info"].string_param)["parameters"] == {"my_header_1": "v1"}
        call = stub.ModelStreamInfer(metadata=metadata)
        await call.write(_request())
        await call.done_writing()
        replies = [r async for r in call]
        assert not replies[0].error_message
        info = json.loads(replies[0].infer_response.parameters["info"].string_param)
        assert info["parameters"] == {"my_header_1": "v1"}
    finally:
        await channel.close()
        await grpc_server.stop(None)


async def test_grpc_case_sensitive_pattern_and_reserved_metadata(server: Server) -> None:
    grpc_server, channel, stub = await _grpc(server, "(?-i)MY_HEADER.*")
    try:
        reply = await stub.ModelInfer(_request(), metadata=(("my_header_1", "v1"),))
        assert json.loads(reply.parameters["info"].string_param)["parameters"] == {}
    finally:
        await channel.close()
        await grpc_server.stop(None)
    grpc_server, channel, stub = await _grpc(server, ".*")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ModelInfer(_request(), metadata=(("sequence_id", "1"),))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == RESERVED
        call = stub.ModelStreamInfer(metadata=(("sequence_id", "1"),))
        await call.write(_request())
        await call.done_writing()
        assert [r.error_message async for r in call] == [RESERVED]
    finally:
        await channel.close()
        await grpc_server.stop(None)


async def test_http_header_keeps_its_trailing_whitespace_over_a_real_connection(tmp_path_factory) -> None:
    """L0_parameters test_headers (P1): uvicorn strips a header value's trailing whitespace;
    Triton forwards the value as sent (gRPC metadata already kept it)."""
    from workbench.testing.http_listener import http_listener

    repo = tmp_path_factory.mktemp("forward_raw")
    copy_python_model(repo, "add_sub")
    body = json.dumps(BODY).encode()
    head = ("POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nmy_header_3: a \"quoted\" \\ value \t\r\nmy_plain: v\r\n"
            "Connection: close\r\n\r\n")
    options = ServerOptions(model_repository=[str(repo)], http_header_forward_pattern="my_.*")
    async with http_listener(options) as clients:
        reader, writer = await clients.connect()
        writer.write(head.encode("latin-1") + body)
        reply = await reader.read()
    status, _, payload = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200"), reply
    info = json.loads(json.loads(payload)["parameters"]["info"])
    assert info["parameters"] == {"my_header_3": 'a "quoted" \\ value \t', "my_plain": "v"}
