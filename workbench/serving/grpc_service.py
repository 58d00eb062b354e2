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
from workbench.frontends.grpc.shutdown_gate import ShutdownGate, gate_of, refuse_new_rpcs
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
    grpc_server: grpc.aio.Server, port: int, options: ServerOptions,
    final_grace_s: float | None = None,
) -> AsyncIterator[None]:
    """Serve until the block exits, then stop accepting RPCs and let in-flight ones
    finish (up to ``final_grace_s``, default ``exit_timeout_secs``; calls still open then
    are cancelled).

    ``workbench serve`` exits the block once the engine drained, and gives a short
    ``final_grace_s``: every engine answer is in by then, and a call that grpc.aio took off
    the wire after its stop began (it never runs it) is cancelled then rather than at the
    end of the exit timeout.

    Logs ``Started GRPCInferenceService at <address>:<port>`` (Triton's line) with the
    bound port once serving.
    """
    await grpc_server.start()
    log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, port)
    try:
        yield
    finally:
        grace = final_grace_s if final_grace_s is not None else options.exit_timeout_secs or None
        await grpc_server.stop(grace=grace)


#: stop tasks started from signal handlers (kept referenced until they finish)
_STOPPING: set[asyncio.Task] = set()

#: seconds between the signal and the gRPC server's stop in the headless switch: RPCs that a
#: proxy sent on its open connections meanwhile are served (grpc-core cancels every RPC that
#: arrives once stopping)
DRAIN_GRACE_S = 1.0

#: seconds between the signal and the gRPC server's stop in ``workbench serve``. The listener
#: is shut at once; grpc-core's stop would end a connection it accepted just before but had
#: not set up yet with a GOAWAY carrying INTERNAL_ERROR (2), which a proxy that already wrote
#: its request on it (nginx opens one connection per gRPC request) can only answer with 502,
#: and would cancel that request arriving after it. A fifth of a second lets those connections
#: deliver their request, and keeps the GOAWAY well within the 0.5 s after which L0_lifecycle's
#: ``test_shutdown_dynamic`` expects a client on an open connection to have read it.
SERVE_DRAIN_GRACE_S = 0.2

#: seconds the gRPC server of ``workbench serve`` gives its calls once the engine drained
FINAL_GRACE_S = 1.0


async def _count_down(calls: ShutdownGate, budget: int) -> None:
    """tritonserver's countdown while inference calls run on a stopping gRPC service
    (``WaitForConnectionsToClose``), once a second while the exit timeout lasts:
    ``Timeout N: Found M gRPC service connections and inference handlers``."""
    while budget > 0 and calls.calls > 0:
        log.info("Timeout %d: Found %d gRPC service connections and inference handlers", budget, calls.calls)
        await asyncio.sleep(1.0)
        budget -= 1


def stop_accepting_grpc(grpc_server: grpc.aio.Server, options: ServerOptions,
                        port: int | None = None, grace_s: float = DRAIN_GRACE_S) -> asyncio.Event:
    """Start the gRPC server's drain now (called on the loop thread when SIGINT / SIGTERM
    arrives): new connections to ``port`` are refused at once (a proxy tries another
    replica, nothing was sent), RPCs on connections already open are served for ``grace_s``
    more (:data:`DRAIN_GRACE_S`, :data:`SERVE_DRAIN_GRACE_S`); then the graceful stop
    (GOAWAY; new RPCs refused with CANCELLED, in-flight ones finish, up to
    ``exit_timeout_secs``). :func:`serve_grpc` later awaits the same stop. ``port`` None or
    ``grace_s`` 0: stop at once, as Triton's ``GracefulStop`` does at SIGINT / SIGTERM (a
    new RPC on an open connection is CANCELLED, or, once the client read the GOAWAY,
    "failed to connect to all addresses ... Connection refused"; a connection grpc-core
    accepted but had not set up yet gets a GOAWAY with INTERNAL_ERROR: a proxy's request
    written on it fails with 502).

    Returns:
        An event set once the graceful stop began: the engine's drain waits for it, since
        an engine that stopped refuses the RPCs served until then.
    """
    loop = asyncio.get_running_loop()
    began = asyncio.Event()

    def stop() -> None:
        log.info("gRPC: stopping: new RPCs refused, in-flight ones finish")
        refuse_new_rpcs(grpc_server)  # a call matched before grpc-core's stop took effect
        task = loop.create_task(grpc_server.stop(grace=options.exit_timeout_secs or None))
        _STOPPING.add(task)
        task.add_done_callback(_STOPPING.discard)
        countdown = loop.create_task(_count_down(gate_of(grpc_server), int(options.exit_timeout_secs)))
        _STOPPING.add(countdown)
        countdown.add_done_callback(_STOPPING.discard)
        began.set()

    if port is not None and grace_s > 0 and shut_listeners(port):
        log.info("gRPC: new connections refused; RPCs on open connections served %.1fs more",
                 grace_s)
        loop.call_later(grace_s, stop)
    else:
        stop()
    return began
