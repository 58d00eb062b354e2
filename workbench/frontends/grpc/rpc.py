"""The error boundary of every unary gRPC method: engine errors -> Triton's gRPC status."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from workbench import WorkbenchError
from workbench.frontends.status import grpc_status

log = logging.getLogger(__name__)

#: the servicer context grpc.aio passes to every RPC method
Context: TypeAlias = grpc.aio.ServicerContext


def rpc(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap ``async def Method(self, request, context)``: a :class:`WorkbenchError` aborts the
    RPC with its gRPC status code (``workbench.frontends.status``, Triton's ``grpc_utils``
    mapping) and its message; any other exception is a bug and aborts with INTERNAL."""

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: Context) -> Any:
        try:
            return await method(self, request, context)
        except WorkbenchError as exc:
            await context.abort(grpc_status(exc.code), exc.message)
        except Exception as exc:
            log.exception("internal error in %s", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    return handler
