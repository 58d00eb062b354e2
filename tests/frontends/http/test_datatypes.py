"""Every Triton datatype ONNX supports, through HTTP binary and JSON, on real identity models."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio

from workbench import Server, ServerOptions
from workbench.common.datatypes import WIRE_TO_NUMPY, serialize_bytes
from workbench.frontends.http import create_app
from workbench.testing.models import IDENTITY_TYPES, build_datatype_repository

HEADER = "Inference-Header-Content-Length"


@pytest.fixture(scope="module")
def datatype_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_datatype_repository(tmp_path_factory.mktemp("types"))


@pytest_asyncio.fixture
async def types_client(datatype_repository: Path):
    async with Server(ServerOptions(model_repository=[str(datatype_repository)])) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            yield client


def sample(wire: str) -> np.ndarray:
    if wire == "BYTES":
        values = [b"hello", "çà et là".encode(), b"", b"x" * 300, b"tab\tnew\nline", b"ok"]
        array = np.empty(6, dtype=object)
        array[:] = values
        return array.reshape(2, 3)
    if wire == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    info = np.finfo if wire.startswith("FP") else np.iinfo
    dtype = WIRE_TO_NUMPY[wire]
    return np.array([[info(dtype).min, 0, 1], [2, 3, info(dtype).max]], dtype=dtype)


def raw(wire: str, array: np.ndarray) -> bytes:
    return serialize_bytes(array) if wire == "BYTES" else array.tobytes()


@pytest.mark.parametrize("wire", list(IDENTITY_TYPES))
async def test_binary_round_trip(types_client: httpx.AsyncClient, wire: str) -> None:
    array = sample(wire)
    data = raw(wire, array)
    head = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": wire,
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }).encode()
    response = await types_client.post(
        f"/v2/models/identity_{wire.lower()}/infer", content=head + data,
        headers={HEADER: str(len(head))},
    )
    assert response.status_code == 200, response.text
    length = int(response.headers[HEADER])
    out = json.loads(response.content[:length])["outputs"][0]
    assert out["datatype"] == wire and out["shape"] == [2, 3]
    assert response.content[length:] == data


@pytest.mark.parametrize("wire", [w for w in IDENTITY_TYPES if w != "FP16"])
async def test_json_round_trip(types_client: httpx.AsyncClient, wire: str) -> None:
    array = sample(wire)
    values = [v.decode() for v in array.ravel()] if wire == "BYTES" else array.ravel().tolist()
    payload = {"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": wire, "data": values}]}
    response = await types_client.post(f"/v2/models/identity_{wire.lower()}/infer", json=payload)
    assert response.status_code == 200, response.text
    out = response.json()["outputs"][0]
    assert out["datatype"] == wire
    if wire == "BYTES":
        assert out["data"] == values
    else:  # floats may print shorter (float32 shortest repr) but must parse back exactly
        np.testing.assert_array_equal(np.array(out["data"], dtype=array.dtype), array.ravel())


async def test_fp16_over_json_is_refused(types_client: httpx.AsyncClient) -> None:
    payload = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP16", "data": [1.0]}]}
    response = await types_client.post("/v2/models/identity_fp16/infer", json=payload)
    assert response.status_code == 400
    assert response.json()["error"].startswith("receiving FP16 data via JSON is not supported")


async def test_bytes_element_count_errors(types_client: httpx.AsyncClient) -> None:
    array = sample("BYTES")
    data = serialize_bytes(array[:1])  # 3 elements for a [2,3] tensor
    head = json.dumps({"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "BYTES",
                                   "parameters": {"binary_data_size": len(data)}}]}).encode()
    response = await types_client.post("/v2/models/identity_bytes/infer", content=head + data,
                                       headers={HEADER: str(len(head))})
    assert response.status_code == 400
    assert response.json()["error"] == (
        "[request id: <id_unknown>] expected 6 string elements for inference input 'INPUT0' "
        "for model 'identity_bytes', got 3"
    )
    truncated = data[:-2]
    head = head.replace(str(len(data)).encode(), str(len(truncated)).encode())
    response = await types_client.post("/v2/models/identity_bytes/infer", content=head + truncated,
                                       headers={HEADER: str(len(head))})
    assert response.status_code == 400
    assert "incomplete string length indicator for inference input 'INPUT0'" in response.json()["error"]
