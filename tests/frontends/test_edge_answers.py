"""What each request edge answers where the edges used to differ: one body reader (the generate
route refused an over-limit body only after reading up to twice the limit), one error boundary
(a defect in a FastAPI v2 route or an OpenAI route reached the client as Starlette's plain-text
500, or no answer); checked on the real engine, and on real uvicorn listeners for what only a
connection shows. The Jupyter extension's edge: tests/jupyter/test_jupyter_body_limit.py."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
import httpx
import orjson
import pytest
from fastapi import FastAPI

from workbench import (
    AlreadyExists,
    Cancelled,
    DecoupledNotSupported,
    InternalError,
    InvalidArgument,
    ModelNotFound,
    Server,
    ServerNotReady,
    ServerOptions,
    Unsupported,
)
from workbench.frontends.error_boundary import (
    DECOUPLED_HTTP,
    DECOUPLED_MODEL_INFER,
    failure,
    grpc_failure,
    http_failure,
)
from workbench.frontends.http import create_app
from workbench.frontends.openai.errors import OpenAIRoute
from workbench.testing.attack import chunk
from workbench.testing.attack import request_head as head
from workbench.testing.http_listener import http_listener

LIMIT = 4096
TOO_LARGE = ("request JSON size of {} bytes exceeds the maximum allowed input size of 4096 bytes. "
             "Use --http-max-input-size to increase the limit.")


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict]:
    """One response: (status, JSON body)."""
    head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(head_bytes.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = await asyncio.wait_for(reader.readexactly(length), 10)
    return int(head_bytes.split(b" ")[1]), orjson.loads(body)


def listening(repository: Path):
    return http_listener(ServerOptions(model_repository=[str(repository)], http_max_input_size=LIMIT,
                                       http_keepalive_timeout=60.0))


@pytest.mark.parametrize("path", ["/v2/models/identity_fp32/generate",
                                  "/v2/models/identity_fp32/generate_stream",
                                  "/v2/models/identity_fp32/infer"])
async def test_an_announced_body_over_the_limit_is_refused_before_any_of_it_is_sent(
        test_repository: Path, path: str) -> None:
    """Every edge refuses at the Content-Length, with Triton's text, and ends the connection
    (generate used to wait for up to twice the limit of body before it answered)."""
    async with listening(test_repository) as clients:
        reader, writer = await clients.connect()
        writer.write(head("POST", path, b"content-length: 536870912"))  # and no byte of the body
        assert await answer(reader) == (400, {"error": TOO_LARGE.format(536870912)})
        assert await asyncio.wait_for(reader.read(), 10) == b""


@pytest.mark.parametrize("path", ["/v2/models/identity_fp32/generate", "/v2/models/identity_fp32/infer"])
async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(test_repository: Path,
                                                                        path: str) -> None:
    async with listening(test_repository) as clients:
        reader, writer = await clients.connect()
        writer.write(head("POST", path, b"transfer-encoding: chunked"))
        writer.write(chunk(b" " * 3000) + chunk(b" " * 3000))  # and no last chunk: never ends
        status, error = await answer(reader)
        assert status == 400, error
        assert await asyncio.wait_for(reader.read(), 10) == b""


def fastapi_app(asgi) -> FastAPI:
    """The FastAPI app at the end of ``create_app``'s chain (guard -> infer -> generate ->
    body limits -> FastAPI)."""
    while not isinstance(asgi, FastAPI):
        asgi = asgi.app
    return asgi


async def defect() -> None:
    """A route with a bug in it (what no engine error covers)."""
    raise ZeroDivisionError("division by zero")


async def test_a_defect_in_a_v2_route_is_answered_500_in_tritons_shape(
        test_repository: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Starlette answered it ``Internal Server Error`` as text/plain (and re-raised it); the
    infer path already answered its own defects ``{"error": "internal error: ..."}``."""
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        app = create_app(server)
        fastapi_app(app).add_api_route("/v2/defect", defect, methods=["GET"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            with caplog.at_level(logging.ERROR, "workbench.frontends.error_boundary"):
                response = await client.get("/v2/defect")
            assert response.status_code == 500
            assert response.headers["content-type"] == "application/json"
            assert response.json() == {"error": "internal error: ZeroDivisionError: division by zero"}
            assert "ZeroDivisionError" in caplog.text  # the traceback is logged, once
            # engine errors and Starlette's own keep their statuses, in the same shape
            missing = await client.get("/v2/models/nope")
            assert missing.status_code == 404 and set(missing.json()) == {"error"}
            assert (await client.get("/v2/no/such/path")).json() == {"error": "Not Found"}


async def test_a_defect_in_an_openai_route_is_answered_500_in_openais_shape(test_repository: Path) -> None:
    """The OpenAI routes answered only their own and engine errors in OpenAI's shape; a defect
    went out as Starlette's plain-text 500."""
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        app = create_app(server)
        fastapi_app(app).router.routes.insert(0, OpenAIRoute("/v1/defect", defect, methods=["GET"]))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            response = await client.get("/v1/defect")
        assert response.status_code == 500
        assert response.json() == {"error": {
            "message": "internal error: ZeroDivisionError: division by zero", "type": "server_error",
            "param": None, "code": None}}


@pytest.mark.parametrize(("error", "http", "code"), [
    (InvalidArgument("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
    (ModelNotFound("x"), 404, grpc.StatusCode.NOT_FOUND),
    (ServerNotReady("x"), 503, grpc.StatusCode.UNAVAILABLE),
    (Unsupported("x"), 501, grpc.StatusCode.UNIMPLEMENTED),
    (InternalError("x"), 500, grpc.StatusCode.INTERNAL),
    (AlreadyExists("x"), 400, grpc.StatusCode.ALREADY_EXISTS),
    (Cancelled("x"), 400, grpc.StatusCode.CANCELLED),
])
def test_the_boundary_answers_tritons_status_for_each_code(error, http: int, code: grpc.StatusCode) -> None:
    """HTTP as Triton's HttpCodeFromError, gRPC as its grpc_utils mapping; the message kept."""
    assert http_failure(error) == (http, b'{"error":"x"}')
    assert grpc_failure(error) == (code, "x")
    assert (failure(error).http_status, failure(error).grpc_code) == (http, code)


def test_the_boundary_words_a_decoupled_refusal_per_protocol() -> None:
    error = DecoupledNotSupported("one response expected")
    assert http_failure(error) == (501, orjson.dumps({"error": DECOUPLED_HTTP}))
    assert grpc_failure(error) == (grpc.StatusCode.UNIMPLEMENTED, DECOUPLED_MODEL_INFER)
