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
    explicit.load_model("add_sub")  # back to config.pbtxt
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
