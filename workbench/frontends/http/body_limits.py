"""The one request-body reader of every HTTP edge, and its one size-limit behaviour.

Every body a workbench edge reads goes through here (``tests/architecture/test_layers.py`` checks that no
other module calls ``Request.body()`` / ``.stream()`` or reads ASGI ``more_body``):
:func:`read_within` reads an ASGI body (the infer and generate paths, and :class:`BodyLimits`
in front of every FastAPI route); :func:`route_body` / :func:`route_json` hand a route the
body :class:`BodyLimits` read; :func:`received_body` bounds a body tornado already read (the
Jupyter extension's REST API).

A body over its limit is refused with its route's text before any of it is read when
``Content-Length`` announces it, else once the bytes read pass the limit; the connection then
ends after the answer (the lingering close of
:meth:`~workbench.frontends.http.connection_guard.GuardedHttpToolsProtocol._linger`). Limits
and answers per route: the load API and the repository index ``--http-max-input-size`` (Triton's 400 "request JSON
size of N bytes exceeds the maximum allowed input size of M bytes. Use
--http-max-input-size to increase the limit."); the OpenAI-compatible routes the same limit
with 413 in OpenAI's error shape (Triton's OpenAI frontend); every other route
``--http-max-control-body-size`` with 413 ``{"error": "..."}`` (beyond Triton). Tritonserver
reads a body whole before checking its size; here a client cannot make the server read more
than the limit. A body within its limit is read whole and handed on as one message; requests
without a body pass untouched. User view: docs/serve.md, "HTTP connection limits";
docs/security.md, "Every limit, its flag and default"."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import orjson

from workbench import InvalidArgument
from workbench.frontends.error_boundary import send_json
from workbench.frontends.http.codec import parse_json_object

if TYPE_CHECKING:
    from starlette.requests import Request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOAD_PATH = re.compile(r"^/v2/repository/models/[^/]+/load$")
#: the repository index: a control route, bounded by ``--http-max-input-size`` as in tritonserver
#: (Triton's L0_http ``test_repository_index_deeply_nested_json`` sends it a 500 KB body)
INDEX_PATH = "/v2/repository/index"
#: the OpenAI-compatible routes whose bodies carry texts (bounded by --http-max-input-size)
OPENAI_PATH = re.compile(r"^/v1/(?:embeddings|completions|chat/completions)$")


class BodyTooLarge(Exception):
    """A request body over its route's limit: ``status`` and the ``{"error": ...}`` text."""

    def __init__(self, status: int, message: str, openai: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: answered in OpenAI's error shape (``{"error": {"message", "type", ...}}``)
        self.openai = openai


def json_too_large_text(size: int, limit: int) -> str:
    """Triton's text for a JSON body over ``--http-max-input-size`` (``EVBufferToJson``)."""
    return (f"request JSON size of {size} bytes exceeds the maximum allowed input size of "
            f"{limit} bytes. Use --http-max-input-size to increase the limit.")


def json_too_large(size: int, limit: int) -> InvalidArgument:
    """Triton's refusal (400) of a JSON body over ``--http-max-input-size``, as the engine error
    the edge's error boundary answers (``size``: the Content-Length, or the bytes read of a
    chunked body)."""
    return InvalidArgument(json_too_large_text(size, limit))


def load_too_large(size: int, limit: int) -> BodyTooLarge:
    """Triton's answer to a load body over ``--http-max-input-size`` (400, its text; ``size``:
    the Content-Length, or the bytes read of a chunked body)."""
    return BodyTooLarge(400, json_too_large_text(size, limit))


def openai_too_large(size: int, limit: int) -> BodyTooLarge:
    """Triton's OpenAI frontend's answer to a body over ``--http-max-input-size`` (413)."""
    return BodyTooLarge(413, f"Request size of {size} bytes exceeds the maximum allowed input "
                             f"size of {limit} bytes. Use --http-max-input-size to increase "
                             "the limit.", openai=True)


def control_too_large(size: int, limit: int) -> BodyTooLarge:
    """413 for a body over ``--http-max-control-body-size`` (``size``: the Content-Length, or
    the bytes read so far of a chunked body)."""
    return BodyTooLarge(413, f"request body of {size} bytes exceeds the {limit} bytes allowed "
                             "for this route (--http-max-control-body-size)")


class BodyLimits:
    """ASGI middleware: each request's body within its route's limit (the module docstring).

    Args:
        app: the ASGI app of the routes (the FastAPI app).
        load_limit: bytes, ``--http-max-input-size``.
        control_limit: bytes, ``--http-max-control-body-size``.
    """

    def __init__(self, app: ASGIApp, load_limit: int, control_limit: int) -> None:
        self.app = app
        self.load_limit = load_limit
        self.control_limit = control_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = body_length(scope) if scope["type"] == "http" else 0
        if declared == 0:
            await self.app(scope, receive, send)
            return
        if LOAD_PATH.match(scope["path"]) or scope["path"] == INDEX_PATH:
            limit, refusal = self.load_limit, load_too_large
        elif OPENAI_PATH.match(scope["path"]):
            limit, refusal = self.load_limit, openai_too_large
        else:
            limit, refusal = self.control_limit, control_too_large
        try:
            body = await read_within(receive, limit, declared, refusal)
        except BodyTooLarge as exc:
            await refuse(send, exc)
            return
        if body is None:
            return  # the client left before its body arrived: nobody to answer
        await self.app(scope, _replay(body, receive), send)


def body_length(scope: Scope) -> int | None:
    """The body's announced length: ``Content-Length`` as an int, None when chunked
    (``Transfer-Encoding`` wins over ``Content-Length``, as the protocol reads it) or when
    the length is not a number (the route or the parser refuses it), 0 without either."""
    length: int | None = 0
    for key, value in scope["headers"]:
        if key == b"transfer-encoding":
            return None
        if key == b"content-length":
            length = int(value) if value.isdigit() else None
    return length


async def read_within(receive: Receive, limit: int, declared: int | None,
                      refusal: Callable[[int, int], Exception]) -> bytes | None:
    """The whole body, at most ``limit`` bytes; None when the client disconnects first.
    Memory grows only with the bytes that arrive (no buffer is sized from the client's word).

    Raises:
        Exception: ``refusal(size, limit)`` when ``declared`` (the Content-Length) is over the
            limit (nothing read) or as soon as the bytes read pass it (the rest left unread).
    """
    if declared is not None and declared > limit:
        raise refusal(declared, limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise refusal(size, limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def refuse(send: Send, error: BodyTooLarge) -> None:
    """Answer ``error`` in Triton's shape. No ``Connection: close``: uvicorn would close the
    socket at once, and a client still sending would get a reset instead of the answer; the
    protocol ends the connection itself, gracefully, when its request's body is incomplete."""
    error_body = {"message": error.message, "type": "invalid_request_error", "param": None,
                  "code": None} if error.openai else error.message
    await send_json(send, error.status, orjson.dumps({"error": error_body}))


async def route_body(request: Request) -> bytes:
    """A FastAPI route's request body: read and bounded by :class:`BodyLimits` in front of the
    app, so this only takes the one message it replays."""
    return await request.body()


async def route_json(request: Request) -> dict:
    """A FastAPI route's request body as a JSON object ({} when empty or blank).

    Raises:
        InvalidArgument: not a JSON object (:func:`~workbench.frontends.http.codec.parse_json_object`).
    """
    body = await request.body()
    return parse_json_object(body) if body.strip() else {}


def received_body(request: Any, limit: int,
                   refusal: Callable[[int, int], Exception] = json_too_large) -> bytes:
    """The body of a request its server already read whole (a tornado ``HTTPServerRequest``:
    tornado reads a handler's body before the handler runs, up to its own ``max_body_size``),
    held to ``limit`` bytes as :func:`read_within` holds one it reads.

    Raises:
        Exception: ``refusal(len(body), limit)`` when it is over the limit.
    """
    body: bytes = request.body
    if len(body) > limit:
        raise refusal(len(body), limit)
    return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` as the one request message, then defers to
    ``receive`` (``http.disconnect`` once the client leaves or the response is complete)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


__all__ = ["LOAD_PATH", "OPENAI_PATH", "BodyLimits", "BodyTooLarge", "body_length", "control_too_large",
           "json_too_large", "json_too_large_text", "load_too_large", "openai_too_large", "read_within",
           "received_body", "refuse", "route_body", "route_json"]
