"""Run the engine behind uvicorn (HTTP, metrics) and grpc.aio (gRPC) until SIGINT/SIGTERM,
then drain and exit."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from types import FrameType

import uvicorn

from workbench import Server, ServerOptions, WorkbenchError
from workbench.frontends.http import CoalescingHttpToolsProtocol, create_app
from workbench.hosts.grpc_service import open_grpc_listener, serve_grpc, stop_accepting_grpc
from workbench.hosts.logging_setup import apply_log_settings, configure_logging
from workbench.hosts.metrics_service import serve_metrics

log = logging.getLogger("workbench")


class HTTPService(uvicorn.Server):
    """uvicorn's server, except that SIGINT/SIGTERM only start a graceful shutdown.

    uvicorn re-raises the captured signal once its own shutdown is done, which would
    kill the process before the engine has drained and unloaded its models.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        #: called (on the loop thread, from the signal handler) when shutdown starts: the
        #: other frontends stop accepting at the same moment as HTTP
        self.on_exit: list[Callable[[], None]] = []
        #: time.monotonic() when shutdown started (None until a signal arrives)
        self.exit_started: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            self.exit_started = time.monotonic()
            log.info("received %s: no new requests accepted; finishing in-flight ones",
                     signal.Signals(sig).name)
            for callback in self.on_exit:
                callback()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind_socket(address: str, port: int) -> socket.socket:
    """A listening TCP socket with TCP_NODELAY set (small responses must not wait on Nagle).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((address, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def open_listener(service: str, address: str, port: int) -> socket.socket | None:
    """Bind ``address:port`` for ``service``, or log Triton's one-line error and return None.

    The message follows tritonserver: ``failed to start <service>: Unavailable - Socket
    '<address>:<port>' already in use``.
    """
    try:
        return bind_socket(address, port)
    except OSError as exc:
        reason = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        log.error("failed to start %s: Unavailable - Socket '%s:%d' %s", service, address, port, reason)
        return None


def open_listeners(options: ServerOptions) -> tuple[socket.socket, socket.socket | None] | None:
    """The HTTP socket and, with ``allow_metrics``, the metrics socket; None if one failed."""
    http = open_listener("HTTP service", options.http_address, options.http_port)
    if http is None:
        return None
    if not options.allow_metrics:
        return http, None
    metrics = open_listener("Metrics service", options.metrics_address, options.metrics_port)
    if metrics is None:
        http.close()
        return None
    return http, metrics


def http_service(server: Server, options: ServerOptions) -> HTTPService:
    """The uvicorn server for the v2 HTTP frontend."""
    config = uvicorn.Config(
        create_app(server),
        log_level="debug" if options.log_verbose else "warning",
        access_log=options.log_verbose > 0,
        timeout_graceful_shutdown=int(options.exit_timeout_secs) or None,
        lifespan="off",
        server_header=False,
        proxy_headers=False,  # no X-Forwarded-* rewriting on the hot path
        date_header=False,
        http=CoalescingHttpToolsProtocol,  # head + body in one write (frontends/http/protocol.py)
    )
    return HTTPService(config)


async def serve(options: ServerOptions) -> int:
    """Start the engine, the HTTP and gRPC frontends and the metrics endpoint; return the
    exit status.

    Every port is bound before any model loads, so a busy port fails fast. On exit the
    gRPC service lets in-flight RPCs finish, then the engine drains; the metrics endpoint
    keeps answering while the engine drains and stops with it.
    """
    listeners = open_listeners(options)
    if listeners is None:
        return 1
    sock, metrics_sock = listeners
    server = Server(options)
    server.add_log_settings_observer(apply_log_settings)  # --log-* flags and /v2/logging
    grpc_listener = open_grpc_listener(server, options) if options.allow_grpc else None
    if options.allow_grpc and grpc_listener is None:
        _close(sock, metrics_sock)
        return 1
    try:
        await server.start()
    except WorkbenchError as exc:
        log.error("%s", exc.message)
        _close(sock, metrics_sock)
        if grpc_listener is not None:
            await grpc_listener[0].stop(None)
        return 1
    host, port = sock.getsockname()[:2]
    http = http_service(server, options)
    async with contextlib.AsyncExitStack() as services:
        if metrics_sock is not None:
            await services.enter_async_context(serve_metrics(server, options, metrics_sock))
        if grpc_listener is not None:
            await services.enter_async_context(serve_grpc(*grpc_listener, options))
            http.on_exit.append(partial(stop_accepting_grpc, grpc_listener[0], options))
        log.info("Started HTTPService at %s:%d", host, port)
        try:
            await http.serve(sockets=[sock])
        finally:
            await _drain(server, options, http.exit_started)
    return 0


def _close(*listeners: socket.socket | None) -> None:
    for listener in listeners:
        if listener is not None:
            listener.close()


async def _drain(server: Server, options: ServerOptions, started: float | None) -> None:
    """Stop the engine: queued and executing requests finish, then models unload. The HTTP
    drain and this one share one ``--exit-timeout-secs`` budget, counted from the signal."""
    budget = options.exit_timeout_secs
    if budget and started is not None:
        budget = max(0.0, budget - (time.monotonic() - started))
    log.info("stopping: waiting for in-flight requests (up to %.1fs)", budget)
    try:
        await asyncio.wait_for(server.stop(), timeout=budget if options.exit_timeout_secs else None)
        log.info("all models unloaded; exiting")
    except TimeoutError:
        log.warning("exit timeout reached; exiting with requests still in flight")


def run(options: ServerOptions) -> int:
    """Blocking entry: configure logging, run :func:`serve` on uvloop when available."""
    configure_logging(options.log_verbose)
    try:
        import uvloop

        return uvloop.run(serve(options))
    except ImportError:
        return asyncio.run(serve(options))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(run(ServerOptions()))
