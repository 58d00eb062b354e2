"""New RPCs refused once the server stops, as tritonserver's ``GracefulStop`` refuses them.

grpc.aio's graceful stop (GOAWAY, listener closed) lets RPCs in flight finish, but a call that
reaches a connection opened before the stop may still be matched to a call the server had
requested in advance, and run. Every handler checks the server's :class:`ShutdownGate` when a
call starts (the wrappers :func:`workbench.frontends.grpc.decoding.add_lenient` installs, and
``ModelInfer`` itself: no interceptor coroutine on the hot path) and answers every call that
starts after :func:`refuse_new_rpcs` with ``CANCELLED`` (what grpc-core gives a call that
arrives while Triton's server shuts down; L0_lifecycle ``test_shutdown_*`` accept it, or the
"Connection refused" a client that read the GOAWAY gets on reconnecting). Calls already running
are untouched.
"""

from __future__ import annotations

import weakref

import grpc

#: the text of a refused call (tritonclient shows the details only: "CANCELLED" as grpc-core's)
SHUTTING_DOWN = "CANCELLED: the server is shutting down, no new requests accepted"

_GATES: weakref.WeakKeyDictionary[grpc.aio.Server, ShutdownGate] = weakref.WeakKeyDictionary()


class ShutdownGate:
    """Open until :attr:`closed`; then :func:`refuse` ends each new call (module docstring).
    :attr:`calls` counts the ``ModelInfer`` / ``ModelStreamInfer`` calls running now (Triton's
    count of "gRPC service connections and inference handlers", logged while it stops)."""

    def __init__(self) -> None:
        self.closed = False
        self.calls = 0


async def refuse(context: grpc.aio.ServicerContext) -> None:
    """Abort the call starting on ``context``: CANCELLED, :data:`SHUTTING_DOWN`."""
    await context.abort(grpc.StatusCode.CANCELLED, SHUTTING_DOWN)


def gate(grpc_server: grpc.aio.Server, shutdown_gate: ShutdownGate) -> None:
    """Remember ``shutdown_gate`` as the gate of ``grpc_server`` (for :func:`refuse_new_rpcs`)."""
    _GATES[grpc_server] = shutdown_gate


def gate_of(grpc_server: grpc.aio.Server) -> ShutdownGate:
    """The gate of ``grpc_server`` (:func:`gate`), or a new one that stays open."""
    return _GATES.get(grpc_server) or ShutdownGate()


def refuse_new_rpcs(grpc_server: grpc.aio.Server) -> None:
    """From now on, every call that starts on ``grpc_server`` is refused (CANCELLED)."""
    shutdown_gate = _GATES.get(grpc_server)
    if shutdown_gate is not None:
        shutdown_gate.closed = True


__all__ = ["SHUTTING_DOWN", "ShutdownGate", "gate", "gate_of", "refuse", "refuse_new_rpcs"]
