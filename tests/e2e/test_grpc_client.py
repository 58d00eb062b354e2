"""The real `workbench serve` process through the unmodified ``tritonclient.grpc`` clients
(sync, async callbacks, streaming, asyncio), on the sample models and tiny ONNX models."""

from __future__ import annotations

import asyncio
import queue
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from workbench.testing.models import identity_graph, write_model
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e

LARGE_CONFIG = """
name: "identity_large"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def grpc_server(sample_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    """`workbench serve` (explicit mode, everything loaded) on the sample models plus an
    identity model for large FP32 tensors and identity models for BYTES, FP16 and INT64."""
    repo = tmp_path_factory.mktemp("grpc_e2e")
    write_model(repo, "identity_large", LARGE_CONFIG, identity_graph(TensorProto.FLOAT, ["n"]))
    for wire, elem in (("bytes", TensorProto.STRING), ("fp16", TensorProto.FLOAT16),
                       ("int64", TensorProto.INT64)):
        write_model(repo, f"identity_{wire}", None, identity_graph(elem, ["batch", "n"]))
    process = ServerProcess([f"--model-repository={sample_repository}", f"--model-repository={repo}",
                             "--model-control-mode=explicit", "--load-model=*"])
    yield process
    process.stop()


@pytest.fixture
def client(grpc_server: ServerProcess):
    with grpcclient.InferenceServerClient(grpc_server.grpc_url) as triton:
        yield triton


def pixels(batch: int = 4) -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 16, (batch, 64)).astype(np.float32)


def pixels_input(batch: int = 4) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("pixels", [batch, 64], "FP32")
    tensor.set_data_from_numpy(pixels(batch))
    return tensor


def identity(client, model: str, array: np.ndarray, datatype: str) -> np.ndarray:
    tensor = grpcclient.InferInput("INPUT0", list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return client.infer(model, [tensor]).as_numpy("OUTPUT0")


def test_sync_infer_matches_http(client, grpc_server: ServerProcess) -> None:
    result = client.infer("digits_mlp", [pixels_input()], request_id="42")
    assert result.get_response().id == "42" and result.get_response().model_version == "2"
    http = httpclient.InferenceServerClient(grpc_server.url)
    tensor = httpclient.InferInput("pixels", [4, 64], "FP32")
    tensor.set_data_from_numpy(pixels())
    expected = http.infer("digits_mlp", [tensor]).as_numpy("logits")
    http.close()
    np.testing.assert_array_equal(result.as_numpy("logits"), expected)


def test_metadata_config_statistics(client) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert "statistics" in client.get_server_metadata().extensions
    assert list(client.get_model_metadata("digits_mlp").versions) == ["1", "2"]
    assert client.get_model_config("minilm_encoder").config.max_batch_size == 64
    client.infer("digits_mlp", [pixels_input(3)], model_version="1")
    stats = client.get_inference_statistics("digits_mlp", "1").model_stats[0]
    assert stats.inference_count >= 3 and stats.inference_stats.success.count >= 1


def collect(answers: queue.Queue, result, error) -> None:
    answers.put((result, error))


def test_async_infer_with_callbacks(client) -> None:
    results: queue.Queue = queue.Queue()
    for i in range(8):
        client.async_infer("digits_mlp", [pixels_input(i + 1)], partial(collect, results), request_id=str(i))
    answers = [results.get(timeout=60) for _ in range(8)]
    assert all(error is None for _, error in answers)
    shapes = {r.get_response().id: r.as_numpy("logits").shape for r, _ in answers}
    assert shapes == {str(i): (i + 1, 10) for i in range(8)}


def test_stream_error_mid_stream_does_not_close_it(client) -> None:
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=partial(collect, results))
    try:
        client.async_stream_infer("digits_mlp", [pixels_input(2)], request_id="a")
        bad = grpcclient.InferInput("pixels", [2, 63], "FP32")
        bad.set_data_from_numpy(np.zeros((2, 63), np.float32))
        client.async_stream_infer("digits_mlp", [bad], request_id="b")
        client.async_stream_infer("digits_mlp", [pixels_input(3)], request_id="c",
                                  enable_empty_final_response=True)
        answers = [results.get(timeout=60) for _ in range(3)]
    finally:
        client.stop_stream()
    assert answers[0][0].get_response().id == "a" and answers[0][1] is None
    assert answers[1][0] is None and isinstance(answers[1][1], InferenceServerException)
    assert "unexpected shape for input 'pixels' for model 'digits_mlp'" in answers[1][1].message()
    final = answers[2][0].get_response().parameters["triton_final_response"]
    assert answers[2][0].as_numpy("logits").shape == (3, 10) and final.bool_param


def test_asyncio_client_infer_and_stream(grpc_server: ServerProcess) -> None:
    async def run() -> tuple[tuple, list[str]]:
        async with grpcaio.InferenceServerClient(grpc_server.grpc_url) as aio:
            assert await aio.is_server_ready()
            result = await aio.infer("digits_mlp", [pixels_input(5)])

            async def requests():
                for i in range(3):
                    yield {"model_name": "digits_mlp", "inputs": [pixels_input()], "request_id": str(i)}

            ids = [r.get_response().id async for r, e in aio.stream_infer(requests()) if e is None]
            return result.as_numpy("logits").shape, ids

    shape, ids = asyncio.run(run())
    assert shape == (5, 10) and ids == ["0", "1", "2"]


def test_bytes_fp16_int64_round_trip(client) -> None:
    words = np.array([["hello", "wörld"], ["", "x"]], dtype=object)
    out = identity(client, "identity_bytes", words, "BYTES")
    assert out.tolist() == [[w.encode() for w in row] for row in words.tolist()]
    half = np.array([[1.5, -2.25, 65504.0]], np.float16)
    np.testing.assert_array_equal(identity(client, "identity_fp16", half, "FP16"), half)
    big = np.array([[-(2**62), 0, 2**62]], np.int64)
    np.testing.assert_array_equal(identity(client, "identity_int64", big, "INT64"), big)


def test_64_mb_tensor_round_trips(client) -> None:
    array = np.arange(16 * 1024 * 1024, dtype=np.float32)  # 64 MiB
    np.testing.assert_array_equal(identity(client, "identity_large", array, "FP32"), array)


def test_error_status_codes(client) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("nope", [pixels_input()])
    assert info.value.status() == "StatusCode.NOT_FOUND"
    assert info.value.message() == "Request for unknown model: 'nope' is not found"
    bad = grpcclient.InferInput("pixels", [1, 64], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 64), np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("digits_mlp", [bad])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'INT32', but model 'digits_mlp' expects 'FP32'" in info.value.message()


def test_repository_load_and_unload(client) -> None:
    names = {m.name for m in client.get_model_repository_index().models}
    assert {"digits_mlp", "identity_large", "minilm_encoder"} <= names
    client.unload_model("identity_int64")
    assert not client.is_model_ready("identity_int64")
    client.load_model("identity_int64", config='{"max_batch_size": 2}')
    assert client.get_model_config("identity_int64").config.max_batch_size == 2
    with pytest.raises(InferenceServerException) as info:
        client.load_model("not_there")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_busy_grpc_port_is_one_clear_line(test_repository: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "workbench.hosts.cli", "serve", f"--model-repository={test_repository}",
             "--http-port=0", "--metrics-port=0", "--grpc-address=127.0.0.1", f"--grpc-port={port}"],
            capture_output=True, text=True, timeout=120,
        )
    assert result.returncode == 1
    assert f"failed to start GRPC service: Unavailable - Socket '127.0.0.1:{port}' already in use" in result.stderr
    assert "Traceback" not in result.stderr and "Started HTTPService" not in result.stderr
