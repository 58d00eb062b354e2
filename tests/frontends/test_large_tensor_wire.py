"""Large tensors through ``workbench serve`` as a real process (uvloop, uvicorn, grpc.aio): the
HTTP body sent chunk by chunk (JSON header, then each binary output unjoined) and the gRPC
answer serialized by raw_wire are the bytes the joined / protobuf encoders give."""

from __future__ import annotations

import socket
from collections.abc import MutableMapping
from typing import Any

import grpc
import numpy as np
import orjson
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from workbench.frontends.grpc.codec import encode_response as grpc_encode
from workbench.frontends.http.codec import encode_response as http_encode
from workbench.frontends.http.codec import encode_response_chunks
from workbench.testing.models import build_datatype_repository
from workbench.testing.process import ServerProcess

DATA = np.random.default_rng(1).random(4 * 1024 * 1024 // 4, dtype=np.float32).reshape(1, -1)  # 4 MiB


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    repo = build_datatype_repository(tmp_path_factory.mktemp("large_wire"))
    process = ServerProcess([f"--model-repository={repo}", "--allow-metrics=false",
                             "--model-control-mode=explicit", "--load-model=identity_fp32"])
    yield process
    process.stop()


def _http_post(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[bytes, bytes]:
    """One raw HTTP/1.1 request; the response's head and exactly Content-Length body bytes."""
    host, port = url.removeprefix("http://").split(":")
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + body)
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        response_head, rest = received.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":")[1]) for line in response_head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            chunk = sock.recv(1 << 20)
            assert chunk, "connection closed before the whole body arrived"
            rest += chunk
    return response_head, rest


def _expected() -> tuple[InferenceResponse, InferenceRequest]:
    response = InferenceResponse("identity_fp32", "1", [Tensor("OUTPUT0", "FP32", DATA, {"binary_data": True})],
                                 id="big")
    request = InferenceRequest("identity_fp32", [], id="big",
                               outputs=[RequestedOutput("OUTPUT0", {"binary_data": True})])
    return response, request


def test_http_chunks_are_the_body_unjoined_with_views_of_the_outputs() -> None:
    chunks, json_length = encode_response_chunks(*_expected())
    assert (b"".join(chunks), json_length) == http_encode(*_expected())
    assert len(chunks) == 2 and len(chunks[0]) == json_length
    assert np.shares_memory(np.frombuffer(chunks[1], np.float32), DATA)  # not copied


def test_http_binary_output_is_the_joined_bodys_bytes(served) -> None:
    header = orjson.dumps({"id": "big", "inputs": [{
        "name": "INPUT0", "datatype": "FP32", "shape": list(DATA.shape),
        "parameters": {"binary_data_size": DATA.nbytes}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
    head, body = _http_post(served.url, "/v2/models/identity_fp32/infer",
                            {"inference-header-content-length": str(len(header))},
                            header + DATA.tobytes())
    assert head.startswith(b"HTTP/1.1 200 "), head
    expected, json_length = http_encode(*_expected())
    assert f"inference-header-content-length: {json_length}".encode() in head.lower()
    assert body == expected


def test_grpc_answer_is_protobufs_bytes(served) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=DATA.shape)
    request = pb.ModelInferRequest(model_name="identity_fp32", id="big", inputs=[tensor],
                                   raw_input_contents=[DATA.tobytes()])
    with grpc.insecure_channel(served.grpc_url, options=[("grpc.max_receive_message_length", -1)]) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=pb.ModelInferRequest.SerializeToString,
                                    response_deserializer=None)  # the raw answer bytes
        answer = infer(request, timeout=30)
        assert isinstance(answer, bytes)
        assert answer == grpc_encode(_expected()[0]).SerializeToString()
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ModelInfer(request, timeout=30).raw_output_contents[0] == DATA.tobytes()


async def test_a_small_chunked_body_is_one_body_message_a_large_one_is_not_joined() -> None:
    """A small binary response (JSON header + output) is one body message, so the head and the
    body leave in one send; a large one goes out chunk by chunk, its output never copied."""
    from workbench.frontends.http.infer_asgi import JOIN_BELOW_BYTES, _respond

    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    small = np.arange(16, dtype=np.float32)
    await _respond(send, 200, [], [b'{"outputs":[]}', small.data.cast("B")])
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert len(bodies) == 1 and bodies[0]["body"] == b'{"outputs":[]}' + small.tobytes()
    sent.clear()
    large = DATA.data.cast("B")
    assert len(large) >= JOIN_BELOW_BYTES
    await _respond(send, 200, [], [b"{}", large])
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert [len(m["body"]) for m in bodies] == [2, len(large)] and bodies[1]["body"] is large
