"""Triton's shared-memory HTTP extension in-process (httpx over ASGI), real engine and models."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.utils.shared_memory as shm

from workbench import Server, ServerOptions
from workbench.frontends.http import create_app

SYSTEM = "/v2/systemsharedmemory"


@pytest_asyncio.fixture
async def shm_client(test_repository: Path):
    options = ServerOptions(model_repository=[str(test_repository)], allow_client_shm=True)
    async with Server(options) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://workbench") as http:
            yield http


async def test_register_status_unregister_routes(shm_client: httpx.AsyncClient, shm_segments) -> None:
    key, _ = shm_segments(128)
    registered = await shm_client.post(f"{SYSTEM}/region/r/register", json={"key": key, "byte_size": 128})
    assert registered.status_code == 200, registered.text
    status = await shm_client.get(f"{SYSTEM}/status")
    assert status.json() == [{"name": "r", "key": key, "offset": 0, "byte_size": 128}]
    assert (await shm_client.get(f"{SYSTEM}/region/r/status")).json()[0]["name"] == "r"
    again = await shm_client.post(f"{SYSTEM}/region/r/register", json={"key": key, "byte_size": 8})
    assert again.status_code == 400
    assert again.json() == {"error": "shared memory region 'r' already in manager"}
    missing = await shm_client.get(f"{SYSTEM}/region/x/status")
    assert missing.status_code == 404
    assert missing.json() == {"error": "Unable to find system shared memory region: 'x'"}
    assert (await shm_client.post(f"{SYSTEM}/region/r/unregister")).status_code == 200
    assert (await shm_client.get(f"{SYSTEM}/status")).json() == []
    assert (await shm_client.get(f"{SYSTEM}/region/r/register")).status_code == 405


@pytest.mark.parametrize(("body", "status", "error"), [
    ({"byte_size": 8}, 400, "Shared memory register request has no 'key' field"),
    ({"key": "/k"}, 400, "Shared memory register request has no 'byte_size' field"),
    ({"key": "/k", "byte_size": -1}, 400, "Unable to parse 'byte_size'"),
    ({"key": "/wb_absent", "byte_size": 8}, 400, "Unable to open shared memory region: '/wb_absent'"),
])
async def test_register_body_errors(shm_client: httpx.AsyncClient, body, status, error) -> None:
    response = await shm_client.post(f"{SYSTEM}/region/r/register", json=body)
    assert response.status_code == status
    assert response.json()["error"].startswith(error)


async def test_cuda_routes_without_gpu(shm_client: httpx.AsyncClient) -> None:
    from workbench.gpu.devices import gpu_count

    if gpu_count():
        pytest.skip("a GPU is present")
    body = {"raw_handle": {"b64": base64.b64encode(b"\0" * 64).decode()}, "device_id": 0, "byte_size": 64}
    response = await shm_client.post("/v2/cudasharedmemory/region/c/register", json=body)
    assert response.status_code == 400
    assert response.json() == {"error": "failed to register CUDA shared memory region: 'c', GPUs not supported"}
    assert (await shm_client.get("/v2/cudasharedmemory/status")).json() == []
    assert (await shm_client.post("/v2/cudasharedmemory/unregister")).status_code == 200


async def test_register_disabled_is_501(test_repository: Path, shm_segments) -> None:
    key, _ = shm_segments(8)
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://workbench") as http:
            response = await http.post(f"{SYSTEM}/region/r/register", json={"key": key, "byte_size": 8})
            assert response.status_code == 501
            assert response.json() == {"error": "Client shared memory is disabled. Start the server "
                                                "with '--allow-client-shm=true' to enable."}
            assert (await http.post(f"{SYSTEM}/unregister")).status_code == 501
            assert (await http.get(f"{SYSTEM}/status")).json() == []


async def test_infer_with_shared_memory_json(shm_client: httpx.AsyncClient, shm_segments) -> None:
    key, handle = shm_segments(192)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    shm.set_shared_memory_region(handle, [a])
    await shm_client.post(f"{SYSTEM}/region/r/register", json={"key": key, "byte_size": 192})
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
             "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"shared_memory_region": "r", "shared_memory_offset": 64,
                                               "shared_memory_byte_size": 64, "binary_data": False}},
            {"name": "OUTPUT1"},
        ],
    }
    response = await shm_client.post("/v2/models/add_sub/infer", json=body)
    assert response.status_code == 200, response.text
    out = {o["name"]: o for o in response.json()["outputs"]}
    assert out["OUTPUT0"] == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}  # Triton's shape
    assert out["OUTPUT1"]["data"] == (a - 1).ravel().tolist()
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16], 64), a + 1)


@pytest.mark.parametrize(("input_params", "output_params", "error"), [
    ({"shared_memory_region": "r", "binary_data_size": 64}, {},
     "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
     "'shared_memory_region' in 'parameters'. But set 'binary_data_size' 'shared_memory_region'"),
    ({"shared_memory_region": 5}, {}, "Unable to parse 'shared_memory_region'"),
    ({"shared_memory_region": "r", "shared_memory_byte_size": 64},
     {"shared_memory_region": "r", "binary_data": True},
     "Output can't set both 'shared_memory_region' and 'binary_data'"),
])
async def test_infer_shared_memory_parameter_errors(shm_client, input_params, output_params, error) -> None:
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": input_params},
                   {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}],
        "outputs": [{"name": "OUTPUT0", "parameters": output_params}],
    }
    response = await shm_client.post("/v2/models/add_sub/infer", json=body)
    assert response.status_code == 400
    assert response.json() == {"error": error}
