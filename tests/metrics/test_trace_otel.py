"""``--trace-config mode=opentelemetry``: spans exported over OTLP/HTTP to a receiver this test
starts on loopback (an ``http.server`` decoding ``ExportTraceServiceRequest``), with the span
names, attributes and events of Triton's ``tracer.cc``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from workbench import Server, ServerOptions
from workbench.testing.ensembles import build_ensemble_repository

pytest.importorskip("opentelemetry.sdk.trace", reason="the 'trace' extra is not installed")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
trace_service_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

PAIR = {"inputs": [{"name": "IN0", "datatype": "FP32", "shape": [1, 16], "data": [3.0] * 16},
                   {"name": "IN1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}]}


class Receiver:
    """An OTLP/HTTP trace receiver: every span POSTed to ``/v1/traces``, with its resource."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict, Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's method name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                export = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.paths.append(self.path)
                    for resource_spans in export.resource_spans:
                        resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend((resource, span) for span in scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        return Handler


@contextlib.contextmanager
def receiver_on_loopback() -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), receiver.handler())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver, f"http://127.0.0.1:{httpd.server_address[1]}/v1/traces"
    finally:
        httpd.shutdown()
        httpd.server_close()


def attributes(span: Any) -> dict:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = value.int_value if value.HasField("int_value") else value.string_value
    return values


async def test_spans_reach_an_otlp_http_receiver(tmp_path: Path, asgi_client) -> None:
    repo = build_ensemble_repository(tmp_path / "repo")
    with receiver_on_loopback() as (receiver, url):
        options = ServerOptions(model_repository=[str(repo)], trace_mode="opentelemetry", trace_rate=1,
                                trace_level=["TIMESTAMPS"], trace_opentelemetry_url=url,
                                trace_opentelemetry_resource=["service.version=7"])
        async with Server(options) as server, asgi_client(server) as http:
            response = await http.post("/v2/models/ens_chain/infer", json={**PAIR, "id": "otel-1"})
            assert response.status_code == 200
        # stopping the server shut the span processor down: every span was exported
        assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    spans = {span.name: (resource, span) for resource, span in receiver.spans}
    assert sorted(span.name for _, span in receiver.spans) == [
        "InferRequest", "add_sub", "compute", "compute", "ens_chain", "identity16"]
    resource, root = spans["InferRequest"]
    assert resource["service.name"] == "triton-inference-server" and resource["service.version"] == "7"
    assert [e.name for e in root.events] == ["HTTP_RECV_START", "HTTP_RECV_END", "INFER_RESPONSE_COMPLETE",
                                             "HTTP_SEND_START", "HTTP_SEND_END"]
    _, ensemble = spans["ens_chain"]
    assert ensemble.parent_span_id == root.span_id and ensemble.trace_id == root.trace_id
    ensemble_attributes = attributes(ensemble)
    assert ensemble_attributes == {"triton.model_name": "ens_chain", "triton.model_version": 1,
                                   "triton.trace_id": ensemble_attributes["triton.trace_id"],
                                   "triton.trace_parent_id": 0, "triton.request_id": "otel-1"}
    assert [e.name for e in ensemble.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    _, step = spans["add_sub"]
    assert step.parent_span_id == ensemble.span_id  # a step's span is inside its ensemble's
    assert attributes(step)["triton.trace_parent_id"] == ensemble_attributes["triton.trace_id"]
    computes = [span for _, span in receiver.spans if span.name == "compute"]
    assert {c.parent_span_id for c in computes} == {step.span_id, spans["identity16"][1].span_id}
    assert [e.name for e in computes[0].events] == ["COMPUTE_START", "COMPUTE_INPUT_END",
                                                   "COMPUTE_OUTPUT_START", "COMPUTE_END"]
    assert all(s.kind == s.SPAN_KIND_SERVER for _, s in receiver.spans)
    assert step.start_time_unix_nano >= ensemble.start_time_unix_nano
    assert step.end_time_unix_nano <= ensemble.end_time_unix_nano <= root.end_time_unix_nano


CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


async def test_a_propagated_traceparent_makes_the_request_a_child_of_the_callers_span(
        tmp_path: Path, asgi_client, stub_for) -> None:
    """``rate=0``: only requests with an OpenTelemetry context are traced (Triton's
    ``force_sample``), over HTTP headers and gRPC metadata; ``InferRequest`` is a child of the
    caller's span, in the caller's trace."""
    import numpy as np
    from tritonclient.grpc import service_pb2 as pb

    repo = build_ensemble_repository(tmp_path / "repo")
    with receiver_on_loopback() as (receiver, url):
        options = ServerOptions(model_repository=[str(repo)], trace_mode="opentelemetry", trace_rate=0,
                                trace_level=["TIMESTAMPS"], trace_opentelemetry_url=url)
        async with Server(options) as server, asgi_client(server) as http:
            body = {"inputs": [{**PAIR["inputs"][0], "name": "INPUT0"}, {**PAIR["inputs"][1], "name": "INPUT1"}]}
            plain = await http.post("/v2/models/add_sub/infer", json={**body, "id": "plain"})
            carried = await http.post("/v2/models/add_sub/infer", json={**body, "id": "http"},
                                      headers={"traceparent": TRACEPARENT})
            broken = await http.post("/v2/models/add_sub/infer", json={**body, "id": "broken"},
                                     headers={"traceparent": "00-not-a-context"})
            assert {plain.status_code, carried.status_code, broken.status_code} == {200}
            request = pb.ModelInferRequest(model_name="add_sub", id="grpc")
            for name in ("INPUT0", "INPUT1"):
                request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
                request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
            stub = await stub_for(server)
            await stub.ModelInfer(request, metadata=(("traceparent", TRACEPARENT),))
            stream = stub.ModelStreamInfer(metadata=(("traceparent", TRACEPARENT),))
            request.id = "stream"
            await stream.write(request)
            await stream.read()
            await stream.done_writing()
            await stream.read()
    models = [span for _, span in receiver.spans if span.name == "add_sub"]
    assert sorted(attributes(span)["triton.request_id"] for span in models) == ["grpc", "http", "stream"]
    roots = [span for _, span in receiver.spans if span.name == "InferRequest"]
    assert len(roots) == 3
    for root in roots:
        assert root.trace_id.hex() == CALLER_TRACE and root.parent_span_id.hex() == CALLER_SPAN
    assert {span.trace_id.hex() for _, span in receiver.spans} == {CALLER_TRACE}
