"""The native gRPC front end (``--grpc-frontend=native``, docs/grpc-native.md) against the Python one.

Both front ends serve one real engine on two ports; the same request bytes go to each through a
raw channel (no client-side protobuf), and the answers must be the same bytes, or the same status
and text (unary calls and a ModelStreamInfer stream). The gRPC suites also run whole on the
native front end (a pytest subprocess with ``WORKBENCH_GRPC_FRONTEND=native``, which the
conftest's gRPC fixtures read). Skipped where the extension is not built (``make setup`` builds
it where g++ and grpc++ are).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server
from workbench.frontends.grpc.native import NativeGrpcServer, available
from workbench.frontends.grpc.server import native_frontend

pytestmark = pytest.mark.skipif(not available(), reason="native gRPC front end not built (make setup)")

SERVICE = "/inference.GRPCInferenceService/"
ROOT = Path(__file__).resolve().parents[3]


@contextlib.asynccontextmanager
async def both(server: Server, **options) -> AsyncIterator[dict[str, grpc.aio.Channel]]:
    """A channel to the Python and one to the native front end, both serving ``server``."""
    started = []
    channels = {}
    try:
        for frontend in ("python", "native"):
            grpc_server, port = create_grpc_server(server, ServerOptions(
                grpc_address="127.0.0.1", grpc_port=0, grpc_frontend=frontend, **options))
            assert isinstance(grpc_server, NativeGrpcServer) == (frontend == "native")
            await grpc_server.start()
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
            started.append((grpc_server, channel))
            channels[frontend] = channel
        yield channels
    finally:
        for grpc_server, channel in started:
            await channel.close()
            await grpc_server.stop(None)


async def answer(channel: grpc.aio.Channel, method: str, request: bytes) -> tuple[str, bytes | str]:
    """``("OK", response bytes)`` or ``(status code name, details)``."""
    try:
        return "OK", await channel.unary_unary(SERVICE + method)(request)
    except grpc.aio.AioRpcError as exc:
        return exc.code().name, exc.details() or ""


def add_sub(a: np.ndarray, b: np.ndarray, **fields) -> bytes:
    inputs = [pb.ModelInferRequest.InferInputTensor(name=f"INPUT{i}", datatype="FP32", shape=a.shape)
              for i in range(2)]
    return pb.ModelInferRequest(model_name="add_sub", inputs=inputs,
                                raw_input_contents=[a.tobytes(), b.tobytes()], **fields).SerializeToString()


REQUESTS = {
    "plain": ("ModelInfer", add_sub(np.arange(16, dtype=np.float32).reshape(1, 16),
                                    np.ones((1, 16), np.float32), id="r1")),
    "batch of 3, version, one output": ("ModelInfer", add_sub(
        np.full((3, 16), 2.5, np.float32), np.ones((3, 16), np.float32), model_version="1",
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="OUTPUT1")])),
    "with a parameter": ("ModelInfer", add_sub(
        np.zeros((1, 16), np.float32), np.ones((1, 16), np.float32),
        parameters={"custom": pb.InferParameter(string_param="x")})),
    "perf_analyzer's parameter": ("ModelInfer", add_sub(
        np.full((1, 16), 3.0, np.float32), np.ones((1, 16), np.float32), id="pa",
        parameters={"triton_enable_empty_final_response": pb.InferParameter(bool_param=True)})),
    "perf_analyzer's parameter and another": ("ModelInfer", add_sub(
        np.zeros((1, 16), np.float32), np.ones((1, 16), np.float32),
        parameters={"triton_enable_empty_final_response": pb.InferParameter(bool_param=True),
                    "custom": pb.InferParameter(int64_param=3)})),
    "perf_analyzer's parameter as a string": ("ModelInfer", add_sub(
        np.zeros((1, 16), np.float32), np.ones((1, 16), np.float32),
        parameters={"triton_enable_empty_final_response": pb.InferParameter(string_param="no")})),
    "typed contents": ("ModelInfer", pb.ModelInferRequest(
        model_name="add_sub", id="typed", inputs=[
            pb.ModelInferRequest.InferInputTensor(
                name=f"INPUT{i}", datatype="FP32", shape=[1, 16],
                contents=pb.InferTensorContents(fp32_contents=[float(i)] * 16)) for i in range(2)],
    ).SerializeToString()),
    "unknown model": ("ModelInfer", pb.ModelInferRequest(model_name="nope").SerializeToString()),
    "short data": ("ModelInfer", add_sub(np.zeros((1, 8), np.float32).reshape(1, 8),
                                         np.zeros((1, 8), np.float32))),
    "bad version": ("ModelInfer", add_sub(np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32),
                                          model_version="x")),
    "reserved parameter": ("ModelInfer", add_sub(
        np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32),
        parameters={"triton_x": pb.InferParameter(bool_param=True)})),
    "not a message": ("ModelInfer", b"\xff\xff\xff"),
    "metadata": ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub").SerializeToString()),
    "config": ("ModelConfig", pb.ModelConfigRequest(name="add_sub").SerializeToString()),
    "server metadata": ("ServerMetadata", pb.ServerMetadataRequest().SerializeToString()),
    "ready": ("ModelReady", pb.ModelReadyRequest(name="add_sub").SerializeToString()),
    "statistics of nothing": ("ModelStatistics", pb.ModelStatisticsRequest(name="nope").SerializeToString()),
}


@pytest.mark.parametrize("case", sorted(REQUESTS))
async def test_the_same_bytes_from_both_front_ends(server: Server, case: str) -> None:
    method, request = REQUESTS[case]
    async with both(server) as channels:
        python = await answer(channels["python"], method, request)
        native = await answer(channels["native"], method, request)
    assert native == python
    if case in ("plain", "typed contents", "metadata"):
        assert python[0] == "OK"


@pytest.mark.parametrize("case", ["plain", "with a parameter", "metadata"])
async def test_compressed_answers_are_the_same_messages(server: Server, case: str) -> None:
    """``--grpc-infer-response-compression-level``: the client inflates the same bytes."""
    method, request = REQUESTS[case]
    async with both(server, grpc_infer_response_compression_level="high") as channels:
        python = await answer(channels["python"], method, request)
        native = await answer(channels["native"], method, request)
    assert native == python and python[0] == "OK"


async def test_perf_analyzers_parameter_keeps_the_decoded_path(server: Server,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """perf_analyzer sends ``triton_enable_empty_final_response`` on every call, which a unary
    ModelInfer ignores: C++ hands such a request on decoded (``_infer``), not as bytes for
    protobuf in Python, and the answer is the Python front end's bytes."""
    decoded: list[str] = []
    infer = NativeGrpcServer._infer

    async def counting(self: NativeGrpcServer, call: int, request: tuple) -> None:
        decoded.append(request[2])
        await infer(self, call, request)

    monkeypatch.setattr(NativeGrpcServer, "_infer", counting)
    method, request = REQUESTS["perf_analyzer's parameter"]
    async with both(server) as channels:
        python = await answer(channels["python"], method, request)
        native = await answer(channels["native"], method, request)
        other = await answer(channels["native"], *REQUESTS["perf_analyzer's parameter and another"])
    assert native == python and python[0] == "OK" and other[0] == "OK"
    assert decoded == ["pa"]


async def test_plain_infer_answers_are_right(server: Server) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    async with both(server) as channels:
        status, data = await answer(channels["native"], "ModelInfer", add_sub(a, b, id="x"))
    assert status == "OK" and isinstance(data, bytes)
    reply = pb.ModelInferResponse.FromString(data)
    assert reply.id == "x" and [list(o.shape) for o in reply.outputs] == [[2, 16], [2, 16]]
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == (a + b).ravel().tolist()
    assert np.frombuffer(reply.raw_output_contents[1], np.float32).tolist() == (a - b).ravel().tolist()


async def stream_answers(channel: grpc.aio.Channel, requests: list[bytes]) -> tuple[list[bytes], str]:
    """Every response message of one ModelStreamInfer call, and its final status name."""
    call = channel.stream_stream(SERVICE + "ModelStreamInfer")()
    for request in requests:
        await call.write(request)
    await call.done_writing()
    answers = [message async for message in call]
    return answers, (await call.code()).name


async def test_a_stream_answers_the_same_bytes(server: Server) -> None:
    requests = [REQUESTS[case][1] for case in ("plain", "unknown model", "short data", "with a parameter")]
    async with both(server) as channels:
        python = await stream_answers(channels["python"], requests)
        native = await stream_answers(channels["native"], requests)
    assert native == python and python[1] == "OK" and len(python[0]) == 4


@pytest.mark.parametrize("threads", [1, 4])
async def test_many_concurrent_calls_are_each_answered(server: Server, threads: int) -> None:
    import asyncio

    async with both(server, grpc_native_threads=threads) as channels:
        requests = [add_sub(np.full((1, 16), i, np.float32), np.ones((1, 16), np.float32), id=str(i))
                    for i in range(200)]
        answers = await asyncio.gather(*(answer(channels["native"], "ModelInfer", r) for r in requests))
    for i, (status, data) in enumerate(answers):
        assert status == "OK" and isinstance(data, bytes)
        reply = pb.ModelInferResponse.FromString(data)
        assert reply.id == str(i)
        assert np.frombuffer(reply.raw_output_contents[0], np.float32)[0] == i + 1


def test_the_choice_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="workbench"):
        assert native_frontend(ServerOptions(grpc_frontend="native"))
        assert not native_frontend(ServerOptions(grpc_frontend="auto"))
        assert not native_frontend(ServerOptions(grpc_frontend="native",
                                                 grpc_restricted_protocol=["health:k=v"]))
    assert [r.getMessage() for r in caplog.records] == [
        "gRPC front end: native (grpc++ on C++ threads)",
        "gRPC front end: python (grpc.aio)",
        "gRPC front end: python (grpc.aio) (native asked for; --grpc-restricted-protocol is served "
        "by python only)",
    ]


#: the gRPC suites run whole on the native front end (their python_grpc tests skip), from the root
NATIVE_SUITES = [
    "tests/frontends/grpc/test_grpc.py", "tests/frontends/grpc/test_grpc_compressed_requests.py",
    "tests/frontends/grpc/test_grpc_compression.py", "tests/frontends/grpc/test_grpc_connection_limits.py",
    "tests/frontends/grpc/test_grpc_drain.py", "tests/frontends/grpc/test_grpc_health.py",
    "tests/frontends/grpc/test_grpc_raw_wire.py", "tests/frontends/grpc/test_grpc_settings.py",
    "tests/frontends/grpc/test_grpc_shared_memory.py", "tests/frontends/grpc/test_grpc_version_string.py",
    "tests/frontends/grpc/test_rollouts_grpc.py", "tests/engine/test_server_metadata.py",
    "tests/frontends/grpc/test_grpc_stream.py", "tests/frontends/grpc/test_grpc_stream_error_mode.py",
    "tests/frontends/grpc/test_grpc_unread_stream.py", "tests/scheduling/test_decoupled.py",
    "tests/frontends/test_header_forward.py", "tests/frontends/test_input_validation.py",
]


def test_the_grpc_suites_pass_on_the_native_front_end() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         *(str(ROOT / path) for path in NATIVE_SUITES)],
        env={**os.environ, "WORKBENCH_GRPC_FRONTEND": "native"}, cwd=ROOT,
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:]
