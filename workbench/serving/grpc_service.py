"""The gRPC listener of ``workbench serve``: Triton's gRPC API on its own port (8001).

Runs on the same event loop as the engine and the HTTP frontend (grpc.aio, no thread
pool). The port is bound before any model loads, so a busy port fails fast with
tritonserver's one-line error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc

from workbench import Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server
from workbench.serving.listeners import shut_listeners

log = logging.getLogger("workbench")


def open_grpc_listener(server: Server, options: ServerOptions) -> tuple[grpc.aio.Server, int] | None:
    """Create the gRPC server and bind its port, or log Triton's error line and return None.

    The message follows tritonserver: ``failed to start GRPC service: Unavailable - Socket
    '<address>:<port>' already in use``.
    """
    try:
        return create_grpc_server(server, options)
    except RuntimeError:
        log.error("failed to start GRPC service: Unavailable - Socket '%s:%d' already in use",
                  options.grpc_address, options.grpc_port)
        return None


@contextlib.asynccontextmanager
async def serve_grpc(
    grpc_server: grpc.aio.Server, port: int, options: ServerOptions
) -> AsyncIterator[None]:
    """Serve until the block exits, then stop accepting RPCs and let in-flight ones
    finish (up to ``exit_timeout_secs``; streams still open then are cancelled).

    Logs ``Started GRPCInferenceService at <address>:<port>`` (Triton's line) with the
    bound port once serving.
    """
    await grpc_server.start()
    log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, port)
    try:
        yield
    finally:
        await grpc_server.stop(grace=options.exit_timeout_secs or None)


#: stop tasks started from signal handlers (kept referenced until they finish)
_STOPPING: set[asyncio.Task] = set()

#: seconds between the signal and the gRPC server's stop: RPCs that a proxy sent on its open
#: connections meanwhile are served (grpc-core cancels every RPC that arrives once stopping)
DRAIN_GRACE_S = 1.0


def stop_accepting_grpc(grpc_server: grpc.aio.Server, options: ServerOptions,
                        port: int | None = None) -> None:
    """Start the gRPC server's drain now (called on the loop thread when SIGINT / SIGTERM
    arrives): new connections to ``port`` are refused at once (a proxy tries another
    replica, nothing was sent), RPCs on connections already open are served for
    :data:`DRAIN_GRACE_S` more; then the graceful stop (GOAWAY; new RPCs UNAVAILABLE, in-flight
    ones finish, up to ``exit_timeout_secs``). :func:`serve_grpc` later awaits the same stop.
    ``port`` None: stop at once (no listener to shut)."""
    loop = asyncio.get_running_loop()

    def stop() -> None:
        task = loop.create_task(grpc_server.stop(grace=options.exit_timeout_secs or None))
        _STOPPING.add(task)
        task.add_done_callback(_STOPPING.discard)

    if port is not None and shut_listeners(port):
        log.info("gRPC: new connections refused; RPCs on open connections served %.1fs more",
                 DRAIN_GRACE_S)
        loop.call_later(DRAIN_GRACE_S, stop)
    else:
        stop()
