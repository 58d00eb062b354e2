"""Traces of streamed requests: gRPC ``ModelStreamInfer`` (one trace per request, Triton's
``stream_infer_handler.cc`` timestamps: ``GRPC_WAITREAD_*`` per read, ``GRPC_SEND_*`` per
response written) and the HTTP generate routes (``http_server.cc`` ``HandleGenerate``: the
``HTTP_*`` timestamps, ``HTTP_SEND_*`` per event of ``/generate_stream``). The engine and
frontends are real; the ``fake`` and ``repeat`` backends sit at the backend boundary."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.repeat_backend import RepeatBackend, write_repeat_model

ENGINE = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
          "COMPUTE_END", "REQUEST_END"]
READ = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
SEND = ["GRPC_SEND_START", "GRPC_SEND_END"]


@contextlib.asynccontextmanager
async def traced(tmp_path: Path) -> AsyncIterator[tuple[Server, Path]]:
    """A server over ``fake`` (one response) and ``repeat_slow`` (decoupled: one response per
    element of ``IN``, 30 ms apart, after ``execute`` returned) tracing every request into
    ``trace.json``; stopped (the file completed) on exit."""
    register_backend("repeat", RepeatBackend)
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    repo = tmp_path / "repo"
    write_fake_model(repo, "fake", count=1)
    write_repeat_model(repo, "repeat_slow", delay_ms=30)
    path = tmp_path / "trace.json"
    options = ServerOptions(model_repository=[str(repo)], trace_file=str(path), trace_level=["TIMESTAMPS"],
                            trace_rate=1, http_restricted_api=[])
    async with Server(options) as server:
        yield server, path


def traces_by_request(path: Path) -> dict[str, list[tuple[str, int]]]:
    """request id -> the (name, ns) timestamps of its trace, in record order."""
    records: dict[int, list[dict]] = defaultdict(list)
    for record in json.loads(path.read_text()):
        records[record["id"]].append(record)
    traces = {}
    for own in records.values():
        (header,) = [r for r in own if "model_name" in r]
        traces[header["request_id"]] = [(t["name"], t["ns"]) for r in own if "timestamps" in r
                                        for t in r["timestamps"]]
    return traces


def names(stamps: list[tuple[str, int]]) -> list[str]:
    return [name for name, _ in stamps]


def fake_request(value: float, request_id: str) -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 1])
    return pb.ModelInferRequest(model_name="fake", id=request_id, inputs=[tensor],
                                raw_input_contents=[np.full((1, 1), value, np.float32).tobytes()])


def repeat_request(values: list[int], request_id: str, empty_final: bool = False) -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="IN", datatype="INT32", shape=[len(values)])
    message = pb.ModelInferRequest(model_name="repeat_slow", id=request_id, inputs=[tensor],
                                   raw_input_contents=[np.array(values, np.int32).tobytes()])
    if empty_final:
        message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message


async def test_each_streamed_grpc_request_is_traced(tmp_path: Path, stub_for) -> None:
    async with traced(tmp_path) as (server, path):
        call = (await stub_for(server)).ModelStreamInfer()
        await call.write(fake_request(1.0, "one"))
        assert not (await call.read()).error_message
        await call.write(repeat_request([4, 5], "two"))
        assert [(await call.read()).infer_response.id for _ in range(2)] == ["two", "two"]
        await call.write(repeat_request([6], "final", empty_final=True))  # the empty final response sent too
        assert [(await call.read()).infer_response.parameters["triton_final_response"].bool_param
                for _ in range(2)] == [False, True]
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
    traces = traces_by_request(path)
    assert sorted(traces) == ["final", "one", "two"]  # one trace per request
    assert names(traces["one"]) == [*READ, *ENGINE, "INFER_RESPONSE_COMPLETE", *SEND]
    # per response written: the empty final response "two" did not ask for is not sent
    assert names(traces["two"]) == [*READ, *ENGINE, "INFER_RESPONSE_COMPLETE", *SEND, *SEND]
    assert names(traces["final"]) == [*READ, *ENGINE, "INFER_RESPONSE_COMPLETE", *SEND, *SEND]
    for stamps in traces.values():
        times = [ns for _, ns in stamps]
        assert times == sorted(times)
    # a request's read is waited for from the previous request's read on (Triton's next Read)
    assert dict(traces["two"])["GRPC_WAITREAD_START"] >= dict(traces["one"])["GRPC_WAITREAD_END"]
    assert dict(traces["two"])["GRPC_WAITREAD_END"] > dict(traces["one"])["GRPC_SEND_END"]


async def test_a_failed_streamed_request_is_traced_with_its_error_response(tmp_path: Path, stub_for) -> None:
    async with traced(tmp_path) as (server, path):
        call = (await stub_for(server)).ModelStreamInfer()
        bad = fake_request(1.0, "bad")
        bad.inputs[0].datatype = "INT32"  # refused by validation: the error response is sent
        await call.write(bad)
        assert (await call.read()).error_message
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
    records = json.loads(path.read_text())  # refused before it reached the model: no header record
    assert len({r["id"] for r in records}) == 1 and all("model_name" not in r for r in records)
    assert [t["name"] for r in records for t in r["timestamps"]] == [*READ, *SEND]


async def test_generate_routes_are_traced(tmp_path: Path, asgi_client) -> None:
    async with traced(tmp_path) as (server, path), asgi_client(server) as http:
        one = await http.post("/v2/models/fake/generate", json={"INPUT0": [2.5], "id": "g"})
        assert one.status_code == 200
        streamed = await http.post("/v2/models/repeat_slow/generate_stream", json={"IN": [7, 8], "id": "s"})
        assert streamed.status_code == 200 and streamed.text.count("data: ") == 2
    traces = traces_by_request(path)
    http_send = ["HTTP_SEND_START", "HTTP_SEND_END"]
    complete = "INFER_RESPONSE_COMPLETE"
    assert names(traces["g"]) == ["HTTP_RECV_START", "HTTP_RECV_END", *ENGINE, complete, *http_send]
    # Triton stamps each response callback, the final empty one of a decoupled model included
    assert names(traces["s"]) == ["HTTP_RECV_START", "HTTP_RECV_END", *ENGINE, complete, *http_send,
                                  complete, *http_send, complete]
    for stamps in traces.values():
        times = [ns for _, ns in stamps]
        assert times == sorted(times)
