"""The infer route as a raw ASGI handler in front of the FastAPI app.

``POST /v2/models/{m}[/versions/{v}]/infer`` is the one hot path: handling it
before Starlette's middleware, routing and Request/Response objects halves the
frontend's cost per request (measured in bench/RESULTS.md). Everything else
goes to the FastAPI app unchanged.

Compression (``Content-Encoding`` / ``Accept-Encoding`` gzip or deflate, see
``compression.py``) costs an uncompressed request nothing beyond the header scan.

A sampled request (``--trace-config``) gets Triton's ``HTTP_RECV_START`` / ``HTTP_RECV_END``
(the body read), ``INFER_RESPONSE_COMPLETE`` (the engine's response encoded: Triton's
``InferResponseComplete``, so with ``preserve_ordering`` it is the time the response was
released in order) and ``HTTP_SEND_START`` / ``HTTP_SEND_END`` (the response sent) timestamps;
with tracing off the path takes no timestamp. In ``opentelemetry`` mode the request's headers
go to the sampling, for a W3C ``traceparent`` (Triton's ``HttpTextMapCarrier``).

A client that disconnects while its request waits or runs abandons it, as on the gRPC path:
the awaited ``Server.infer`` is cancelled, so the scheduler drops a queued request instead of
executing it and counts it as CANCELED (:class:`DisconnectWatch`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

from workbench import InvalidArgument, Server
from workbench.frontends.error_boundary import http_failure
from workbench.frontends.header_forward import compile_forward_pattern, forwarded_parameters
from workbench.frontends.http.body_limits import json_too_large, read_within
from workbench.frontends.http.codec import (
    HEADER_LENGTH,
    decode_request,
    encode_response_chunks,
    json_header_end,
)
from workbench.frontends.http.compression import (
    compress,
    decompress,
    request_encoding,
    response_encoding,
)
from workbench.frontends.http.large_bodies import (
    OFFLOAD_BYTES,
    JsonBudget,
    check_json_size,
    decode_request_off_loop,
    encode_response_off_loop,
    json_output_bytes,
    json_part_size,
)
from workbench.frontends.http.protocol import DISCONNECT_EXTENSION, sent_headers
from workbench.frontends.http.raw_binary import raw_binary_request
from workbench.tracing import RequestTrace

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger(__name__)

INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
_HEADER_LENGTH = HEADER_LENGTH.encode()
_CONTENT_ENCODING = b"content-encoding"
_ACCEPT_ENCODING = b"accept-encoding"
_CONTENT_LENGTH = b"content-length"
_JSON = [(b"content-type", b"application/json")]
_BINARY = (b"content-type", b"application/octet-stream")


class InferFastPath:
    """ASGI app: serves infer requests itself and passes every other request to ``app``.

    Args:
        server: the engine.
        app: the ASGI app for everything else (the FastAPI app).
    """

    def __init__(self, server: Server, app: ASGIApp) -> None:
        self.server = server
        self.app = app
        self.limit = server.options.http_max_input_size
        self.binary_limit = server.options.http_max_binary_size
        self.json_limit = server.options.http_max_json_size
        self.json_budget = JsonBudget(self.json_limit)
        self.forward = compile_forward_pattern(server.options.http_header_forward_pattern)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = INFER_PATH.match(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
        elif scope["method"] == "POST":
            await self._infer(scope, receive, send, match)
        else:
            await _respond(send, 405, _JSON, b'{"error":"Method Not Allowed"}')

    async def _infer(self, scope: Scope, receive: Receive, send: Send, match: re.Match) -> None:
        recv_start_ns = time.monotonic_ns() if self.server.tracer.enabled else 0
        trace = await self._serve(scope, receive, send, match, recv_start_ns)
        if trace is not None:  # sampled: written once the response is out
            trace.release()

    async def _serve(self, scope: Scope, receive: Receive, send: Send, match: re.Match,
                     recv_start_ns: int) -> RequestTrace | None:
        """Serve one infer request; with ``recv_start_ns`` (tracing on) sample it and return
        its trace (released by the caller once the response is out)."""
        trace = None
        try:
            header_length, content_encoding, accept_encoding, declared = _headers(scope)
            compressed = content_encoding is not None and request_encoding(content_encoding)
            limit, refusal = self._body_limit(header_length, bool(compressed))
            if declared is not None and declared > limit:  # Triton's limit and text come first
                raise refusal(declared, limit)
            if declared is not None and not compressed:  # refused before the body is read
                check_json_size(json_part_size(header_length, declared), self.json_limit)
            body = await read_within(receive, limit, declared, refusal)
            if body is None:
                raise InvalidArgument("client disconnected before the request body arrived")
            if compressed:
                body = await decompress(body, self.limit)
            json_size = json_part_size(header_length, len(body))
            if compressed or declared != len(body):  # else checked above, before the body
                check_json_size(json_size, self.json_limit)
            model, version = match.group(1), match.group(2) or ""
            if "%" in model or "%" in version:  # %-escapes (unquote is a call per segment)
                model, version = unquote(model), unquote(version)
            if recv_start_ns:
                tracer = self.server.tracer
                trace = tracer.sample(model, header_carrier(scope) if tracer.propagates else None)
                if trace is not None:
                    trace.stamp("HTTP_RECV_START", recv_start_ns)
                    trace.stamp("HTTP_RECV_END", time.monotonic_ns())
            if json_header_end(header_length, len(body)) == 0:  # Triton's raw binary request
                request = await raw_binary_request(self.server, body, model, version)
            elif json_size < OFFLOAD_BYTES:  # a plain call: no coroutine for a small body
                request = decode_request(body, header_length, model, version)
            else:
                request = await decode_request_off_loop(
                    self.json_budget, body, header_length, model, version, json_size)
            request.trace = trace
            del body  # JSON tensors no longer need it (binary ones keep their views alive)
            if self.forward is not None:  # --http-header-forward-pattern
                request.parameters.update(forwarded_parameters(self.forward, sent_headers(scope)))
            async with DisconnectWatch(receive, scope) as watch:
                response = await self.server.infer(request)
            if watch.dropped:  # nobody to answer; the engine dropped the request
                return trace
            json_output = json_output_bytes(response, request)
            if json_output < OFFLOAD_BYTES:  # a plain call: no coroutine for a small answer
                chunks, json_length = encode_response_chunks(response, request)
            else:
                chunks, json_length = await encode_response_off_loop(
                    self.json_budget, response, request, json_output)
            if trace is not None:  # Triton's: once the response is finalized, before the send
                trace.stamp("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
            encoding = response_encoding(accept_encoding) if accept_encoding else None
            if encoding is not None:
                chunks = [await compress(b"".join(chunks), encoding)]
        except Exception as exc:  # noqa: BLE001  # engine errors and bugs alike: the error boundary (it logs a bug)
            status, payload = http_failure(exc, scope["path"])
            await _respond_traced(send, status, _JSON, payload, trace)
            return trace
        headers = _JSON
        if json_length is not None:
            headers = [_BINARY, (_HEADER_LENGTH, str(json_length).encode())]
        if encoding is not None:
            headers = [*headers, (_CONTENT_ENCODING, encoding.encode())]
        await _respond_traced(send, 200, headers, chunks, trace)
        return trace


    def _body_limit(self, header_length: str | None, compressed: bool
                    ) -> tuple[int, Callable[[int, int], InvalidArgument]]:
        """The most bytes the body may hold, and the refusal past it, as tritonserver bounds
        them: a JSON body, a raw binary body (``Inference-Header-Content-Length: 0``) and a
        compressed one (inflated later, up to the same limit) by ``--http-max-input-size``; a
        binary-extension body by its JSON header (at most ``--http-max-input-size``: Triton's
        "request JSON size ..." refusal, before the body is read) plus
        ``--http-max-binary-size`` of tensor data (tritonserver has no bound there).

        Raises:
            InvalidArgument: the announced JSON header is over ``--http-max-input-size``.
        """
        json_length = _header_length(header_length)
        if compressed:
            return self.limit, _compressed_too_large
        if json_length is None:  # a JSON body: Triton's EVBufferToJson refusal
            return self.limit, json_too_large
        if json_length == 0:
            return self.limit, _raw_too_large
        if json_length > self.limit:
            raise json_too_large(json_length, self.limit)
        return json_length + self.binary_limit, _binary_too_large(json_length)


class DisconnectWatch:
    """Cancels the current task when the client disconnects, as grpc.aio cancels an RPC's
    task; :meth:`stop` it before sending the response.

    Under workbench's own uvicorn protocol the connection calls it back when it is lost (the
    scope's ``DISCONNECT_EXTENSION`` set: :mod:`workbench.frontends.http.protocol`); under any
    other ASGI server a watcher task awaits ASGI ``http.disconnect`` (uvicorn's ``receive``
    also says ``http.disconnect`` once the response is complete, hence :meth:`stop` first).

    Call it after the whole request body was received: ``receive`` then only returns when the
    connection is lost or the response is done. As an ``async with`` block it stops at the
    block's end and swallows the cancellation it caused, setting :attr:`dropped` (nobody is
    left to answer; the engine dropped the request); any other error goes on.
    """

    __slots__ = ("_callbacks", "_task", "_watcher", "disconnected", "dropped")

    def __init__(self, receive: Receive, scope: Scope | None = None) -> None:
        self.disconnected = False
        self.dropped = False
        self._task = asyncio.current_task()
        extensions = scope.get("extensions") if scope is not None else None
        self._callbacks: set | None = extensions.get(DISCONNECT_EXTENSION) if extensions else None
        self._watcher: asyncio.Future | None = None
        if self._callbacks is not None:
            self._callbacks.add(self._lost)
        else:
            self._watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._lost()

    def _lost(self) -> None:
        self.disconnected = True
        if self._task is not None:
            self._task.cancel()

    def stop(self) -> None:
        """Stop watching (the request is answered or failed)."""
        if self._callbacks is not None:
            self._callbacks.discard(self._lost)
        elif self._watcher is not None:
            self._watcher.cancel()

    async def __aenter__(self) -> DisconnectWatch:
        return self

    async def __aexit__(self, kind, error, traceback) -> bool:
        self.stop()
        if kind is asyncio.CancelledError and self.disconnected:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            self.dropped = True
            return True
        return False


def _header_length(value: str | None) -> int | None:
    """``Inference-Header-Content-Length`` as a non-negative int; None when absent or not one
    (the codec refuses a malformed one)."""
    if value is None or not value.isdigit():
        return None
    return int(value)


def _raw_too_large(size: int, limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value of "
        f"{limit} bytes. Use --http-max-input-size to increase the limit."
    )


def _binary_too_large(json_length: int) -> Callable[[int, int], InvalidArgument]:
    def refusal(size: int, limit: int) -> InvalidArgument:
        return InvalidArgument(
            f"request binary data of {size - json_length} bytes exceeds the maximum allowed "
            f"size of {limit - json_length} bytes. Use --http-max-binary-size to increase the "
            "limit."
        )
    return refusal


def header_carrier(scope: Scope) -> dict[str, str]:
    """The request's headers as an OpenTelemetry carrier: lower-case names -> values (the
    last of a repeated header)."""
    return {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}


def _headers(scope: Scope) -> tuple[str | None, str | None, str | None, int | None]:
    """Inference-Header-Content-Length, Content-Encoding, Accept-Encoding, Content-Length (an
    int, None when absent or not a number) in one pass; ASGI servers give header names
    lower-cased."""
    length = content = accept = declared = None
    for key, value in scope["headers"]:
        if key == _HEADER_LENGTH:
            length = value.decode("latin-1")
        elif key == _CONTENT_ENCODING:
            content = value.decode("latin-1").strip().lower()
        elif key == _ACCEPT_ENCODING:
            accept = value.decode("latin-1").lower()
        elif key == _CONTENT_LENGTH and value.isdigit():
            declared = int(value)
    return length, content, accept, declared


def _compressed_too_large(size: int, limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"request size {size} exceeds the maximum allowed input size of {limit}. "
        "Use --http-max-input-size to increase the limit."
    )


async def _respond_traced(send: Send, status: int, headers: list,
                          body: bytes | list[bytes | memoryview], trace: RequestTrace | None) -> None:
    """:func:`_respond`, between ``HTTP_SEND_START`` and ``HTTP_SEND_END`` when traced."""
    if trace is None:
        await _respond(send, status, headers, body)
        return
    trace.stamp("HTTP_SEND_START", time.monotonic_ns())
    await _respond(send, status, headers, body)
    trace.stamp("HTTP_SEND_END", time.monotonic_ns())


#: a response body smaller than this is joined into one body message (copying it costs less
#: than the send syscall per extra message); larger ones go out chunk by chunk, uncopied
JOIN_BELOW_BYTES = 256 * 1024


async def _respond(send: Send, status: int, headers: list,
                   payload: bytes | list[bytes | memoryview]) -> None:
    """Send a response; a list of chunks (JSON header, binary outputs) goes out chunk by chunk
    under one Content-Length, not joined (uvicorn writes each body message to the transport
    as it is, and the transport keeps a reference to what the socket did not take yet), unless
    the body is under :data:`JOIN_BELOW_BYTES`: then one joined body message, so the head and
    body leave in one send syscall (each further body message is one more)."""
    chunks = [payload] if isinstance(payload, bytes) else payload
    length = sum(len(c) for c in chunks)
    if len(chunks) > 1 and length < JOIN_BELOW_BYTES:
        chunks = [b"".join(chunks)]
    headers = [*headers, (b"content-length", str(length).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    for chunk in chunks[:-1]:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": chunks[-1]})
