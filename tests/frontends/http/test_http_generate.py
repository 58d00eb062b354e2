"""Triton's generate extension: /generate (one JSON object) and /generate_stream (SSE).

The engine, schedulers and the real v2 app are used; the ``repeat`` backend (decoupled: one
response per element of ``IN``, from another thread) and the ``fake`` backend (one response)
sit at the backend boundary. Texts and codes are tritonserver's ``HandleGenerate``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
import pytest_asyncio

from workbench import Server, ServerOptions
from workbench.backends.registry import register_backend
from workbench.frontends.http.generate import ONE_RESPONSE
from workbench.testing.fake_backend import FakeBackend, write_fake_model
from workbench.testing.http_listener import http_listener
from workbench.testing.repeat_backend import RepeatBackend, write_repeat_model

SSE = "text/event-stream; charset=utf-8"
#: a response sent into a closed event loop (the client and the server gone) must be dropped
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def write_models(repo: Path) -> Path:
    register_backend("repeat", RepeatBackend)
    register_backend("fake", FakeBackend)
    write_repeat_model(repo, "repeat")
    write_repeat_model(repo, "repeat_slow", delay_ms=100)
    write_fake_model(repo, "fake", count=1)
    return repo


@pytest_asyncio.fixture
async def server(tmp_path: Path):
    options = ServerOptions(model_repository=[str(write_models(tmp_path))], http_max_input_size=4096,
                            http_restricted_api=[])
    async with Server(options) as engine:
        yield engine


def events(text: str) -> list[dict]:
    """The ``data:`` events of an SSE body (each ``data: {...}`` then a blank line)."""
    assert text.endswith("\n\n"), text
    chunks = text[:-2].split("\n\n")
    assert all(c.startswith("data: ") for c in chunks), text
    return [orjson.loads(c[len("data: "):]) for c in chunks]


async def test_generate_maps_members_to_inputs_and_outputs_to_members(server: Server, asgi_client) -> None:
    async with asgi_client(server) as http:
        one = await http.post("/v2/models/repeat/generate", json={"IN": [5], "id": "7", "note": "x"})
        versioned = await http.post("/v2/models/repeat/versions/1/generate", json={"IN": 6})
    assert one.status_code == 200 and one.headers["content-type"] == "application/json"
    assert one.json() == {"model_name": "repeat", "model_version": "1", "id": "7", "OUT": 5, "IDX": 0}
    assert versioned.status_code == 200 and versioned.json()["OUT"] == 6


async def test_generate_stream_sends_one_event_per_response(server: Server, asgi_client) -> None:
    async with asgi_client(server) as http:
        streamed = await http.post("/v2/models/repeat/generate_stream", json={"IN": [7, 8, 9]})
        nested = await http.post("/v2/models/repeat/generate_stream", json={"parameters": {"IN": [1, 2]}})
        none = await http.post("/v2/models/repeat/generate_stream", json={"IN": []})
    assert streamed.status_code == 200 and streamed.headers["content-type"] == SSE
    assert [(e["OUT"], e["IDX"]) for e in events(streamed.text)] == [(7, 0), (8, 1), (9, 2)]
    assert [e["OUT"] for e in events(nested.text)] == [1, 2]
    assert none.status_code == 200 and none.text == ""


async def test_a_non_decoupled_model_streams_its_one_response(server: Server, asgi_client) -> None:
    async with asgi_client(server) as http:
        r = await http.post("/v2/models/fake/generate_stream", json={"INPUT0": [2.5]})
    assert r.status_code == 200 and r.headers["content-type"] == SSE
    [event] = events(r.text)
    assert event["model_name"] == "fake" and isinstance(event["OUTPUT0"], float)


async def test_generate_refuses_other_than_one_response_with_tritons_text(server: Server, asgi_client) -> None:
    async with asgi_client(server) as http:
        many = await http.post("/v2/models/repeat/generate", json={"IN": [1, 2]})
        zero = await http.post("/v2/models/repeat/generate", json={"IN": []})
        after = await http.post("/v2/models/repeat/generate", json={"IN": [3]})
    for r in (many, zero):
        assert (r.status_code, r.json()) == (501, {"error": ONE_RESPONSE})
        assert r.headers["content-type"] == "application/json"
    assert after.status_code == 200  # the model keeps serving


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
async def test_refused_requests_are_json_errors_with_tritons_texts(server: Server, asgi_client, route: str) -> None:
    cases = [
        ("nope", b'{"IN": [1]}', 404, "Request for unknown model: 'nope' is not found"),
        ("repeat", b'{"IN": [1', 400, "failed to parse the request JSON buffer"),
        ("repeat", b"[1]", 400, "failed to parse the request JSON buffer"),
        ("repeat", b'{"other": 1}', 400, "expected 1 inputs but got 0 inputs for model 'repeat'"),
        ("repeat", b'{"IN": "1"}', 400, "attempt to access JSON non-signed-integer as signed-integer"),
        ("repeat", b'{"IN": {"a": 1}}', 400, "attempt to access JSON non-signed-integer as signed-integer"),
        ("repeat", b'{"IN": [1], "IN": [2]}', 400, "input 'IN' already exists in request"),
        ("repeat", b'{"IN": [1], "P": {"a": 1}}', 400, "parameter 'P' has invalid type. It should be"),
        ("repeat", b'{"IN": [1], "parameters": 1}', 400, "Expected JSON object for keyword: 'parameters'"),
        ("repeat", b'{"IN": [1], "parameters": {"n": [1]}}', 400,
         "Converting keyword: 'parameters': parameter 'n' has invalid type."),
        ("repeat", b'{"IN": [1], "id": 5}', 400, "Unable to parse 'id': attempt to access JSON non-string"),
        ("repeat", b'{"IN": [1], "triton_x": 1}', 400, "parameter keys starting with 'triton_' are reserved"),
        ("repeat", orjson.dumps({"IN": [1] * 1100}), 400,
         "request size of 0 bytes with input 'IN' of size 4400 bytes exceeds the maximum allowed input "
         "size of 4096. Use --http-max-input-size to increase the limit."),
        ("repeat", orjson.dumps({"IN": [1], "pad": "x" * 5000}), 400,
         "bytes exceeds the maximum allowed input size of 4096 bytes. Use --http-max-input-size"),
    ]
    async with asgi_client(server) as http:
        for model, body, status, text in cases:
            r = await http.post(f"/v2/models/{model}/{route}", content=body,
                                headers={"content-type": "application/json"})
            assert r.status_code == status, (body, r.text)
            assert r.headers["content-type"] == "application/json", body
            assert text in r.json()["error"], (body, r.text)
        wrong_method = await http.get(f"/v2/models/repeat/{route}")
        gzip = await http.post(f"/v2/models/repeat/{route}", content=b"{}", headers={"content-encoding": "gzip"})
    assert (wrong_method.status_code, wrong_method.json()) == (405, {"error": "Method Not Allowed"})
    assert (gzip.status_code, gzip.json()["error"]) == (
        400, "Unsupported content-encoding, only 'identity' is supported.")


async def test_a_models_error_response_is_an_sse_error_event(server: Server, asgi_client) -> None:
    async with asgi_client(server) as http:
        r = await http.post("/v2/models/repeat/generate_stream", json={"IN": [4, -1, 5]})
        one = await http.post("/v2/models/repeat/generate", json={"IN": [-1]})
    assert r.status_code == 200 and r.headers["content-type"] == SSE
    first, error = events(r.text)
    assert first["OUT"] == 4 and error == {"error": "negative value -1 at 1"}
    assert (one.status_code, one.json()) == (400, {"error": "negative value -1 at 0"})


async def test_generate_is_in_the_restricted_inference_group(tmp_path: Path, asgi_client) -> None:
    options = ServerOptions(model_repository=[str(write_models(tmp_path))],
                            http_restricted_api=["inference:Infer-Key=s3cret"])
    async with Server(options) as engine, asgi_client(engine) as http:
        for route in ("generate", "generate_stream"):
            refused = await http.post(f"/v2/models/repeat/{route}", json={"IN": [1]})
            allowed = await http.post(f"/v2/models/repeat/{route}", json={"IN": [1]},
                                      headers={"Infer-Key": "s3cret"})
            assert (refused.status_code, refused.json()) == (
                403, {"error": "This API is restricted, expecting header 'infer-key'"})
            assert allowed.status_code == 200


async def test_a_client_gone_mid_stream_leaves_nothing_waiting(tmp_path: Path) -> None:
    """The client reads one event of 40 (100 ms apart) and disconnects: its request task ends
    at once (the engine drops the rest) instead of streaming 4 s into a closed socket, and the
    next client is served."""
    body = orjson.dumps({"IN": list(range(40))})
    head = (b"POST /v2/models/repeat_slow/generate_stream HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body))
    async with http_listener(ServerOptions(model_repository=[str(write_models(tmp_path))])) as clients:
        reader, writer = await clients.connect()
        writer.write(head + body)
        async def first_event() -> bytes:
            received = b""
            while b"data: " not in received:
                received += await reader.read(4096)
            return received

        received = await asyncio.wait_for(first_event(), 10)  # asyncio.timeout is Python 3.11+
        assert b"200 OK" in received and b"text/event-stream" in received
        writer.close()
        tasks = clients.service.server_state.tasks

        async def drained() -> None:
            while tasks:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(drained(), 2)  # well before the model's remaining 3.9 s of responses
        reader, writer = await clients.connect()
        writer.write(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
