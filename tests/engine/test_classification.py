"""The classification extension on real models: engine, HTTP JSON and binary outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio
from onnx import TensorProto

from tests.frontends.http.test_http import split_binary
from workbench import (
    InferenceRequest,
    InvalidArgument,
    ModelLoadError,
    RequestedOutput,
    Server,
    ServerOptions,
    Tensor,
)
from workbench.engine.inference.classification import classify
from workbench.testing.models import (
    SCORES_CONFIG,
    build_classification_repository,
    identity_graph,
    write_model,
)


@pytest.fixture(scope="module")
def classification_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_classification_repository(tmp_path_factory.mktemp("classify"))


@pytest_asyncio.fixture
async def engine(classification_repository: Path):
    async with Server(ServerOptions(model_repository=[str(classification_repository)])) as server:
        yield server


@pytest_asyncio.fixture
async def http(engine: Server, asgi_client):
    async with asgi_client(engine) as client:
        yield client


def request(model: str, data: np.ndarray, wire: str, k: object) -> InferenceRequest:
    outputs = [RequestedOutput("OUTPUT0", {"classification": k})]
    return InferenceRequest(model, [Tensor("INPUT0", wire, data)], outputs=outputs)


async def test_top_k_with_labels_per_batch_item(engine: Server) -> None:
    scores = np.array([[0.1, 0.7, 0.05, 0.9, 0.3], [2.5, -1.0, 0.0, 0.25, 3.3]], np.float32)
    response = await engine.infer(request("scores", scores, "FP32", 3))
    out = response.outputs[0]
    assert out.datatype == "BYTES" and out.data.shape == (2, 3)
    assert out.data.tolist() == [
        [b"0.900000:3:fish", b"0.700000:1:dog", b"0.300000:4"],  # class 4 has no label
        [b"3.300000:4", b"2.500000:0:cat", b"0.250000:3:fish"],
    ]


async def test_k_is_clamped_and_integers_print_plainly(engine: Server) -> None:
    data = np.array([4, -2, 9, 4, 0, 7], np.int32)
    out = (await engine.infer(request("scores_int", data, "INT32", 10))).outputs[0]
    assert out.data.shape == (6,)  # non-batching model: [K], K clamped to the 6 entries
    assert out.data.tolist() == [b"9:2", b"7:5", b"4:0", b"4:3", b"0:4", b"-2:1"]


async def test_empty_batch_classifies_to_no_rows(engine: Server) -> None:
    """A zero-size batch was an INTERNAL error ("cannot reshape array of size 0 into shape
    (0,newaxis)"); found by tests/frontends/test_fuzz.py."""
    out = (await engine.infer(request("scores", np.zeros((0, 5), np.float32), "FP32", 3))).outputs[0]
    assert out.datatype == "BYTES" and out.data.shape == (0, 3)
    assert classify(np.zeros((0, 0), np.float32), "FP32", 1, batched=True).shape == (0, 0)
    assert classify(np.zeros((2, 0), np.float32), "FP32", 1, batched=True).shape == (2, 0)


async def test_zero_classes_returns_the_raw_output(engine: Server) -> None:
    data = np.arange(6, dtype=np.int32)
    out = (await engine.infer(request("scores_int", data, "INT32", 0))).outputs[0]
    assert out.datatype == "INT32" and out.data.tolist() == list(range(6))


@pytest.mark.parametrize("k", [-1, 1.5, "3", True])
async def test_invalid_class_count_is_refused_before_running(engine: Server, k: object) -> None:
    with pytest.raises(InvalidArgument, match=r"^Unable to set 'classification'"):
        await engine.infer(request("scores_int", np.zeros(6, np.int32), "INT32", k))
    stats = await engine.statistics("scores_int")
    assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 0


async def test_unsupported_type(engine: Server) -> None:
    data = np.ones((1, 4), np.float16)
    with pytest.raises(InvalidArgument) as info:
        await engine.infer(request("scores_fp16", data, "FP16", 2))
    assert info.value.message == (
        "class result not available for output due to unsupported type 'FP16'"
    )


async def test_http_json_and_binary(http: httpx.AsyncClient) -> None:
    scores = [0.5, 0.1, 0.8, 0.2, 0.0]
    body: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "shape": [1, 5], "datatype": "FP32", "data": scores}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
    }
    response = await http.post("/v2/models/scores/infer", json=body)
    assert response.status_code == 200, response.text
    output = response.json()["outputs"][0]
    assert output == {"name": "OUTPUT0", "datatype": "BYTES", "shape": [1, 2],
                      "data": ["0.800000:2:bird", "0.500000:0:cat"]}
    body["outputs"][0]["parameters"]["binary_data"] = True
    header, raw = split_binary(await http.post("/v2/models/scores/infer", json=body))
    assert header["outputs"][0]["parameters"] == {"binary_data_size": len(raw)}
    expected = (b"0.800000:2:bird", b"0.500000:0:cat")
    assert raw == b"".join(len(s).to_bytes(4, "little") + s for s in expected)


async def test_http_error_texts(http: httpx.AsyncClient) -> None:
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 5], "datatype": "FP32", "data": [0] * 5}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -2}}],
    }
    response = await http.post("/v2/models/scores/infer", json=body)
    assert response.status_code == 400
    assert response.json() == {"error": "Unable to set 'classification': attempt to access JSON "
                                        "non-unsigned-integer as unsigned-integer"}


async def test_missing_label_file_fails_the_load(tmp_path: Path) -> None:
    config = SCORES_CONFIG.replace("labels.txt", "missing.txt")
    write_model(tmp_path, "scores", config, identity_graph(TensorProto.FLOAT, ["batch", 5]))
    with pytest.raises(ModelLoadError, match=r"failed to open text file for read .*missing\.txt"):
        async with Server(ServerOptions(model_repository=[str(tmp_path)])):
            pass
