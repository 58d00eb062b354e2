"""The ``rpc`` wrapper of every unary gRPC method: what it raises is answered by the one error
boundary (:func:`workbench.frontends.error_boundary.grpc_failure`)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from workbench.frontends.error_boundary import grpc_failure

#: the servicer context grpc.aio passes to every RPC method
Context: TypeAlias = grpc.aio.ServicerContext


def rpc(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap ``async def Method(self, request, context)``: a :class:`~workbench.WorkbenchError`
    aborts the RPC with its gRPC status code (Triton's ``grpc_utils`` mapping) and its message;
    any other exception is a bug (logged) and aborts with INTERNAL. ``context.abort``'s own
    exception (the method aborted itself) goes on as it is."""

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: Context) -> Any:
        try:
            return await method(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001  # the error boundary answers (and logs a bug)
            await context.abort(*grpc_failure(exc, method.__name__))

    return handler
