"""LogSettings, TraceSetting and the classification extension over gRPC in-process: a real
Server behind grpc.aio, the generated stub, the answers compared with Triton's shapes and
with the HTTP frontend on the same engine."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.testing.models import build_classification_repository, build_test_repository

DEFAULT_LOG = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
               "log_verbose_level": 0, "log_format": "default"}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_classification_repository(build_test_repository(tmp_path_factory.mktemp("grpc_settings")))


@pytest_asyncio.fixture
async def engine(repository: Path):
    async with Server(ServerOptions(model_repository=[str(repository)], trace_file="/tmp/trace.json")) as server:
        yield server


@pytest_asyncio.fixture
async def stub(engine: Server, stub_for):
    return await stub_for(engine)


async def rpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


def log_values(response: pb.LogSettingsResponse) -> dict:
    return {key: getattr(value, value.WhichOneof("parameter_choice")) for key, value in response.settings.items()}


def trace_values(response: pb.TraceSettingResponse) -> dict:
    return {key: list(value.value) for key, value in response.settings.items()}


def log_request(**settings) -> pb.LogSettingsRequest:
    request = pb.LogSettingsRequest()
    for key, (choice, value) in settings.items():
        setattr(request.settings[key], choice, value)
    return request


def trace_request(model: str = "", **settings: list[str]) -> pb.TraceSettingRequest:
    request = pb.TraceSettingRequest(model_name=model)
    for key, values in settings.items():
        request.settings[key].value.extend(values)
    return request


# ----------------------------------------------------------------- logging
async def test_log_settings_read_and_update(stub, engine: Server) -> None:
    current = await stub.LogSettings(pb.LogSettingsRequest())
    assert log_values(current) == DEFAULT_LOG
    assert current.settings["log_verbose_level"].WhichOneof("parameter_choice") == "uint32_param"
    updated = await stub.LogSettings(log_request(log_info=("bool_param", False),
                                                 log_verbose_level=("uint32_param", 2),
                                                 log_format=("string_param", "ISO8601")))
    expected = {**DEFAULT_LOG, "log_info": False, "log_verbose_level": 2, "log_format": "ISO8601"}
    assert log_values(updated) == expected
    assert await engine.settings.log_settings() == expected


@pytest.mark.parametrize(("settings", "code", "message"), [
    ({"log_file": ("string_param", "/tmp/x.log")}, grpc.StatusCode.UNIMPLEMENTED,
     "log file location can not be updated through network protocol"),
    ({"log_info": ("string_param", "yes")}, grpc.StatusCode.INVALID_ARGUMENT, "expect boolean for 'log_info'"),
    ({"log_verbose_level": ("bool_param", True)}, grpc.StatusCode.INVALID_ARGUMENT,
     "expect int32 for 'log_verbose_level'"),
    ({"log_format": ("uint32_param", 1)}, grpc.StatusCode.INVALID_ARGUMENT, "expect string for 'log_format'"),
    ({"log_format": ("string_param", "json")}, grpc.StatusCode.INVALID_ARGUMENT,
     "invalid argument for log_format, got: json"),
])
async def test_log_settings_errors(stub, engine: Server, settings: dict, code, message: str) -> None:
    error = await rpc_error(stub.LogSettings(log_request(log_warning=("bool_param", False), **settings)))
    assert (error.code(), error.details()) == (code, message)
    assert await engine.settings.log_settings() == DEFAULT_LOG


# ----------------------------------------------------------------- trace
async def test_trace_settings_global_model_and_clear(stub, asgi_client, engine: Server) -> None:
    current = trace_values(await stub.TraceSetting(pb.TraceSettingRequest()))
    async with asgi_client(engine) as http:
        as_http = (await http.get("/v2/trace/setting")).json()
    assert current == {k: v if isinstance(v, list) else [v] for k, v in as_http.items()}
    assert current["trace_level"] == ["OFF"] and current["trace_file"] == ["/tmp/trace.json"]
    updated = trace_values(await stub.TraceSetting(trace_request(trace_level=["TIMESTAMPS"], trace_rate=["5"])))
    assert updated["trace_level"] == ["TIMESTAMPS"] and updated["trace_rate"] == ["5"]
    model = trace_values(await stub.TraceSetting(trace_request("add_sub", trace_count=["20"])))
    assert model["trace_count"] == ["20"] and model["trace_rate"] == ["5"]
    assert trace_values(await stub.TraceSetting(pb.TraceSettingRequest()))["trace_count"] == ["-1"]
    cleared = trace_values(await stub.TraceSetting(trace_request("add_sub", trace_count=[])))
    assert cleared["trace_count"] == ["-1"]
    reset = trace_values(await stub.TraceSetting(trace_request(trace_level=[], trace_rate=[])))
    assert reset["trace_level"] == ["OFF"] and reset["trace_rate"] == ["1000"]


@pytest.mark.parametrize(("request_", "code", "message"), [
    (trace_request(trace_rate=["1", "2"]), grpc.StatusCode.INVALID_ARGUMENT, "expect only 1 value for 'trace_rate'"),
    (trace_request(trace_rate=["x"]), grpc.StatusCode.INVALID_ARGUMENT, "Unable to parse 'trace_rate', got: x"),
    (trace_request(trace_level=["OFF", "TENSORS"]), grpc.StatusCode.INVALID_ARGUMENT,
     "Expect only one trace level 'OFF' is specified"),
    (trace_request(trace_file=["/tmp/other.json"]), grpc.StatusCode.UNIMPLEMENTED,
     "trace file location can not be updated through network protocol"),
    (trace_request("no_such_model"), grpc.StatusCode.INVALID_ARGUMENT, "Request for unknown model : no_such_model"),
])
async def test_trace_setting_errors(stub, request_, code, message: str) -> None:
    error = await rpc_error(stub.TraceSetting(request_))
    assert (error.code(), error.details()) == (code, message)


# ----------------------------------------------------------------- classification
def scores_request(scores: np.ndarray, k: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="scores", raw_input_contents=[scores.tobytes()])
    request.inputs.add(name="INPUT0", datatype="FP32", shape=scores.shape)
    request.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = k
    return request


def deserialize_bytes(raw: bytes) -> list[bytes]:
    items, offset = [], 0
    while offset < len(raw):
        length = int.from_bytes(raw[offset:offset + 4], "little")
        items.append(raw[offset + 4:offset + 4 + length])
        offset += 4 + length
    return items


async def test_classification_matches_http(stub, asgi_client, engine: Server) -> None:
    scores = np.random.default_rng(5).standard_normal((3, 5)).astype(np.float32)
    response = await stub.ModelInfer(scores_request(scores, 3))
    output = response.outputs[0]
    assert (output.name, output.datatype, list(output.shape)) == ("OUTPUT0", "BYTES", [3, 3])
    as_grpc = [item.decode() for item in deserialize_bytes(response.raw_output_contents[0])]
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3, 5], "data": scores.ravel().tolist()}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 3}}]}
    async with asgi_client(engine) as http:
        as_http = (await http.post("/v2/models/scores/infer", json=body)).json()["outputs"][0]["data"]
    assert as_grpc == as_http
    best = int(np.argmax(scores[0]))
    assert as_grpc[0].split(":")[1] == str(best)


@pytest.mark.parametrize(("edit", "message"), [
    ("zero", "invalid value for 'classification' parameter, expected >= 0"),
    ("string", "invalid value type for 'classification' parameter, expected int64_param"),
])
async def test_classification_parameter_errors(stub, edit: str, message: str) -> None:
    request = scores_request(np.zeros((1, 5), np.float32), 1)
    parameter = request.outputs[0].parameters["classification"]
    if edit == "zero":
        parameter.int64_param = 0
    else:
        parameter.string_param = "2"
    error = await rpc_error(stub.ModelInfer(request))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
