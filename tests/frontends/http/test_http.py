"""The v2 HTTP frontend in-process (httpx over ASGI) on the real engine and real models."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

HEADER = "Inference-Header-Content-Length"


def binary_body(header: dict, *chunks: bytes) -> tuple[bytes, dict]:
    head = json.dumps(header).encode()
    return head + b"".join(chunks), {HEADER: str(len(head)), "Content-Type": "application/octet-stream"}


def split_binary(response: httpx.Response) -> tuple[dict, bytes]:
    length = int(response.headers[HEADER])
    return json.loads(response.content[:length]), response.content[length:]


def add_sub_json(a: np.ndarray, b: np.ndarray, **extra) -> dict:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()},
            {"name": "INPUT1", "shape": list(b.shape), "datatype": "FP32", "data": b.ravel().tolist()},
        ],
        **extra,
    }


async def test_health_and_server_metadata(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v2/health/live")).status_code == 200
    assert (await client.get("/v2/health/ready")).status_code == 200
    meta = (await client.get("/v2")).json()
    assert meta["name"] == "triton" and "statistics" in meta["extensions"]
    assert "binary_tensor_data" in meta["extensions"]


async def test_model_metadata_and_ready(client: httpx.AsyncClient) -> None:
    meta = (await client.get("/v2/models/add_sub")).json()
    assert meta["name"] == "add_sub" and meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    versioned = (await client.get("/v2/models/versioned/versions/2")).json()
    assert versioned["versions"] == ["2"]
    assert (await client.get("/v2/models/add_sub/ready")).status_code == 200
    assert (await client.get("/v2/models/versioned/versions/3/ready")).status_code == 200
    missing = await client.get("/v2/models/nope/ready")  # Triton's HandleModelReady
    assert missing.status_code == 400
    assert missing.json() == {"error": "Model version not ready"}
    fixed = (await client.get("/v2/models/fixed_shape")).json()
    assert fixed["inputs"][0]["shape"] == [2, 3]


async def test_model_config_json_matches_triton_shape(client: httpx.AsyncClient) -> None:
    config = (await client.get("/v2/models/add_sub/config")).json()
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [16]  # int64 printed as a JSON number
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    by_version = await client.get("/v2/models/versioned/versions/1/config")
    assert by_version.json()["name"] == "versioned"


async def test_infer_json_in_json_out(client: httpx.AsyncClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    response = await client.post("/v2/models/add_sub/infer", json=add_sub_json(a, a, id="q1"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["model_name"] == "add_sub" and body["model_version"] == "1" and body["id"] == "q1"
    out = {o["name"]: o for o in body["outputs"]}
    assert out["OUTPUT0"]["shape"] == [1, 16] and out["OUTPUT0"]["datatype"] == "FP32"
    assert out["OUTPUT0"]["data"] == (a * 2).ravel().tolist()
    assert "parameters" not in out["OUTPUT0"]  # perf_analyzer 2.41 rejects other parameters


async def test_infer_binary_in_binary_out_equals_json(client: httpx.AsyncClient) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((3, 16), dtype=np.float32), rng.random((3, 16), dtype=np.float32)
    header = {
        "inputs": [
            {"name": "INPUT0", "shape": [3, 16], "datatype": "FP32", "parameters": {"binary_data_size": a.nbytes}},
            {"name": "INPUT1", "shape": [3, 16], "datatype": "FP32", "parameters": {"binary_data_size": b.nbytes}},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}, {"name": "OUTPUT1"}],
    }
    body, headers = binary_body(header, a.tobytes(), b.tobytes())
    response = await client.post("/v2/models/add_sub/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    head, raw = split_binary(response)
    binary_out, json_out = head["outputs"]
    assert binary_out["parameters"] == {"binary_data_size": a.nbytes}
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(3, 16), a + b)
    np.testing.assert_array_equal(np.array(json_out["data"], np.float32).reshape(3, 16), a - b)


async def test_binary_data_output_request_parameter(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), np.float32)
    payload = add_sub_json(a, a, parameters={"binary_data_output": True})
    response = await client.post("/v2/models/add_sub/infer", json=payload)
    head, raw = split_binary(response)
    assert [o["parameters"]["binary_data_size"] for o in head["outputs"]] == [64, 64]
    assert len(raw) == 128


async def test_binary_data_output_is_only_the_default_of_outputs_not_named(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), np.float32)
    payload = add_sub_json(a, a, parameters={"binary_data_output": True},
                           outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": False}},
                                    {"name": "OUTPUT1"}])
    response = await client.post("/v2/models/add_sub/infer", json=payload)
    assert response.status_code == 200
    outputs = response.json()["outputs"]  # a named output without binary_data is JSON (Triton)
    assert [o["data"] for o in outputs] == [[2.0] * 16, [0.0] * 16]


async def test_json_body_labelled_octet_stream_with_full_header_length(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), np.float32)
    body = json.dumps(add_sub_json(a, a)).encode()
    headers = {HEADER: str(len(body)), "Content-Type": "application/octet-stream"}
    response = await client.post("/v2/models/add_sub/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text


async def test_versioned_infer_path(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), np.float32)
    response = await client.post("/v2/models/versioned/versions/2/infer", json=add_sub_json(a, a))
    assert response.json()["model_version"] == "2"


async def test_reshape_model_without_batching(client: httpx.AsyncClient) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    payload = {"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "FP32", "data": x.tolist()}]}
    body = (await client.post("/v2/models/fixed_shape/infer", json=payload)).json()
    assert body["outputs"][0]["shape"] == [6] and body["outputs"][0]["data"] == list(range(6))


ERRORS = [
    # (model, payload mutation, status, exact text or prefix)
    ("nope", {}, 404, "Request for unknown model: 'nope' is not found"),
    ("add_sub", {"dtype": "INT32"}, 400,
     "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'"),
    ("add_sub", {"shape": [1, 8]}, 400,
     "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], got [1,8]. "
     "NOTE: Setting a non-zero max_batch_size"),
    ("add_sub", {"drop": True}, 400,
     "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], "
     "but missing required input(s) ['INPUT1']. Please provide all required input(s)."),
    ("add_sub", {"extra": True}, 400, "unexpected inference input 'EXTRA' for model 'add_sub'"),
    ("add_sub", {"output": "NOPE"}, 400, "unexpected inference output 'NOPE' for model 'add_sub'"),
    ("add_sub", {"batch": 9}, 400,
     "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'add_sub'"),
    # Triton's HTTP frontend reads shape elements as unsigned integers (IndexAsUInt), so a -1
    # fails there, before the core's "All input dimensions should be specified" (gRPC's text)
    ("add_sub", {"neg": True}, 400,
     "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ("add_sub", {"triton": True}, 400, "parameter keys starting with 'triton_' are reserved"),
    ("add_sub", {"dup": True}, 400, "input 'INPUT1' already exists in request"),
    # Triton refuses a repeated requested output (the core's AddOriginalRequestedOutput)
    ("add_sub", {"dup_output": True}, 400,
     "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"),
]


def _mutate(change: dict) -> dict:
    batch = change.get("batch", 1)
    a = np.ones((batch, 16), np.float32)
    payload = add_sub_json(a, a)
    first = payload["inputs"][0]
    if "dtype" in change:
        first["datatype"] = change["dtype"]
        first["data"] = [1] * 16
    if "shape" in change:
        first["shape"], first["data"] = change["shape"], [1.0] * 8
    if change.get("neg"):
        first["shape"] = [-1, 16]
    if change.get("drop"):
        payload["inputs"].pop()
    if change.get("extra"):
        payload["inputs"].append({**first, "name": "EXTRA"})
    if change.get("dup"):
        payload["inputs"].append(dict(payload["inputs"][1]))
    if "output" in change:
        payload["outputs"] = [{"name": change["output"]}]
    if change.get("dup_output"):
        payload["outputs"] = [{"name": "OUTPUT0"}, {"name": "OUTPUT1"}, {"name": "OUTPUT0"}]
    if change.get("triton"):
        payload["parameters"] = {"triton_x": 1}
    return payload


@pytest.mark.parametrize(("model", "change", "status", "text"), ERRORS)
async def test_bad_requests_get_triton_errors_and_server_keeps_serving(
    client: httpx.AsyncClient, model: str, change: dict, status: int, text: str
) -> None:
    response = await client.post(f"/v2/models/{model}/infer", json=_mutate(change))
    assert response.status_code == status
    assert response.json()["error"].startswith(text)
    a = np.ones((1, 16), np.float32)
    assert (await client.post("/v2/models/add_sub/infer", json=add_sub_json(a, a))).status_code == 200


async def test_request_id_prefix_in_errors(client: httpx.AsyncClient) -> None:
    payload = _mutate({"batch": 9})
    payload["id"] = "my-id"
    error = (await client.post("/v2/models/add_sub/infer", json=payload)).json()["error"]
    assert error.startswith("[request id: my-id] inference request batch-size must be <= 8")


async def test_binary_byte_size_mismatch_and_short_body(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), np.float32)
    header: dict[str, Any] = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 32}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
    ]}
    body, headers = binary_body(header, a.tobytes()[:32], a.tobytes())
    response = await client.post("/v2/models/add_sub/infer", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
        "'add_sub'. Expected 64, got 32"
    )
    header["inputs"][0]["parameters"]["binary_data_size"] = 64
    body, headers = binary_body(header, a.tobytes(), a.tobytes()[:32])
    short = await client.post("/v2/models/add_sub/infer", content=body, headers=headers)
    assert short.status_code == 400
    assert short.json()["error"] == (
        "unexpected size for input 'INPUT1', expecting 32 additional bytes for model 'add_sub'"
    )


@pytest.mark.parametrize(
    ("body", "headers", "text"),
    [
        (b"{not json", {}, "failed to parse the request JSON buffer"),
        (b"[1, 2]", {}, "failed to parse the request JSON buffer: expected an object"),
        (b'{"inputs": 3}', {}, "Unable to parse 'inputs'"),
        (b"{}", {HEADER: "abc"}, "Unable to parse Inference-Header-Content-Length, got: abc"),
        (b"{}", {HEADER: "99"}, "inference header size should be in range (0, 2), got: 99"),
    ],
)
async def test_malformed_bodies(client: httpx.AsyncClient, body: bytes, headers: dict, text: str) -> None:
    response = await client.post("/v2/models/add_sub/infer", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"].startswith(text)


async def test_oversized_body_rejected(test_repository) -> None:
    from workbench import Server, ServerOptions
    from workbench.frontends.http import create_app

    options = ServerOptions(model_repository=[str(test_repository)], http_max_input_size=100)
    async with Server(options) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            response = await client.post("/v2/models/add_sub/infer", content=b"x" * 200)
    assert response.status_code == 400
    assert "exceeds the maximum allowed input size of 100" in response.json()["error"]


async def test_statistics_endpoints(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), np.float32)
    await client.post("/v2/models/add_sub/infer", json=add_sub_json(a, a))
    stats = (await client.get("/v2/models/add_sub/stats")).json()["model_stats"]
    assert stats[0]["inference_stats"]["success"]["count"] == 1
    assert stats[0]["inference_stats"]["cache_miss"] == {"count": 0, "ns": 0}
    one = (await client.get("/v2/models/versioned/versions/2/stats")).json()["model_stats"]
    assert [s["version"] for s in one] == ["2"]
    everything = (await client.get("/v2/models/stats")).json()["model_stats"]
    assert len(everything) >= 5
    bad = await client.get("/v2/models/nope/stats")
    assert bad.status_code == 400 and "requested model 'nope' is not available" in bad.json()["error"]


async def test_repository_endpoints_in_none_mode(client: httpx.AsyncClient) -> None:
    index = (await client.post("/v2/repository/index")).json()
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index
    ready = (await client.post("/v2/repository/index", json={"ready": True})).json()
    assert all(r["state"] == "READY" for r in ready)
    refused = await client.post("/v2/repository/models/add_sub/unload")
    assert refused.status_code == 503
    assert "explicit model load / unload is not allowed" in refused.json()["error"]
    named = await client.post("/v2/repository/other/index")
    assert named.status_code == 501


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v2/nothing/here")
    assert missing.status_code == 404 and missing.json() == {"error": "Not Found"}
    wrong = await client.get("/v2/models/add_sub/infer")
    assert wrong.status_code == 405 and wrong.json() == {"error": "Method Not Allowed"}


async def test_zero_size_batch_binary_output(client: httpx.AsyncClient) -> None:
    header = {
        "inputs": [
            {"name": f"INPUT{i}", "shape": [0, 16], "datatype": "FP32", "parameters": {"binary_data_size": 0}}
            for i in range(2)
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_body(header)
    response = await client.post("/v2/models/add_sub/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    head, raw = split_binary(response)
    assert head["outputs"][0]["shape"] == [0, 16]
    assert head["outputs"][0]["parameters"] == {"binary_data_size": 0} and raw == b""


async def test_nan_and_infinity_literals_in_json(client: httpx.AsyncClient) -> None:
    body = (
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", '
        b'"data": [NaN, Infinity, -Infinity]}]}'
    )
    response = await client.post("/v2/models/identity_fp32/infer", content=body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [None, None, None]  # JSON has no NaN/Inf


async def test_backend_failure_is_a_json_500_and_server_keeps_serving(client: httpx.AsyncClient) -> None:
    payload = {"inputs": [
        {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4},
        {"name": "INPUT1", "shape": [1, 5], "datatype": "FP32", "data": [1.0] * 5},
    ]}
    response = await client.post("/v2/models/add_sub_any/infer", json=payload)
    assert response.status_code == 500
    error = response.json()["error"]
    assert error.startswith("onnxruntime failed to run model 'add_sub_any'") and "\x1b[" not in error
    payload["inputs"][1] = {**payload["inputs"][0], "name": "INPUT1"}
    assert (await client.post("/v2/models/add_sub_any/infer", json=payload)).status_code == 200
    stats = (await client.get("/v2/models/add_sub_any/stats")).json()["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert stats["inference_stats"]["success"]["count"] == 1


async def test_non_batching_model_counts_each_request_as_one(client: httpx.AsyncClient) -> None:
    """max_batch_size 0: the leading dimension (2 here) is not a batch (Triton's statistics)."""
    payload = {"inputs": [{"name": "INPUT0", "shape": [2, 3], "datatype": "FP32", "data": [0.0] * 6}]}
    before = (await client.get("/v2/models/fixed_shape/stats")).json()["model_stats"][0]
    assert (await client.post("/v2/models/fixed_shape/infer", json=payload)).status_code == 200
    after = (await client.get("/v2/models/fixed_shape/stats")).json()["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 1
    assert after["batch_stats"][0]["batch_size"] == 1


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (15, "Failed to parse 'data' field: shape does not match true shape"),
        (18, "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    ],
)
async def test_json_data_count_mismatch_uses_tritons_exact_texts(
    client: httpx.AsyncClient, count: int, text: str
) -> None:
    payload = add_sub_json(np.ones((1, 16), np.float32), np.ones((1, 16), np.float32))
    payload["inputs"][0]["data"] = [1.0] * count
    response = await client.post("/v2/models/add_sub/infer", json=payload)
    assert response.status_code == 400
    assert response.json() == {"error": text}  # Triton's whole message (its QA greps it)
    payload["inputs"][0]["shape"] = [4, 2**60 + 2]  # the byte size overflow is named first
    overflow = await client.post("/v2/models/add_sub/infer", json=payload)
    assert "byte size overflow for input 'INPUT0'" in overflow.json()["error"]


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (2, "expected 4 string elements for inference input 'INPUT0' for model 'identity_bytes', got 2"),
        # Triton stops at the first element past the count: it names 5, not 6
        (6, "unexpected number of string elements 5 for inference input 'INPUT0' for model "
            "'identity_bytes', expecting 4"),
    ],
)
async def test_json_bytes_count_mismatch_uses_the_cores_texts(
    asgi_client, tmp_path, count: int, text: str
) -> None:
    from workbench import Server, ServerOptions
    from workbench.testing.models import build_datatype_repository

    repo = build_datatype_repository(tmp_path)
    async with Server(ServerOptions(model_repository=[str(repo)])) as engine, asgi_client(engine) as http:
        payload = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "BYTES",
                               "data": ["x"] * count}]}
        response = await http.post("/v2/models/identity_bytes/infer", json=payload)
    assert response.status_code == 400
    assert response.json()["error"] == "[request id: <id_unknown>] " + text


async def test_non_utf8_bytes_output_as_json_is_refused_not_corrupted(asgi_client, tmp_path) -> None:
    from workbench import Server, ServerOptions
    from workbench.testing.python_backend import copy_python_model

    raw = b"\xfa\x03ok"  # not UTF-8
    element = len(raw).to_bytes(4, "little") + raw
    header = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES",
                          "parameters": {"binary_data_size": len(element)}}]}
    copy_python_model(tmp_path, "string_identity")
    header["outputs"] = [{"name": "OUTPUT0"}]
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as engine, asgi_client(engine) as http:
        body, headers = binary_body(header, element)
        refused = await http.post("/v2/models/string_identity/infer", content=body, headers=headers)
        header["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
        body, headers = binary_body(header, element)
        binary = await http.post("/v2/models/string_identity/infer", content=body, headers=headers)
    assert refused.status_code == 400
    assert "\ufffd" not in refused.text
    assert refused.json()["error"] == (
        "output 'OUTPUT0' of model 'string_identity' holds BYTES that are not valid UTF-8, so they "
        "cannot be sent as JSON; request it with \"binary_data\": true")
    assert split_binary(binary)[1] == element  # the same data in binary arrives intact


@pytest.mark.parametrize("depth", [3, 250_000])  # 500 KB as Triton's L0_http: within --http-max-input-size
async def test_repository_index_ready_nested_deeply_is_tritons_400(client: httpx.AsyncClient, depth) -> None:
    body = b'{"ready":' + b"[" * depth + b"true" + b"]" * depth + b"}"
    response = await client.post("/v2/repository/index", content=body,
                                 headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json() == {"error": "Invalid value for 'ready': expected a boolean"}
    assert (await client.get("/v2/health/live")).status_code == 200
    deep_elsewhere = b'{"x":' + b"[" * depth + b"]" * depth + b"}"
    other = await client.post("/v2/repository/index", content=deep_elsewhere,
                              headers={"Content-Type": "application/json"})
    # another member nested past orjson's 1024 levels stays a parse error (400), never a crash
    assert other.status_code == (200 if depth < 1000 else 400)
