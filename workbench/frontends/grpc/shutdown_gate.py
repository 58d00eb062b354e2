"""New RPCs refused once the server stops, as tritonserver's ``GracefulStop`` refuses them.

grpc.aio's graceful stop (GOAWAY, listener closed) lets RPCs in flight finish, but a call that
reaches a connection opened before the stop may still be matched to a call the server had
requested in advance, and run. :class:`ShutdownGate`, the first interceptor, answers every call
that starts after :func:`refuse_new_rpcs` with ``CANCELLED`` (what grpc-core gives a call that
arrives while Triton's server shuts down; L0_lifecycle ``test_shutdown_*`` accept it, or the
"Connection refused" a client that read the GOAWAY gets on reconnecting). Calls already running
are untouched.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

#: the text of a refused call (tritonclient shows the details only: "CANCELLED" as grpc-core's)
SHUTTING_DOWN = "CANCELLED: the server is shutting down, no new requests accepted"

_GATES: weakref.WeakKeyDictionary[grpc.aio.Server, ShutdownGate] = weakref.WeakKeyDictionary()


class ShutdownGate(grpc.aio.ServerInterceptor):
    """Passes calls through until :attr:`closed`; then refuses each new one (module docstring)."""

    def __init__(self) -> None:
        self.closed = False

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if not self.closed or handler is None:
            return handler
        return _refusal(handler)


def gate(grpc_server: grpc.aio.Server, shutdown_gate: ShutdownGate) -> None:
    """Remember ``shutdown_gate`` as the gate of ``grpc_server`` (for :func:`refuse_new_rpcs`)."""
    _GATES[grpc_server] = shutdown_gate


def refuse_new_rpcs(grpc_server: grpc.aio.Server) -> None:
    """From now on, every call that starts on ``grpc_server`` is refused (CANCELLED)."""
    shutdown_gate = _GATES.get(grpc_server)
    if shutdown_gate is not None:
        shutdown_gate.closed = True


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that aborts before reading the request."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.CANCELLED, SHUTTING_DOWN)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


__all__ = ["SHUTTING_DOWN", "ShutdownGate", "gate", "refuse_new_rpcs"]
