"""Shared memory, log and trace settings and classification through the real `workbench
serve` process and the unmodified ``tritonclient.grpc`` client with
``tritonclient.utils.shared_memory`` (what perf_analyzer ``-i grpc --shared-memory system`` does)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from workbench.testing.models import build_classification_repository, build_test_repository
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e

DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


@pytest.fixture(scope="module")
def extensions_server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("grpc_extensions")
    build_classification_repository(build_test_repository(repo))
    trace_file = repo / "trace.json"
    process = ServerProcess([f"--model-repository={repo}", "--allow-client-shm=true", "--allow-metrics=false",
                             f"--trace-config=triton,file={trace_file}"])
    yield process, trace_file
    process.stop()


@pytest.fixture
def client(extensions_server):
    process, _ = extensions_server
    with grpcclient.InferenceServerClient(process.grpc_url) as triton:
        yield triton
        triton.unregister_system_shared_memory()


def add_sub_io(in_region: str, out_region: str, out_size: int = 64):
    inputs = [grpcclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    outputs = [grpcclient.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    for i in range(2):
        inputs[i].set_shared_memory(in_region, 64, offset=64 * i)
        outputs[i].set_shared_memory(out_region, out_size, offset=64 * i)
    return inputs, outputs


def test_infer_with_inputs_and_outputs_in_system_shared_memory(client, add_sub_regions) -> None:
    a, b, in_key, out_handle = add_sub_regions(client)
    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert status["in"] == {"name": "in", "key": in_key, "byte_size": "128"}  # offset 0: proto3 default
    inputs, outputs = add_sub_io("in", "out")
    result = client.infer("add_sub", inputs, outputs=outputs)
    assert result.get_output("OUTPUT0").datatype == "FP32"
    assert list(result.get_output("OUTPUT1").shape) == [1, 16]
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 16]), a + b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=64), a - b)
    client.unregister_system_shared_memory("in")
    assert list(client.get_system_shared_memory_status().regions) == ["out"]


def test_stream_with_shared_memory(client, add_sub_regions) -> None:
    a, b, _, out_handle = add_sub_regions(client)
    results = []
    client.start_stream(callback=lambda result, error: results.append((result, error)))
    inputs, outputs = add_sub_io("in", "out")
    client.async_stream_infer("add_sub", inputs, outputs=outputs, request_id="1")
    client.stop_stream()
    assert len(results) == 1 and results[0][1] is None
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [1, 16]), a + b)


def test_shared_memory_misuse(client, add_sub_regions) -> None:
    add_sub_regions(client)
    inputs, outputs = add_sub_io("in", "out", out_size=32)
    with pytest.raises(InferenceServerException) as small:
        client.infer("add_sub", inputs, outputs=outputs)
    # Triton's text; a client error, so INVALID_ARGUMENT (Triton answers INTERNAL, a 500 over HTTP)
    assert small.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert small.value.message() == ("shared memory size specified with the request for output 'OUTPUT0' "
                                     "(32 bytes) should be at least 64 bytes to hold the results")
    inputs, outputs = add_sub_io("nowhere", "out")
    with pytest.raises(InferenceServerException) as unknown:
        client.infer("add_sub", inputs, outputs=outputs)
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    assert unknown.value.message() == "Unable to find shared memory region: 'nowhere'"
    with pytest.raises(InferenceServerException) as status:
        client.get_system_shared_memory_status("nowhere")
    assert status.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as again:
        client.register_system_shared_memory("in", "/wb_absent_key", 8)
    assert again.value.status() == "StatusCode.ALREADY_EXISTS"


def test_register_refused_when_client_shm_is_off(test_repository: Path, shm_segments) -> None:
    key, _ = shm_segments(64)
    process = ServerProcess([f"--model-repository={test_repository}", "--allow-metrics=false"])
    try:
        with grpcclient.InferenceServerClient(process.grpc_url) as triton:
            with pytest.raises(InferenceServerException) as refused:
                triton.register_system_shared_memory("r", key, 64)
            assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
            assert refused.value.message() == DISABLED
            assert not triton.get_system_shared_memory_status().regions
            assert not triton.get_cuda_shared_memory_status().regions
    finally:
        process.stop()


def test_log_settings(client) -> None:
    assert client.get_log_settings(as_json=True)["settings"]["log_info"] == {"bool_param": True}
    updated = client.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    assert updated.settings["log_verbose_level"].uint32_param == 1
    assert client.get_log_settings().settings["log_format"].string_param == "ISO8601"
    client.update_log_settings({"log_verbose_level": 0, "log_format": "default"})
    with pytest.raises(InferenceServerException, match="log file location can not be updated"):
        client.update_log_settings({"log_file": "/tmp/other.log"})


def test_trace_settings(client, extensions_server) -> None:
    _, trace_file = extensions_server
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings == {"trace_level": {"value": ["OFF"]}, "trace_rate": {"value": ["1000"]},
                        "trace_count": {"value": ["-1"]}, "log_frequency": {"value": ["0"]},
                        "trace_file": {"value": [str(trace_file)]}, "trace_mode": {"value": ["triton"]}}
    updated = client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "4"})
    assert list(updated.settings["trace_level"].value) == ["TIMESTAMPS"]
    model = client.update_trace_settings("add_sub", {"trace_count": "20"})
    assert list(model.settings["trace_count"].value) == ["20"] and list(model.settings["trace_rate"].value) == ["4"]
    assert list(client.get_trace_settings().settings["trace_count"].value) == ["-1"]
    cleared = client.update_trace_settings("add_sub", {"trace_count": None})
    assert list(cleared.settings["trace_count"].value) == ["-1"]
    client.update_trace_settings(settings={"trace_level": None, "trace_rate": None})
    assert list(client.get_trace_settings().settings["trace_level"].value) == ["OFF"]


def test_classification_matches_http(client, extensions_server) -> None:
    process, _ = extensions_server
    scores = np.random.default_rng(11).standard_normal((2, 5)).astype(np.float32)
    tensor = grpcclient.InferInput("INPUT0", [2, 5], "FP32")
    tensor.set_data_from_numpy(scores)
    top = client.infer("scores", [tensor], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)])
    as_grpc = top.as_numpy("OUTPUT0")
    http_tensor = httpclient.InferInput("INPUT0", [2, 5], "FP32")
    http_tensor.set_data_from_numpy(scores)
    http = httpclient.InferenceServerClient(process.url)
    try:
        as_http = http.infer("scores", [http_tensor],
                             outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]).as_numpy("OUTPUT0")
    finally:
        http.close()
    assert as_grpc.shape == (2, 3)
    assert as_grpc.tolist() == as_http.tolist()
