"""Explicit model control through tritonclient against the real server process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def explicit(test_repository: Path):
    server = ServerProcess([
        f"--model-repository={test_repository}", "--model-control-mode=explicit",
        "--load-model=fixed_shape",
    ])
    client = httpclient.InferenceServerClient(server.url)
    yield client
    client.close()
    assert server.stop() == 0


def add_sub_inputs(batch: int) -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput(f"INPUT{i}", [batch, 16], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((batch, 16), np.float32))
    return inputs


def test_load_infer_unload(explicit) -> None:
    names = {r["name"]: r for r in explicit.get_model_repository_index()}
    assert names["fixed_shape"]["state"] == "READY" and "state" not in names["add_sub"]
    assert not explicit.is_model_ready("add_sub")
    explicit.load_model("add_sub")
    assert explicit.is_model_ready("add_sub")
    assert explicit.infer("add_sub", add_sub_inputs(2)).as_numpy("OUTPUT0").shape == (2, 16)
    explicit.unload_model("add_sub")
    assert not explicit.is_model_ready("add_sub")
    with pytest.raises(InferenceServerException, match="has no available versions"):
        explicit.infer("add_sub", add_sub_inputs(1))


def test_load_with_config_override(explicit) -> None:
    override = {
        "name": "add_sub", "backend": "onnxruntime", "max_batch_size": 2,
        "input": [{"name": f"INPUT{i}", "data_type": "TYPE_FP32", "dims": [16]} for i in range(2)],
        "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [16]} for i in range(2)],
    }
    explicit.load_model("add_sub", config=json.dumps(override))
    assert explicit.get_model_config("add_sub")["max_batch_size"] == 2
    with pytest.raises(InferenceServerException, match="batch-size must be <= 2"):
        explicit.infer("add_sub", add_sub_inputs(3))
    explicit.load_model("add_sub")  # Triton keeps the override while config.pbtxt is unchanged (L3)
    assert explicit.get_model_config("add_sub")["max_batch_size"] == 2
    explicit.unload_model("add_sub")  # an unload forgets it: config.pbtxt again
    explicit.load_model("add_sub")
    assert explicit.get_model_config("add_sub")["max_batch_size"] == 8


def test_load_errors(explicit) -> None:
    with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
        explicit.load_model("not_in_repository")
    explicit.load_model("add_sub")
    bad = json.dumps({"name": "add_sub", "backend": "onnxruntime", "max_batch_size": -1})
    with pytest.raises(InferenceServerException, match="'max_batch_size' must be non-negative"):
        explicit.load_model("add_sub", config=bad)
    assert explicit.is_server_live()
    assert explicit.is_model_ready("add_sub")  # the failed reload left version 1 serving
    assert explicit.get_model_config("add_sub")["max_batch_size"] == 8


def test_poll_mode_process_follows_the_repository(tmp_path: Path) -> None:
    from workbench.testing.reload import add_sub_config, atomic_write, write_add_sub

    folder = write_add_sub(tmp_path)
    server = ServerProcess([f"--model-repository={tmp_path}", "--model-control-mode=poll",
                            "--repository-poll-secs=0.2"])
    client = httpclient.InferenceServerClient(server.url)
    try:
        with pytest.raises(InferenceServerException,
                           match="explicit model load / unload is not allowed if polling is enabled"):
            client.load_model("add_sub")
        write_add_sub(tmp_path, "second")
        atomic_write(folder / "config.pbtxt", add_sub_config("add_sub", 16, 1))
        deadline = time.monotonic() + 60
        while not (client.is_model_ready("second")
                   and client.get_model_config("add_sub")["max_batch_size"] == 16):
            assert time.monotonic() < deadline, server.log
            time.sleep(0.1)
        assert client.infer("second", add_sub_inputs(2)).as_numpy("OUTPUT0").shape == (2, 16)
    finally:
        client.close()
        assert server.stop() == 0


def test_file_overrides_and_warmup_with_tritonclient(tmp_path: Path, test_repository: Path) -> None:
    """Triton's lifecycle test_file_override through both clients: files + config make a model
    (absent from the repository, or replacing one's folder), traversal is refused, the
    temporary folders go with the server; a model with model_warmup serves with clean stats."""
    import re

    import tritonclient.grpc as grpcclient

    from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

    warmup = ('model_warmup [ { name: "w" batch_size: 2 inputs [ '
              '{ key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }, '
              '{ key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } } ] } ]')
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG + warmup, add_sub_graph())
    onnx_file = (test_repository / "add_sub" / "1" / "model.onnx").read_bytes()
    config = json.dumps({"backend": "onnxruntime"})
    server = ServerProcess([f"--model-repository={tmp_path}", "--model-control-mode=explicit",
                            "--load-model=add_sub"])
    try:
        http = httpclient.InferenceServerClient(server.url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert http.is_model_ready("add_sub")
        [stats] = http.get_inference_statistics("add_sub")["model_stats"]
        assert stats["inference_count"] == 0 and stats["execution_count"] == 0  # warmup not counted
        with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
            http.load_model("add_sub", files={"file:1/model.onnx": onnx_file})  # no config
        http.load_model("over_http", config=config, files={"file:1/model.onnx": onnx_file})
        grpc.load_model("over_grpc", config=config, files={"file:1/model.onnx": onnx_file})
        http.load_model("add_sub", config=config, files={"file:3/model.onnx": onnx_file})
        for name, version in (("over_http", "1"), ("over_grpc", "1"), ("add_sub", "3")):
            assert http.is_model_ready(name, version) and grpc.is_model_ready(name, version)
            assert http.infer(name, add_sub_inputs(1)).as_numpy("OUTPUT0")[0, 0] == 2.0
        assert not http.is_model_ready("add_sub", "1")
        for client in (http, grpc):
            for path in ("file:../x", "file:1/../../x", "file:/etc/passwd"):
                with pytest.raises(InferenceServerException, match="Invalid file parameter"):
                    client.load_model("evil", config=config, files={path: b"evil"})
        assert sorted(p.name for p in tmp_path.iterdir()) == ["add_sub"]  # repository untouched
        assert sorted(p.name for p in (tmp_path / "add_sub").iterdir()) == ["1", "config.pbtxt"]
        http.unload_model("over_http")
        folders = set(re.findall(r"from the override files .* in '([^']+)'", server.log))
        assert len(folders) == 3
        assert sum(Path(f).exists() for f in folders) == 2  # over_http's folder went with it
        http.close()
        grpc.close()
    finally:
        assert server.stop() == 0
    assert not any(Path(f).exists() for f in folders)
    assert not any(Path(f).parent.exists() for f in folders)  # the server's root folder too
