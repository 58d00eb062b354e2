"""Client errors in request bodies are clear 400s / INVALID_ARGUMENT with Triton's texts, never
a 500 / INTERNAL (the project's security issue, items 10 and 11).

Real engine on the real ONNX test models (``identity_<type>`` are auto-completed [-1,-1]
identities, max_batch_size 4), over the in-process HTTP app and a grpc.aio server on port 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import httpx
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server
from workbench.testing.models import build_datatype_repository, build_test_repository

HEADER = "Inference-Header-Content-Length"
INT64_MAX = 2**63 - 1
#: 5000 levels of nesting: past orjson's depth limit and Python's recursion limit
DEEP = b"[" * 5000 + b"]" * 5000
SHAPE_TEXT = "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_datatype_repository(build_test_repository(tmp_path_factory.mktemp("valid")))


@pytest_asyncio.fixture
async def engine(repository: Path):
    options = ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                            load_model=["*"])
    async with Server(options) as server:
        yield server


@pytest_asyncio.fixture
async def http(engine: Server, asgi_client):
    async with asgi_client(engine) as client:
        yield client


@pytest_asyncio.fixture
async def stub(engine: Server, stub_for):
    return await stub_for(engine)


def _input(shape: list, data: object, datatype: str = "FP32") -> dict:
    return {"name": "INPUT0", "shape": shape, "datatype": datatype, "data": data}


async def _infer(http: httpx.AsyncClient, model: str, body: dict | bytes, headers=None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await http.post(f"/v2/models/{model}/infer", content=content, headers=headers or {})


async def _still_serves(http: httpx.AsyncClient) -> None:
    assert (await http.get("/v2/health/ready")).status_code == 200
    ok = await _infer(http, "identity_fp32", {"inputs": [_input([1, 2], [1.0, 2.0])]})
    assert ok.status_code == 200, ok.text


async def _grpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


# ------------------------------------------------------------------ item 10: huge zero-size shapes
ZERO_HUGE = [0, 2**62]
TOO_BIG = ("invalid shape for input 'INPUT0': shape [0,4611686018427387904] exceeds the "
           f"maximum byte size of {INT64_MAX}")


async def test_zero_element_shape_with_huge_dim_json_is_400(http: httpx.AsyncClient) -> None:
    response = await _infer(http, "identity_fp32", {"inputs": [_input(ZERO_HUGE, [])]})
    assert response.status_code == 400
    assert response.json()["error"].startswith(TOO_BIG)
    await _still_serves(http)


async def test_zero_element_shape_with_huge_dim_binary_is_400(http: httpx.AsyncClient) -> None:
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": ZERO_HUGE, "datatype": "FP32",
                                     "parameters": {"binary_data_size": 0}}]}).encode()
    response = await _infer(http, "identity_fp32", header, {HEADER: str(len(header))})
    assert response.status_code == 400
    assert response.json()["error"].startswith(TOO_BIG)
    await _still_serves(http)


async def test_element_count_overflow_is_triton_text(http: httpx.AsyncClient) -> None:
    response = await _infer(http, "identity_fp32", {"inputs": [_input([2**40, 2**40], [])]})
    assert response.status_code == 400
    assert response.json()["error"] == (
        "invalid shape for input 'INPUT0': shape [1099511627776,1099511627776] causes total "
        f"element count to exceed maximum size of {INT64_MAX}"
    )


async def test_dimension_past_int64_is_invalid_dimension(http: httpx.AsyncClient) -> None:
    response = await _infer(http, "identity_fp32", {"inputs": [_input([2**63, 1], [])]})
    assert response.status_code == 400
    assert response.json()["error"] == (
        "invalid shape for input 'INPUT0': shape [9223372036854775808,1] contains one or more "
        "invalid dimensions"
    )


@pytest.mark.parametrize("contents", ["raw", "typed"])
async def test_zero_element_shape_with_huge_dim_grpc_is_invalid_argument(stub, contents: str) -> None:
    request = pb.ModelInferRequest(model_name="identity_fp32")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=ZERO_HUGE)
    if contents == "raw":
        request.raw_input_contents.append(b"")
    else:
        tensor.contents.fp32_contents.extend([])
        tensor.contents.SetInParent()
    error = await _grpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(TOO_BIG)
    assert (await stub.ServerReady(pb.ServerReadyRequest())).ready


async def test_negative_dimension_over_grpc_keeps_the_core_text(stub) -> None:
    """gRPC shapes are int64: a -1 reaches the core's check (Triton's text), not a parse error."""
    request = pb.ModelInferRequest(model_name="identity_fp32", raw_input_contents=[b""])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[-1, 2])
    error = await _grpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "[request id: <id_unknown>] All input dimensions should be specified for input 'INPUT0' "
        "for model 'identity_fp32', got [-1,2]"
    )


# ------------------------------------------------------------------ item 10: deeply nested JSON
JSON_ROUTES = [
    "/v2/models/identity_fp32/infer",
    "/v2/repository/index",
    "/v2/repository/models/identity_fp32/load",
    "/v2/repository/models/nope/unload",
    "/v2/logging",
    "/v2/trace/setting",
    "/v2/models/identity_fp32/trace/setting",
    "/v2/systemsharedmemory/region/r/register",
    "/v2/cudasharedmemory/region/r/register",
]


@pytest.mark.parametrize("route", JSON_ROUTES)
@pytest.mark.parametrize("where", ["top", "member"])
async def test_deeply_nested_json_is_400_on_every_json_route(
    http: httpx.AsyncClient, route: str, where: str
) -> None:
    body = DEEP if where == "top" else b'{"inputs": ' + DEEP + b', "parameters": ' + DEEP + b"}"
    response = await http.post(route, content=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith("failed to parse the request JSON buffer")
    await _still_serves(http)


async def test_deeply_nested_json_with_nan_literal_is_400(http: httpx.AsyncClient) -> None:
    """A NaN literal sends the body to the slower json-module parser: it must refuse depth too."""
    body = b'{"a": NaN, "b": ' + DEEP + b"}"
    response = await http.post("/v2/repository/index", content=body)
    assert response.status_code == 400
    assert response.json()["error"].startswith("failed to parse the request JSON buffer")


async def test_deeply_nested_model_config_json_is_400(http: httpx.AsyncClient, stub) -> None:
    config = "[" * 5000 + "]" * 5000
    body = {"parameters": {"config": config}}
    response = await http.post("/v2/repository/models/identity_fp32/load", json=body)
    assert response.status_code == 400, response.text
    assert "failed to parse model config JSON" in response.json()["error"]
    request = pb.RepositoryModelLoadRequest(model_name="identity_fp32")
    request.parameters["config"].string_param = config
    error = await _grpc_error(stub.RepositoryModelLoad(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "failed to parse model config JSON" in error.details()
    await _still_serves(http)


async def test_nested_data_past_triton_depth_is_400(http: httpx.AsyncClient) -> None:
    data: list = [1.0]
    for _ in range(150):
        data = [data]
    response = await _infer(http, "identity_fp32", {"inputs": [_input([1, 1], data)]})
    assert response.status_code == 400
    assert response.json()["error"] == (
        "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit (100)"
    )


# ------------------------------------------------------------------ item 11: strict JSON types
@pytest.mark.parametrize("dim", ["1", 1.5, 1.0, True, None, -1, [1]])
async def test_shape_elements_must_be_unsigned_integers(http: httpx.AsyncClient, dim) -> None:
    response = await _infer(http, "identity_fp32", {"inputs": [_input([dim, 1], [1.0])]})
    assert response.status_code == 400
    assert response.json()["error"] == SHAPE_TEXT
    await _still_serves(http)


@pytest.mark.parametrize(
    ("datatype", "value", "text"),
    [
        ("FP32", None, "Unable to parse 'data': attempt to access JSON non-number as double"),
        ("FP32", True, "Unable to parse 'data': attempt to access JSON non-number as double"),
        ("FP32", "1", "Unable to parse 'data': attempt to access JSON non-number as double"),
        ("FP64", False, "Unable to parse 'data': attempt to access JSON non-number as double"),
        ("INT32", 1.5, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
        ("INT64", True, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
        ("UINT8", -1, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("UINT32", 2.0, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("BOOL", 1, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
        ("BOOL", None, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
        ("BYTES", 1, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        ("BYTES", None, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
    ],
)
async def test_data_elements_must_match_the_datatype(
    http: httpx.AsyncClient, datatype: str, value, text: str
) -> None:
    model = f"identity_{datatype.lower()}"
    good = {"FP32": 1.0, "FP64": 1.0, "INT32": 1, "INT64": 1, "UINT8": 1, "UINT32": 1,
            "BOOL": True, "BYTES": "a"}[datatype]
    response = await _infer(http, model, {"inputs": [_input([1, 2], [good, value], datatype)]})
    assert response.status_code == 400
    assert response.json()["error"] == text
    ok = await _infer(http, model, {"inputs": [_input([1, 2], [[good, good]], datatype)]})
    assert ok.status_code == 200, ok.text


async def test_integers_and_non_finite_literals_are_fp32_data(http: httpx.AsyncClient) -> None:
    body = b'{"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, NaN, 2.5]}]}'
    response = await _infer(http, "identity_fp32", body)
    assert response.status_code == 200, response.text
    data = response.json()["outputs"][0]["data"]
    assert data[0] == 1.0 and data[2] == 2.5


@pytest.mark.parametrize("ready", [[True], "true", 1, None, {"a": 1}])
async def test_repository_index_ready_must_be_a_boolean(http: httpx.AsyncClient, ready) -> None:
    response = await http.post("/v2/repository/index", json={"ready": ready})
    assert response.status_code == 400
    assert response.json()["error"] == "Invalid value for 'ready': expected a boolean"
    assert (await http.post("/v2/repository/index", json={"ready": True})).status_code == 200


# ------------------------------------------------------------------ gRPC: undecodable messages
@pytest.mark.parametrize("raw", [b"\xff\xff\xff", b"\x0a\x05ab", b"\x08"])
async def test_undecodable_grpc_message_is_invalid_argument(engine: Server, raw: bytes) -> None:
    """grpc's generated parser answered UNKNOWN ("Unexpected DecodeError") for bytes that are
    not a ModelInferRequest (found by tests/frontends/test_fuzz.py)."""
    grpc_server, port = create_grpc_server(engine, ServerOptions(grpc_address="127.0.0.1", grpc_port=0))
    await grpc_server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for method in ("ModelInfer", "RepositoryIndex"):
                call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
                error = await _grpc_error(call(raw))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error.details().startswith("failed to parse the request message: Error parsing")
            stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
            error = await _grpc_error(_drain(stream(iter([raw]))))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            ready = channel.unary_unary("/inference.GRPCInferenceService/ServerReady",
                                        request_serializer=pb.ServerReadyRequest.SerializeToString,
                                        response_deserializer=pb.ServerReadyResponse.FromString)
            assert (await ready(pb.ServerReadyRequest())).ready
    finally:
        await grpc_server.stop(None)


async def _drain(call) -> None:
    async for _ in call:
        pass


# ------------------------------------------------------------------ item 11: other JSON fields
@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"id": 7}, "Unable to parse 'id': attempt to access JSON non-string as string"),
        ({"inputs": [{**_input([1, 1], [1.0]), "name": None}]},
         "Unable to parse 'name': attempt to access JSON non-string as string"),
        ({"inputs": [{**_input([1, 1], [1.0]), "datatype": 3}]},
         "Unable to parse 'datatype': attempt to access JSON non-string as string"),
        ({"inputs": [_input([1, 1], 1.0)]}, "Unable to parse 'data': attempt to access JSON non-array as array"),
        ({"inputs": [{**_input([1, 1], [1.0]), "parameters": "binary_data_size"}]},
         "Unable to parse 'parameters': attempt to access JSON non-object as object"),
        ({"outputs": [{"name": 0}]}, "Unable to parse 'name': attempt to access JSON non-string as string"),
        ({"outputs": [{"name": "OUTPUT0", "parameters": [1]}]},
         "Unable to parse 'parameters': attempt to access JSON non-object as object"),
        ({"parameters": {"sequence_start": 1}},
         "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean"),
        ({"parameters": {"sequence_id": -1}},
         "Unable to parse 'sequence_id': attempt to access JSON non-string as string"),
        ({"parameters": {"priority": True}},
         "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"parameters": {"timeout": 1.5}},
         "Unable to parse 'timeout': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ({"parameters": {"binary_data_output": "yes"}},
         "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean"),
        ({"parameters": {"custom": [1]}},
         "parameter 'custom' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ({"parameters": {"custom": None}},
         "parameter 'custom' has invalid type. It should be either 'int', 'bool', or 'string'."),
    ],
)
async def test_other_json_fields_follow_triton_types(http: httpx.AsyncClient, change: dict, text: str) -> None:
    body = {"inputs": [_input([1, 1], [1.0])], **change}
    response = await _infer(http, "identity_fp32", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == text
    ok = {"inputs": [_input([1, 1], [1.0])], "id": "x", "parameters": {"custom": 1.5, "flag": True}}
    assert (await _infer(http, "identity_fp32", ok)).status_code == 200


async def test_classification_of_an_empty_batch_over_grpc(stub) -> None:
    """The fuzz's concrete case: shape [0,0] with classification was INTERNAL."""
    request = pb.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[0, 0]).contents.SetInParent()
    request.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 1
    response = await stub.ModelInfer(request)
    assert list(response.outputs[0].shape) == [0, 0] and response.outputs[0].datatype == "BYTES"


@pytest.mark.parametrize(
    ("route", "body", "text"),
    [
        ("load", {"parameters": [1]}, "Unable to parse 'parameters': attempt to access JSON non-object as object"),
        ("unload", {"parameters": [1]}, "Unable to parse 'parameters': attempt to access JSON non-object as object"),
        ("unload", {"parameters": {"unload_dependents": "no"}},
         "Unable to parse 'unload_dependents': attempt to access JSON non-boolean as boolean"),
    ],
)
async def test_repository_parameters_follow_triton_types(
    http: httpx.AsyncClient, route: str, body: dict, text: str
) -> None:
    """A list as ``parameters`` was a 500 (AttributeError); a string unload_dependents was
    read as true."""
    response = await http.post(f"/v2/repository/models/identity_fp32/{route}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == text
    await _still_serves(http)
