"""Compressed gRPC requests (``grpc-encoding: gzip`` / ``deflate``) are inflated to at most
``--grpc-max-decompressed-size`` bytes: a compression bomb is refused RESOURCE_EXHAUSTED before it
is inflated in full, corrupt data is INVALID_ARGUMENT, tritonclient's ``compression_algorithm``
and large uncompressed messages keep working (issue 30, finding 1)."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import InferInput, service_pb2_grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc.aio import InferenceServerClient

from workbench import Server
from workbench.frontends.grpc.decompression import looks_compressed
from workbench.testing.grpc_wire import RawGrpcConnection, compress, frame, varint, zeros

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
ENCODINGS = ["gzip", "deflate"]


def add_sub_request(raw_bytes: int | None = None) -> pb.ModelInferRequest:
    """A valid add_sub request, or (``raw_bytes``) one whose first raw input is that many zeros."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    request = pb.ModelInferRequest(model_name="add_sub")
    for i in range(2):
        request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
    if raw_bytes is None:
        request.raw_input_contents.extend([a.tobytes(), a.tobytes()])
    return request


def bomb(inflated: int, encoding: str) -> bytes:
    """A compressed add_sub request with ``inflated`` zero bytes as its raw input (tiny on the wire)."""
    head = add_sub_request(inflated).SerializeToString() + bytes([7 << 3 | 2]) + varint(inflated)
    return compress([head, *zeros(inflated)], encoding)


async def raw_call(port: int, data: bytes, encoding: str | None, method: str = MODEL_INFER):
    def call():
        with RawGrpcConnection(port) as connection:
            return connection.call(method, frame(data, compressed=encoding is not None), encoding)

    return await asyncio.to_thread(call)


async def answers_add_sub(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(add_sub_request())
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [2.0 * i for i in range(16)]


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_tritonclient_compression_algorithm(server: Server, grpc_serving, encoding: str) -> None:
    async with grpc_serving(server) as port:
        client = InferenceServerClient(f"127.0.0.1:{port}")
        inputs = [InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        result = await client.infer("add_sub", inputs, compression_algorithm=encoding)
        assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
        await client.close()


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_bomb_is_refused_before_it_is_inflated(server: Server, grpc_serving, encoding: str) -> None:
    async with grpc_serving(server, grpc_max_decompressed_size=1 << 20) as port:
        reply = await raw_call(port, bomb(2 << 20, encoding), encoding)
        assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert reply.message == ("Decompressed message larger than max (more than 1048576 bytes once "
                                 "decompressed); use --grpc-max-decompressed-size to increase the limit")
        await answers_add_sub(port)


async def test_the_default_bound_is_64_mib(server: Server, grpc_serving) -> None:
    """The issue's bomb, scaled down: 65 MiB of zeros in ~65 KiB of gzip, default flags."""
    async with grpc_serving(server) as port:
        reply = await raw_call(port, bomb(65 << 20, "gzip"), "gzip")
        assert (reply.status, reply.message.split(" (")[0]) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], "Decompressed message larger than max")
        await answers_add_sub(port)


async def test_large_uncompressed_messages_still_pass(server: Server, grpc_serving) -> None:
    """Only compressed messages have the decompressed bound: an uncompressed 2 MiB tensor passes
    a 1 MiB bound (bounded by --grpc-max-message-size alone)."""
    data = np.arange(1 << 19, dtype=np.float32).reshape(1, -1)
    request = pb.ModelInferRequest(model_name="identity_fp32", raw_input_contents=[data.tobytes()])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=list(data.shape))
    async with grpc_serving(server, grpc_max_decompressed_size=1 << 20) as port, \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert reply.raw_output_contents[0] == data.tobytes()


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_corrupt_and_truncated_data_is_invalid_argument(server: Server, grpc_serving, encoding: str) -> None:
    whole = compress([add_sub_request().SerializeToString()], encoding)
    corrupt = whole[:2] + bytes(b ^ 0x5A for b in whole[2:])
    async with grpc_serving(server) as port:
        for data in (corrupt, whole[: len(whole) // 2], whole + b"junk"):
            reply = await raw_call(port, data, encoding)
            assert reply.status == grpc.StatusCode.INVALID_ARGUMENT.value[0], reply
            assert reply.message.startswith("failed to decompress the request message: ")
        await answers_add_sub(port)


async def test_compressed_stream_messages_and_a_bomb_on_a_stream(server: Server, grpc_serving) -> None:
    async with grpc_serving(server, grpc_max_decompressed_size=1 << 20) as port:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", compression=grpc.Compression.Gzip) as channel:
            call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer()
            await call.write(add_sub_request())
            await call.done_writing()
            assert [r.error_message async for r in call] == [""]
        reply = await raw_call(port, bomb(2 << 20, "gzip"), "gzip", STREAM_INFER)
        assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


async def test_compressed_health_check(server: Server, grpc_serving) -> None:
    async with grpc_serving(server) as port, grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", compression=grpc.Compression.Deflate) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_plain_message_that_looks_like_zlib_is_parsed_as_it_is(server: Server, grpc_serving) -> None:
    """``78 01`` is a zlib header and also protobuf's field 15 (unknown here) = 1: it does not
    inflate, so it is parsed as the plain message it is."""
    data = b"\x78\x01" + add_sub_request().SerializeToString()
    assert looks_compressed(data)
    async with grpc_serving(server) as port:
        reply = await raw_call(port, data, None)
    assert reply.status == 0 and len(reply.messages) == 1
