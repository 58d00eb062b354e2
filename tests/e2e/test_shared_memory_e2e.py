"""Shared memory end to end: the real `workbench serve` process, unmodified tritonclient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from workbench.gpu.devices import gpu_count
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def shm_server(test_repository: Path):
    process = ServerProcess([f"--model-repository={test_repository}", "--allow-client-shm=true",
                             "--allow-metrics=false"])
    yield process
    process.stop()


@pytest.fixture
def client(shm_server: ServerProcess):
    client = httpclient.InferenceServerClient(shm_server.url)
    yield client
    client.unregister_system_shared_memory()
    client.close()


def add_sub_request(in_region: str, out_region: str, out_size: int = 64, out_offset: int = 0):
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    inputs[0].set_shared_memory(in_region, 64)
    inputs[1].set_shared_memory(in_region, 64, offset=64)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    outputs[0].set_shared_memory(out_region, out_size, offset=out_offset)
    outputs[1].set_shared_memory(out_region, out_size, offset=out_offset + 64)
    return inputs, outputs


def infer_add_sub(client, in_region: str, out_region: str, out_size: int = 64, out_offset: int = 0):
    inputs, outputs = add_sub_request(in_region, out_region, out_size, out_offset)
    return client.infer("add_sub", inputs, outputs=outputs)


def test_inputs_and_outputs_in_system_shared_memory(client, add_sub_regions) -> None:
    a, b, in_key, out_handle = add_sub_regions(client)
    status = {r["name"]: r for r in client.get_system_shared_memory_status()}
    assert status["in"] == {"name": "in", "key": in_key, "offset": 0, "byte_size": 128}
    inputs, outputs = add_sub_request("in", "out")
    result = client.infer("add_sub", inputs, outputs=outputs)
    # the data is in the region, not the response (Triton's output entry: no data, no parameters)
    assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 16]), a + b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], 64), a - b)
    client.unregister_system_shared_memory("in")
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["out"]


def test_misuse_answers_triton_errors(client, shm_segments) -> None:
    key, handle = shm_segments(128)
    shm.set_shared_memory_region(handle, [np.zeros((2, 16), np.float32)])
    client.register_system_shared_memory("r", key, 128)
    expected = [
        (lambda: client.register_system_shared_memory("r", key, 8), "already in manager"),
        (lambda: client.register_system_shared_memory("x", "/wb_no_such_key", 8),
         "Unable to open shared memory region: '/wb_no_such_key'"),
        (lambda: client.register_system_shared_memory("x", key, 64, offset=100), "invalid args"),
        (lambda: client.register_system_shared_memory("x", key, 0), "invalid args"),
        (lambda: infer_add_sub(client, "nope", "r"),
         "Unable to find shared memory region: 'nope'"),
        (lambda: infer_add_sub(client, "r", "r", out_offset=100),
         "Invalid offset \\+ byte size for shared memory region: 'r'"),
        (lambda: infer_add_sub(client, "r", "r", out_size=32),
         "should be at least 64 bytes to hold the results"),
    ]
    for call, text in expected:
        with pytest.raises(InferenceServerException, match=text):
            call()
    client.unregister_system_shared_memory("r")  # no failed request kept a hold on it
    assert client.get_system_shared_memory_status() == []


def test_client_shm_disabled_by_default(test_repository: Path, shm_segments) -> None:
    key, _ = shm_segments(64)
    process = ServerProcess([f"--model-repository={test_repository}", "--allow-metrics=false"])
    try:
        client = httpclient.InferenceServerClient(process.url)
        with pytest.raises(InferenceServerException) as error:
            client.register_system_shared_memory("r", key, 64)
        assert error.value.status() == "501"
        assert "Client shared memory is disabled. Start the server with " \
               "'--allow-client-shm=true' to enable." in error.value.message()
        assert client.get_system_shared_memory_status() == []
        assert client.get_cuda_shared_memory_status() == []
        client.close()
    finally:
        process.stop()


def test_cuda_register_without_gpu(client) -> None:
    if gpu_count():
        pytest.skip("a GPU is present: test_cuda_shared_memory_round_trip covers it")
    with pytest.raises(InferenceServerException, match="GPUs not supported"):
        client.register_cuda_shared_memory("c", "AAAA" * 22, 0, 64)  # base64 of 64 bytes + pad
    assert client.get_cuda_shared_memory_status() == []


def test_cuda_shared_memory_round_trip(client) -> None:
    if gpu_count() == 0:
        pytest.skip("no GPU")
    cudashm = pytest.importorskip("tritonclient.utils.cuda_shared_memory")
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), np.float32)
    handles = [cudashm.create_shared_memory_region(n, 128, 0) for n in ("cuda_in", "cuda_out")]
    try:
        cudashm.set_shared_memory_region(handles[0], [a, b])
        for name, handle in zip(("cuda_in", "cuda_out"), handles, strict=True):
            client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle).decode(), 0, 128)
        infer_add_sub(client, "cuda_in", "cuda_out")
        got = cudashm.get_contents_as_numpy(handles[1], np.float32, [1, 16])
        np.testing.assert_array_equal(got, a + b)
        assert {r["name"] for r in client.get_cuda_shared_memory_status()} == {"cuda_in", "cuda_out"}
    finally:
        client.unregister_cuda_shared_memory()
        for handle in handles:
            cudashm.destroy_shared_memory_region(handle)
