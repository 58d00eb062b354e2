"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` and
``/generate_stream``, as a raw ASGI handler in front of the rest of the v2 app.

``/generate`` answers one JSON object for a model that sends exactly one response;
``/generate_stream`` answers Server-Sent Events (``text/event-stream; charset=utf-8``), one
``data: {...}`` event per response as the model sends it. JSON mapping:
:mod:`workbench.frontends.http.generate_mapping`.

Errors follow tritonserver's ``HandleGenerate``: a request refused before it runs answers
``{"error": "..."}`` with Triton's status on both routes; on ``/generate_stream`` a model's
error response is an event ``data: {"error": "..."}`` (status: the first response's); on
``/generate`` zero or several responses answer 501 with Triton's "generate expects model to
produce exactly 1 response, ..." (tritonserver sends it in a 200 body).

Tracing (``--trace-config``), as ``HandleGenerate``: sampled on arrival; ``HTTP_RECV_START`` /
``_END``, the engine's timestamps, ``INFER_RESPONSE_COMPLETE`` per response, ``HTTP_SEND_START``
/ ``_END`` around each response sent; written once the response is complete. A client that
disconnects abandons its request (the engine drops the remaining responses). Docs:
docs/api.md (generate), docs/metrics-tracing.md (Tracing)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any
from urllib.parse import unquote

import orjson

from workbench import InferenceRequest, InferenceResponse, InvalidArgument, Server
from workbench.frontends.error_boundary import failure, http_failure
from workbench.frontends.http.body_limits import body_length, json_too_large, read_within
from workbench.frontends.http.generate_mapping import (
    generate_request,
    generate_response,
    parse_generate_body,
)
from workbench.frontends.http.infer_asgi import (
    ASGIApp,
    DisconnectWatch,
    Receive,
    Scope,
    Send,
    header_carrier,
)
from workbench.tracing import RequestTrace

log = logging.getLogger(__name__)

GENERATE_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/(generate|generate_stream)$")
#: Triton's text when /generate gets other than one response
ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate stream for "
                "model that generates various number of responses")
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
#: bodies this large are parsed on a worker thread
_OFFLOAD_BYTES = 1024 * 1024


class GeneratePath:
    """ASGI app: serves the two generate routes itself, passes every other request to ``app``.

    Args:
        server: the engine.
        app: the ASGI app for everything else.
    """

    def __init__(self, server: Server, app: ASGIApp) -> None:
        self.server = server
        self.app = app
        self.limit = min(server.options.http_max_input_size, server.options.http_max_json_size)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = GENERATE_PATH.match(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _respond_json(send, 405, {"error": "Method Not Allowed"})
            return
        model, version = unquote(match.group(1)), unquote(match.group(2) or "")
        streaming = match.group(3) == "generate_stream"
        trace = None
        tracer = self.server.tracer
        if tracer.enabled:
            recv_start_ns = time.monotonic_ns()
            trace = tracer.sample(model, header_carrier(scope) if tracer.propagates else None)
            if trace is not None:
                trace.stamp("HTTP_RECV_START", recv_start_ns)
        try:
            await self._serve(scope, receive, send, model, version, streaming, trace)
        finally:
            if trace is not None:  # the response is complete (or the client gone)
                trace.release()

    async def _serve(self, scope: Scope, receive: Receive, send: Send, model: str, version: str,
                     streaming: bool, trace: RequestTrace | None) -> None:
        try:
            request = await self._request(scope, receive, model, version, trace)
        except Exception as exc:  # noqa: BLE001  # refused before it ran: the error boundary answers (and logs a bug)
            await _respond_failure(send, *http_failure(exc, scope["path"]), trace)
            return
        if request is None:  # the client left before its body arrived: nobody to answer
            return
        request.trace = trace
        async with DisconnectWatch(receive, scope):  # a client gone: nobody to answer, the rest dropped
            if streaming:
                await self._stream(request, send, trace, scope["path"])
            else:
                await self._one(request, send, trace, scope["path"])

    async def _request(self, scope: Scope, receive: Receive, model: str, version: str,
                       trace: RequestTrace | None) -> InferenceRequest | None:
        """The engine request of the body (Triton's order: the model's metadata first); None
        when the client left before its body arrived."""
        metadata = await self.server.model_metadata(model, version)
        headers = dict(scope["headers"])
        encoding = headers.get(b"content-encoding", b"identity").decode("latin-1").strip().lower()
        if encoding not in ("", "identity"):
            raise InvalidArgument("Unsupported content-encoding, only 'identity' is supported.")
        body = await read_within(receive, self.limit, body_length(scope), json_too_large)
        if body is None:
            return None
        if trace is not None:
            trace.stamp("HTTP_RECV_END", time.monotonic_ns())
        if len(body) >= _OFFLOAD_BYTES:
            members = await asyncio.to_thread(parse_generate_body, body)
        else:
            members = parse_generate_body(body)
        max_input = self.server.options.http_max_input_size
        return generate_request(members, model, version, metadata["inputs"], max_input)

    async def _one(self, request: InferenceRequest, send: Send, trace: RequestTrace | None,
                   where: str) -> None:
        """``/generate``: exactly one response, as one JSON object."""
        answers: list[InferenceResponse] = []
        try:
            async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
                async for response in responses:
                    _response_complete(trace)
                    if _is_response(response):
                        answers.append(response)
        except Exception as exc:  # noqa: BLE001  # the error boundary answers (and logs a bug)
            await _respond_failure(send, *http_failure(exc, where), trace)
            return
        if len(answers) != 1:
            await _respond_json(send, 501, {"error": ONE_RESPONSE}, trace)
            return
        await _respond_json(send, 200, generate_response(answers[0]), trace)

    async def _stream(self, request: InferenceRequest, send: Send, trace: RequestTrace | None,
                      where: str) -> None:
        """``/generate_stream``: one SSE event per response, as it arrives."""
        started = False
        try:
            async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
                async for response in responses:
                    _response_complete(trace)
                    if not _is_response(response):
                        continue
                    status = None if started else 200
                    started = True
                    await _send_event(send, status, generate_response(response), trace)
        except Exception as exc:  # noqa: BLE001  # the error boundary answers (and logs a bug)
            error = failure(exc, where)
            if not started and error.http_status < 500:  # refused before it ran (Triton's error_callback)
                await _respond_json(send, error.http_status, {"error": error.message}, trace)
                return
            await _send_event(send, None if started else error.http_status, {"error": error.message},
                              trace)
            started = True
        if not started:  # no response at all: an empty event stream
            await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        await send({"type": "http.response.body", "body": b""})


def _is_response(response: InferenceResponse) -> bool:
    """False for the empty final response that only closes a decoupled request."""
    return bool(response.outputs) or bool(response.parameters) or not response.final


def _response_complete(trace: RequestTrace | None) -> None:
    """``INFER_RESPONSE_COMPLETE`` for each response the engine gives (Triton's generate
    ``InferResponseComplete`` stamps each response callback, the final empty one included)."""
    if trace is not None:
        trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def _send_event(send: Send, status: int | None, payload: dict[str, Any],
                      trace: RequestTrace | None) -> None:
    """One SSE event (after the response start with ``status``, when given), between
    ``HTTP_SEND_START`` and ``HTTP_SEND_END`` when traced."""
    if trace is not None:
        trace.stamp("HTTP_SEND_START", time.monotonic_ns())
    if status is not None:
        await send({"type": "http.response.start", "status": status, "headers": _SSE})
    await send({"type": "http.response.body", "body": _event(payload), "more_body": True})
    if trace is not None:
        trace.stamp("HTTP_SEND_END", time.monotonic_ns())


async def _respond_json(send: Send, status: int, payload: dict,
                        trace: RequestTrace | None = None) -> None:
    await _respond_failure(send, status, orjson.dumps(payload), trace)


async def _respond_failure(send: Send, status: int, body: bytes, trace: RequestTrace | None) -> None:
    """A complete JSON response (``body``), between ``HTTP_SEND_START`` and ``HTTP_SEND_END``
    when traced."""
    if trace is not None:
        trace.stamp("HTTP_SEND_START", time.monotonic_ns())
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
    if trace is not None:
        trace.stamp("HTTP_SEND_END", time.monotonic_ns())


__all__ = ["GENERATE_PATH", "ONE_RESPONSE", "GeneratePath"]
