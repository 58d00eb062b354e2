"""Triton's trace output (``--trace-config triton,file=...``) on the real engine: HTTP and gRPC
timestamps, rate / count / log-frequency, TENSORS records, ensemble child traces and per-model
trace settings over HTTP and gRPC (Triton's ``tracer.cc`` and ``docs/user_guide/trace.md``)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from workbench import InvalidArgument, Server, ServerOptions
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.waits import until
from workbench.tracing.records import Record
from workbench.tracing.records import tensor_record as tensor_record_or_none

HTTP_NAMES = ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
              "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
              "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
ADD_SUB = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16},
                      {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16}]}
PAIR = {"inputs": [{"name": "IN0", "datatype": "FP32", "shape": [1, 16], "data": [3.0] * 16},
                   {"name": "IN1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}]}


@contextlib.asynccontextmanager
async def traced(repo: Path, asgi_client, path: Path, **trace) -> AsyncIterator[tuple[Server, httpx.AsyncClient]]:
    """A started server tracing into ``path`` (``trace`` options over rate 1, TIMESTAMPS),
    with an in-process HTTP client; the server is stopped (files completed) on exit."""
    options = ServerOptions(model_repository=[str(repo)], trace_file=str(path),
                            **{"trace_level": ["TIMESTAMPS"], "trace_rate": 1, **trace})
    async with Server(options) as server, asgi_client(server) as http:
        yield server, http


def by_id(records: list[dict]) -> dict[int, list[dict]]:
    traces: dict[int, list[dict]] = defaultdict(list)
    for record in records:
        traces[record["id"]].append(record)
    return dict(traces)


def stamps(records: list[dict]) -> list[tuple[str, int]]:
    return [(t["name"], t["ns"]) for r in records if "timestamps" in r for t in r["timestamps"]]


def header(records: list[dict]) -> dict:
    return next(r for r in records if "model_name" in r)


async def infer(http: httpx.AsyncClient, model: str = "add_sub", body: dict = ADD_SUB, **extra) -> None:
    response = await http.post(f"/v2/models/{model}/infer", json={**body, **extra})
    assert response.status_code == 200, response.text


async def test_http_request_writes_tritons_timestamps(test_repository: Path, asgi_client, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path) as (_server, http):
        await infer(http, id="req-7")
        await infer(http)
    traces = by_id(json.loads(path.read_text()))
    assert len(traces) == 2
    first, second = traces.values()
    assert header(first) == {"id": header(first)["id"], "model_name": "add_sub", "model_version": 1,
                             "request_id": "req-7"}
    assert "request_id" not in header(second) and "parent_id" not in header(second)
    for records in traces.values():
        named = stamps(records)
        assert [name for name, _ in named] == HTTP_NAMES
        times = [ns for _, ns in named]
        assert times == sorted(times) and times[0] > 0


async def test_grpc_request_writes_grpc_timestamps(test_repository: Path, asgi_client, stub_for,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_log_frequency=1) as (server, _http):
        stub = await stub_for(server)
        request = pb.ModelInferRequest(model_name="add_sub", id="g1")
        for name in ("INPUT0", "INPUT1"):
            request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
            request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
        await stub.ModelInfer(request)
        first = Path(f"{path}.0")
        await until(first.exists, "the gRPC trace written when the RPC is done")
    (records,) = by_id(json.loads(first.read_text())).values()
    assert header(records)["request_id"] == "g1"
    assert [name for name, _ in stamps(records)] == [
        "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", *HTTP_NAMES[2:-2],
        "GRPC_SEND_START", "GRPC_SEND_END"]


async def test_rate_and_count_trace_every_nth_until_the_count_is_used(
        test_repository: Path, asgi_client, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_rate=2, trace_count=2) as (_server, http):
        for number in range(6):
            await infer(http, id=f"r{number}")
        # the count ran out: the collected traces are in PATH.0 before shutdown (Triton)
        traces = by_id(json.loads(Path(f"{path}.0").read_text()))
        assert [header(r)["request_id"] for r in traces.values()] == ["r1", "r3"]
        assert (await http.get("/v2/trace/setting")).json()["trace_count"] == "0"
    assert not path.exists()


async def test_log_frequency_rolls_files(test_repository: Path, asgi_client, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_log_frequency=2) as (_server, http):
        for _ in range(5):
            await infer(http)
        assert [len(by_id(json.loads(Path(f"{path}.{i}").read_text()))) for i in (0, 1)] == [2, 2]
        assert not Path(f"{path}.2").exists()
    assert len(by_id(json.loads(Path(f"{path}.2").read_text()))) == 1  # the rest, at shutdown
    assert not path.exists()


async def test_tensors_level_records_inputs_and_outputs(test_repository: Path, asgi_client, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_level=["TENSORS"]) as (_server, http):
        await infer(http)
    (records,) = by_id(json.loads(path.read_text())).values()
    assert stamps(records) == [] and all("model_name" not in r for r in records)  # TENSORS only
    tensors = [(r["activity"], r["tensor"]) for r in records]
    assert tensors == [
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": ",".join(["0.5"] * 16), "shape": "1,16", "dtype": "FP32"}),
        ("TENSOR_QUEUE_INPUT", {"name": "INPUT1", "data": ",".join(["2"] * 16), "shape": "1,16", "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT0", "data": ",".join(["2.5"] * 16), "shape": "1,16",
                                   "dtype": "FP32"}),
        ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT1", "data": ",".join(["-1.5"] * 16), "shape": "1,16",
                                   "dtype": "FP32"}),
    ]


def tensor_record(name: str, array: np.ndarray) -> Record:
    record = tensor_record_or_none(name, array)
    assert record is not None
    return record


def test_tensor_data_is_written_as_triton_streams_it() -> None:
    assert tensor_record("B", np.array([[True, False]]))["data"] == "1,0"
    assert tensor_record("S", np.array([b"ab", b"c"], dtype=object)) == {
        "name": "S", "data": '"ab","c"', "shape": "2", "dtype": "BYTES"}
    assert tensor_record("F", np.array([0.1, 1e-7, 123456789.0], np.float32))["data"] == "0.1,1e-07,1.23457e+08"
    assert tensor_record("I", np.array([-3, 4], np.int64))["data"] == "-3,4"
    assert tensor_record("H", np.array([1.5], np.float16))["data"] == ""  # Triton leaves FP16 empty


async def test_ensemble_steps_are_child_traces(tmp_path: Path, asgi_client) -> None:
    repo = build_ensemble_repository(tmp_path / "repo")
    path = tmp_path / "trace.json"
    async with traced(repo, asgi_client, path) as (_server, http):
        await infer(http, "ens_chain", PAIR)
    traces = by_id(json.loads(path.read_text()))
    headers = {trace_id: header(records) for trace_id, records in traces.items()}
    (top,) = [h for h in headers.values() if h["model_name"] == "ens_chain"]
    assert "parent_id" not in top
    children = sorted((h["model_name"], h["parent_id"]) for h in headers.values() if h is not top)
    assert children == [("add_sub", top["id"]), ("identity16", top["id"])]
    assert [n for n, _ in stamps(traces[top["id"]])] == [
        "HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "REQUEST_END",
        "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
    for trace_id, records in traces.items():
        if trace_id != top["id"]:
            assert [n for n, _ in stamps(records)] == HTTP_NAMES[2:-3]


async def test_per_model_settings_take_effect(test_repository: Path, asgi_client, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_level=[]) as (_server, http):
        await infer(http)  # tracing OFF: nothing sampled
        on = await http.post("/v2/models/add_sub/trace/setting", json={"trace_level": ["TIMESTAMPS"]})
        assert on.status_code == 200 and on.json()["trace_level"] == ["TIMESTAMPS"]
        await infer(http, id="traced")
        await infer(http, "identity_fp32", {"inputs": [ADD_SUB["inputs"][0] | {"name": "INPUT0"}]}, id="global-off")
        await http.post("/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"]})
        await http.post("/v2/models/add_sub/trace/setting", json={"trace_level": ["OFF"]})
        await infer(http, id="model-off")
        await infer(http, "identity_fp32", {"inputs": [ADD_SUB["inputs"][0]]}, id="global-on")
        # log_frequency updated at runtime: the next trace of the global setting is written at once
        await http.post("/v2/trace/setting", json={"log_frequency": "1"})
        await infer(http, "identity_fp32", {"inputs": [ADD_SUB["inputs"][0]]}, id="rolled")
        rolled = by_id(json.loads(Path(f"{path}.0").read_text()))
        assert [header(r)["request_id"] for r in rolled.values()] == ["rolled"]
    written = [header(r)["request_id"] for r in by_id(json.loads(path.read_text())).values()]
    assert written == ["traced", "global-on"]


async def test_grpc_trace_setting_turns_a_model_on(test_repository: Path, asgi_client, stub_for,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_level=[]) as (server, http):
        stub = await stub_for(server)
        setting = pb.TraceSettingRequest(model_name="add_sub")
        setting.settings["trace_level"].value.append("TIMESTAMPS")
        response = await stub.TraceSetting(setting)
        assert list(response.settings["trace_level"].value) == ["TIMESTAMPS"]
        await infer(http, id="on")
        await infer(http, "identity_fp32", {"inputs": [ADD_SUB["inputs"][0]]}, id="off")
    assert [header(r)["request_id"] for r in by_id(json.loads(path.read_text())).values()] == ["on"]


async def test_perf_analyzer_trace_options_drive_the_setting_api(
        test_repository: Path, asgi_client, tmp_path: Path) -> None:
    """perf_analyzer ``--trace-level TIMESTAMPS --trace-rate 1 --trace-count 3 --log-frequency 3``
    sends this body to the model's trace setting (its HTTP client's UpdateTraceSettings)."""
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_level=[]) as (_server, http):
        body = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "3", "log_frequency": "3"}
        response = await http.post("/v2/models/add_sub/trace/setting", json=body)
        assert response.status_code == 200
        assert response.json() == {**body, "trace_file": str(path), "trace_mode": "triton"}
        for _ in range(4):
            await infer(http)
        assert (await http.get("/v2/models/add_sub/trace/setting")).json()["trace_count"] == "0"
    assert len(by_id(json.loads(Path(f"{path}.0").read_text()))) == 3
    assert not Path(f"{path}.1").exists() and not path.exists()


async def test_tracing_off_writes_nothing(test_repository: Path, asgi_client, tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_level=["OFF", "TIMESTAMPS"]) as (server, http):
        assert not server.tracer.enabled  # any OFF disables (tritonserver's explicit OFF)
        await infer(http)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("level", [["TIMESTAMPS"], ["TIMESTAMPS", "TENSORS"]])
async def test_failed_request_is_traced_with_its_error(test_repository: Path, asgi_client, tmp_path: Path,
                                                       level: list[str]) -> None:
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path, trace_level=level) as (_server, http):
        bad = {"inputs": [ADD_SUB["inputs"][0]]}  # INPUT1 missing: refused by validation
        assert (await http.post("/v2/models/add_sub/infer", json=bad)).status_code == 400
    (records,) = by_id(json.loads(path.read_text())).values()
    assert [n for n, _ in stamps(records)] == ["HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START",
                                               "HTTP_SEND_END"]


async def test_opentelemetry_mode_without_the_sdk_fails_at_start(test_repository: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    options = ServerOptions(model_repository=[str(test_repository)], trace_mode="opentelemetry")
    server = Server(options)
    with pytest.raises(InvalidArgument, match=r"needs the OpenTelemetry SDK: pip install 'workbench\[trace\]'"):
        await server.start()


async def test_the_trace_file_is_a_json_list_while_the_server_runs(
        test_repository: Path, asgi_client, tmp_path: Path) -> None:
    """``log-frequency=0`` and no count: each trace is in ``PATH`` once it completes, and the file
    is a complete JSON list after each (Triton holds them until shutdown; the file it then
    writes is the same list)."""
    path = tmp_path / "trace.json"
    async with traced(test_repository, asgi_client, path) as (_server, http):
        await infer(http, id="first")
        assert [header(r)["request_id"] for r in by_id(json.loads(path.read_text())).values()] == ["first"]
        await infer(http, id="second")
        running = path.read_bytes()
        assert [header(r)["request_id"] for r in by_id(json.loads(running)).values()] == ["first", "second"]
    assert path.read_bytes() == running  # shutdown leaves the same list
