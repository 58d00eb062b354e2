"""The one error boundary of every request edge: an exception -> the protocol's status and text.

Every edge (the v2 HTTP routes, the raw infer and generate paths, the OpenAI-compatible
``/v1`` routes, every gRPC method and stream, the Jupyter extension's REST handlers) turns
what a request raised into its answer here, and nowhere else (``tests/architecture/test_layers.py``):

* a :class:`~workbench.WorkbenchError` keeps its message; its status is Triton's for its code
  (:mod:`workbench.frontends.status`: HTTP as ``HttpCodeFromError``, gRPC as ``grpc_utils.cc``);
  a :class:`~workbench.DecoupledNotSupported` is worded as Triton words it per protocol
  (:data:`DECOUPLED_HTTP`, 501; :data:`DECOUPLED_MODEL_INFER`, UNIMPLEMENTED);
* an HTTP error of the web framework itself (Starlette's 404 of an unknown path, 405, a
  request it cannot parse) keeps its status, its text as the message;
* anything else is a bug: logged with its traceback (once, here) and answered INTERNAL (HTTP
  500) "internal error: <type>: <text>", in the protocol's error shape, never the web
  framework's plain-text page.

The shapes: v2 HTTP ``{"error": "<message>"}`` (:func:`http_failure`, and the ASGI middleware
:class:`HttpErrorBoundary` for the FastAPI routes); gRPC ``context.abort(code, message)``
(:func:`grpc_failure`); the OpenAI and Jupyter shapes are built by their edges from
:func:`failure`'s status and message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from dataclasses import dataclass
from typing import Any

import grpc
import orjson
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from workbench import DecoupledNotSupported, StatusCode, WorkbenchError
from workbench.frontends.status import GRPC_STATUS, HTTP_STATUS

log = logging.getLogger(__name__)

#: Triton's text (HTTP 501) when a decoupled model does not send exactly one response
DECOUPLED_HTTP = "HTTP end point doesn't support models with decoupled transaction policy"
#: Triton's text (UNIMPLEMENTED) for ModelInfer on a decoupled model
DECOUPLED_MODEL_INFER = "ModelInfer RPC doesn't support models with decoupled transaction policy"

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed request answers: its engine status code, HTTP status and message.

    ``http_status`` is Triton's for ``code`` unless the web framework chose one itself
    (Starlette's 404 / 405 / 422).
    """

    code: StatusCode
    message: str
    http_status: int

    @property
    def grpc_code(self) -> grpc.StatusCode:
        """The gRPC status code (Triton's ``grpc_utils`` mapping)."""
        return GRPC_STATUS[self.code]


def failure(exc: BaseException, where: str = "a request") -> Failure:
    """The answer to ``exc`` raised while serving ``where`` (a path or method name, for the
    log). Logs the traceback of an unexpected exception (a bug)."""
    if isinstance(exc, WorkbenchError):
        return Failure(exc.code, exc.message, HTTP_STATUS[exc.code])
    if isinstance(exc, StarletteHTTPException):
        return Failure(StatusCode.INVALID_ARG if exc.status_code < 500 else StatusCode.INTERNAL,
                       str(exc.detail), exc.status_code)
    log.error("internal error while serving %s", where, exc_info=exc)
    return Failure(StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}", 500)


def http_failure(exc: BaseException, where: str = "a request") -> tuple[int, bytes]:
    """The v2 HTTP answer to ``exc``: (status, the JSON body ``{"error": "<message>"}``)."""
    answer = failure(exc, where)
    message = DECOUPLED_HTTP if isinstance(exc, DecoupledNotSupported) else answer.message
    return answer.http_status, orjson.dumps({"error": message})


def grpc_failure(exc: BaseException, where: str = "a method") -> tuple[grpc.StatusCode, str]:
    """The gRPC answer to ``exc``: (status code, message) for ``context.abort``."""
    answer = failure(exc, where)
    message = DECOUPLED_MODEL_INFER if isinstance(exc, DecoupledNotSupported) else answer.message
    return answer.grpc_code, message


async def send_json(send: Send, status: int, body: bytes) -> None:
    """Send a complete ``application/json`` response over ASGI."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HttpErrorBoundary:
    """ASGI middleware: an exception a route raises before its response started is answered
    by :func:`http_failure`; one raised after (a streamed body) goes on to the server, which
    ends the connection (the status is already sent).

    Inside FastAPI (``app.add_middleware``) it sees what the app's exception handlers did not
    answer: FastAPI answers :class:`~workbench.WorkbenchError` and Starlette's HTTP errors
    through :func:`http_exception_handlers`, the same mapping.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:
                raise
            await send_json(send, *http_failure(exc, scope["path"]))


def http_exception_handlers() -> dict[int | type[Exception],
                                      Callable[[Request, Any], Coroutine[Any, Any, Response]]]:
    """FastAPI ``exception_handlers``: engine errors and Starlette's HTTP errors answered by
    :func:`http_failure` (FastAPI's own ``{"detail": ...}`` shape never reaches a client)."""

    async def answer(request: Request, exc: Exception) -> Response:
        status, body = http_failure(exc, request.url.path)
        return Response(body, status_code=status, media_type="application/json")

    return {WorkbenchError: answer, StarletteHTTPException: answer}


__all__ = ["DECOUPLED_HTTP", "DECOUPLED_MODEL_INFER", "Failure", "HttpErrorBoundary", "failure",
           "grpc_failure", "http_exception_handlers", "http_failure", "send_json"]
