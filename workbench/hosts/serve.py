"""Run the engine behind uvicorn (HTTP, metrics) and grpc.aio (gRPC) until SIGINT/SIGTERM,
then drain and exit (``workbench serve``). Binding the ports is :mod:`workbench.serving.ports`,
the HTTP service :mod:`workbench.serving.http_service`, the drain :mod:`workbench.serving.drain`
(shared with the Jupyter host)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from functools import partial

from workbench import Server, ServerOptions, WorkbenchError
from workbench.hosts.logging_setup import apply_log_settings, configure_logging
from workbench.serving.drain import drain_engine
from workbench.serving.grpc_service import FINAL_GRACE_S, SERVE_DRAIN_GRACE_S, serve_grpc, stop_accepting_grpc
from workbench.serving.http_service import http_service
from workbench.serving.metrics_service import serve_metrics
from workbench.serving.ports import bind_ports
from workbench.serving.stderr_filter import filter_stderr, restore_stderr

log = logging.getLogger("workbench")


async def serve(options: ServerOptions) -> int:
    """Start the engine, the HTTP and gRPC frontends and the metrics endpoint; return the
    exit status.

    Every port is bound before any model loads, so a busy port fails fast. On exit (SIGINT /
    SIGTERM), as tritonserver's ``StopEndpoints``: HTTP and gRPC refuse new connections at
    once; live HTTP connections (idle keep-alive ones included) are served until they close
    or ``--exit-timeout-secs`` runs out
    (:mod:`workbench.frontends.http.connection_guard`); RPCs on open gRPC connections are
    served for ``SERVE_DRAIN_GRACE_S`` (0.2 s), then the gRPC server stops (``GracefulStop``:
    GOAWAY, a new RPC is refused, in-flight RPCs finish:
    :func:`~workbench.serving.grpc_service.stop_accepting_grpc`; Triton stops at once, which
    fails a request a proxy wrote on a connection accepted at that moment: docs/serve.md);
    then the engine drains within what is left of the exit timeout; the metrics endpoint
    keeps answering while the engine drains and stops with it.
    """
    server = Server(options)
    server.settings.add_log_settings_observer(apply_log_settings)  # --log-* flags and /v2/logging
    bound = bind_ports(server, options)
    if bound is None:
        return 1
    try:
        await server.start()
    except WorkbenchError as exc:
        log.error("%s", exc.message)
        await bound.close()
        return 1
    host, port = bound.http.getsockname()[:2]
    http = http_service(server, options)
    grpc_stops: list[asyncio.Event] = []  # set once gRPC's graceful stop began
    async with contextlib.AsyncExitStack() as services:
        if bound.metrics is not None:
            await services.enter_async_context(serve_metrics(server, options, bound.metrics))
        if bound.grpc is not None:
            await services.enter_async_context(serve_grpc(*bound.grpc, options, FINAL_GRACE_S))
            grpc_server, grpc_port = bound.grpc

            def stop_grpc() -> None:
                grpc_stops.append(stop_accepting_grpc(grpc_server, options, grpc_port, SERVE_DRAIN_GRACE_S))
            http.on_exit.append(stop_grpc)
        http.on_started.append(partial(log.info, "Started HTTPService at %s:%d", host, port))
        drained = False
        try:
            await http.serve(sockets=[bound.http])
        finally:
            for grpc_stop in grpc_stops:  # the engine refuses requests once it stops
                await grpc_stop.wait()
            drained = await drain_engine(server, options, http.exit_started)
            if not drained:  # a thread may never return (a native call, a mount that hangs):
                exit_now(1)  # exit before asyncio's shutdown would wait for its threads
    return 0


def run(options: ServerOptions) -> int:
    """Blocking entry: configure logging, run :func:`serve` on uvloop when available.

    A failed run (status 1: a busy port, a model failing with ``--exit-on-error``, or a drain
    cut short by ``--exit-timeout-secs``) ends the process with ``os._exit`` once the
    logs are flushed: after an exit timeout, backend threads may still be inside a native
    library (ONNX Runtime, torch), and finalizing the interpreter under them aborts the process
    ("terminate called without an active exception", SIGABRT) instead of exiting with 1. A
    drain cut short exits from within :func:`serve` already: the event loop's shutdown would
    otherwise wait for its worker threads, one of which may never return (a load stuck in a
    framework's read of a hung mount), and SIGTERM would never stop the server.

    A successful run (status 0: every model unloaded, every Python stub stopped, trace files
    closed by the engine's stop) ends the same way: the interpreter's finalization has nothing
    left to release, yet with the sample backends imported it took 3-15 s of silence after
    "all models unloaded; exiting" (DALI's atexit unload, a full garbage collection, TensorFlow's
    and torch's native destructors), so Ctrl-C of ``make serve`` seemed to hang. Not Triton's
    concern (a C++ binary); its stop ends at the same point.

    stderr passes through :func:`~workbench.serving.stderr_filter.filter_stderr` (grpc-core's
    "Closing acceptor" line of every stop is dropped), restored before the exit.
    """
    filter_stderr()
    configure_logging(options.log_verbose)
    try:
        try:
            import uvloop
        except ImportError:
            status = asyncio.run(serve(options))
        else:
            status = uvloop.run(serve(options))
    except KeyboardInterrupt:
        restore_stderr()
        return 130
    exit_now(status)
    return status  # not reached


def exit_now(status: int) -> None:
    """End the process with ``status`` once the logs are flushed, without waiting for any
    thread (``os._exit``; see :func:`run`)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    restore_stderr()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(run(ServerOptions()))
