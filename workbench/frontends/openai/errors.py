"""OpenAI's error shape for the ``/v1`` routes: ``{"error": {"message", "type", "param", "code"}}``.

Triton's OpenAI frontend answers errors as FastAPI's ``{"detail": "..."}``; the workbench
answers OpenAI's shape (what the ``openai`` client parses into ``APIError.message`` /
``.code`` / ``.param``) with Triton's texts and status codes: 400 for a client error
(unknown model on a POST, bad input), 404 for an unknown model on ``GET /v1/models/{m}``,
500 for a server error; engine errors keep their v2 status and any other exception (a bug) is
500 "internal error: ...", both from the one error boundary
(:func:`workbench.frontends.error_boundary.failure`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from workbench.frontends.error_boundary import failure


class OpenAIError(Exception):
    """An error answered in OpenAI's shape.

    Args:
        message: the text (Triton's OpenAI frontend's where it has one).
        status: the HTTP status (400 by default: a client error).
        param: the request member at fault (``"input"``), or None.
        code: a short machine code (``"model_not_found"``), or None.
    """

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code


def unknown_model(name: str, status: int = 400) -> OpenAIError:
    """Triton's OpenAI frontend's "Unknown model: <name>" (400 on POST routes, 404 on GET)."""
    return OpenAIError(f"Unknown model: {name}", status, "model", "model_not_found")


def error_type(status: int) -> str:
    """OpenAI's ``type`` for a status: ``invalid_request_error`` (4xx) or ``server_error``."""
    return "invalid_request_error" if status < 500 else "server_error"


def error_payload(message: str, status: int, param: str | None = None,
                  code: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


def as_openai_error(exc: Exception, where: str = "a /v1 request") -> OpenAIError:
    """An :class:`OpenAIError` as it is; any other exception as the error boundary answers it
    (an engine error: its v2 status and text; a bug: 500, logged)."""
    if isinstance(exc, OpenAIError):
        return exc
    answer = failure(exc, where)
    return OpenAIError(answer.message, answer.http_status)


def error_response(exc: Exception, where: str = "a /v1 request") -> Response:
    """The JSON response of an :class:`OpenAIError`, engine error or bug."""
    error = as_openai_error(exc, where)
    body = orjson.dumps(error_payload(error.message, error.status, error.param, error.code))
    return Response(body, status_code=error.status, media_type="application/json")


class OpenAIRoute(APIRoute):
    """A FastAPI route whose every error (:class:`OpenAIError`, engine errors, bugs) is answered
    in OpenAI's shape (the v2 app's exception handlers answer Triton's ``{"error": "<text>"}``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # noqa: BLE001  # the error boundary answers (and logs a bug)
                return error_response(exc, request.url.path)

        return answer


__all__ = ["OpenAIError", "OpenAIRoute", "as_openai_error", "error_payload", "error_response",
           "error_type", "unknown_model"]
