"""The standard v2 ports of one engine: HTTP (8000), gRPC (8001) and metrics (8002).

Every port is bound before any model loads, so a busy port fails fast with
tritonserver's one-line error. ``workbench serve`` then serves them in the foreground
until a signal (:mod:`workbench.hosts.serve`); a host with its own event loop and signal
handling (the Jupyter extension) serves them in the background with :class:`OpenPorts`.
Port 0 binds a free port; the bound ports are read back from the sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from dataclasses import dataclass

import grpc

from workbench import Server, ServerOptions
from workbench.serving.grpc_service import DRAIN_GRACE_S, open_grpc_listener, serve_grpc, stop_accepting_grpc
from workbench.serving.http_service import http_service
from workbench.serving.listeners import own_listeners
from workbench.serving.metrics_service import serve_metrics
from workbench.serving.sockets import bind_socket, port_is_free

log = logging.getLogger("workbench")


def _in_use(service: str, address: str, port: int, reason: str = "already in use") -> None:
    log.error("failed to start %s: Unavailable - Socket '%s:%d' %s", service, address, port, reason)


def open_listener(service: str, address: str, port: int, *,
                  reuse_port: bool = False) -> socket.socket | None:
    """Bind ``address:port`` for ``service`` (``reuse_port``: with ``SO_REUSEPORT``), or log
    Triton's one-line error and return None.

    The message follows tritonserver: ``failed to start <service>: Unavailable - Socket
    '<address>:<port>' already in use``.
    """
    try:
        return bind_socket(address, port, reuse_port=reuse_port)
    except OSError as exc:
        _in_use(service, address, port, "already in use" if exc.errno == errno.EADDRINUSE else str(exc.strerror))
        return None


#: ``grpc_max_connection_age_ms`` of an engine whose ports can be switched (when not set):
#: how long the switch waits at most for gRPC connections to leave the side that stops
SWITCH_GRPC_MAX_AGE_MS = 10_000


def switchable_options(options: ServerOptions) -> ServerOptions | None:
    """``options`` with the three ``reuse_*_port`` set, for an engine whose ports a headless
    ``workbench serve`` may take over later (:mod:`workbench.serving.switch`), and gRPC
    connections recycled every :data:`SWITCH_GRPC_MAX_AGE_MS` unless set: each port is
    checked free first, so the engine still fails, with Triton's line, on a port another
    server holds (shared or not). None when one is busy."""
    wanted = [("HTTP service", options.http_address, options.http_port)]
    if options.allow_metrics:
        wanted.append(("Metrics service", options.metrics_address, options.metrics_port))
    if options.allow_grpc:
        wanted.append(("GRPC service", options.grpc_address, options.grpc_port))
    for service, address, port in wanted:
        if not port_is_free(address, port):
            _in_use(service, address, port)
            return None
    return options.model_copy(update={
        "reuse_http_port": True, "reuse_grpc_port": True, "reuse_metrics_port": True,
        "grpc_max_connection_age_ms": options.grpc_max_connection_age_ms or SWITCH_GRPC_MAX_AGE_MS})


@dataclass
class BoundPorts:
    """The bound, not yet serving, listeners of one engine.

    Attributes:
        http: the HTTP socket.
        metrics: the metrics socket (None without ``allow_metrics``).
        grpc: the gRPC server and its bound port (None without ``allow_grpc``).
    """

    http: socket.socket
    metrics: socket.socket | None
    grpc: tuple[grpc.aio.Server, int] | None

    def ports(self) -> dict[str, int]:
        """The bound port numbers: ``{"http": p, "grpc": p, "metrics": p}``, without the
        services that are off."""
        bound = {"http": self.http.getsockname()[1]}
        if self.grpc is not None:
            bound["grpc"] = self.grpc[1]
        if self.metrics is not None:
            bound["metrics"] = self.metrics.getsockname()[1]
        return bound

    def listeners(self) -> list[socket.socket]:
        """The listening sockets: HTTP, metrics, and copies of gRPC's (grpc-core owns it;
        found by port). The caller closes the gRPC copies (:meth:`release`)."""
        socks = [self.http] + ([self.metrics] if self.metrics is not None else [])
        if self.grpc is not None:
            socks += own_listeners(self.grpc[1])
        return socks

    def release(self, socks: list[socket.socket]) -> None:
        """Close the copies among ``socks`` (from :meth:`listeners`); the owned ones stay."""
        for sock in socks:
            if sock is not self.http and sock is not self.metrics:
                sock.close()

    async def close(self) -> None:
        """Release every port without having served (start-up failed)."""
        for sock in (self.http, self.metrics):
            if sock is not None:
                sock.close()
        if self.grpc is not None:
            await self.grpc[0].stop(None)


def bind_ports(server: Server, options: ServerOptions) -> BoundPorts | None:
    """Bind HTTP, then metrics (``allow_metrics``), then gRPC (``allow_grpc``) for
    ``server``; on the first port that cannot be bound, log Triton's error line, release
    the others and return None."""
    http = open_listener("HTTP service", options.http_address, options.http_port,
                         reuse_port=options.reuse_http_port)
    if http is None:
        return None
    metrics = None
    if options.allow_metrics:
        metrics = open_listener("Metrics service", options.metrics_address, options.metrics_port,
                                reuse_port=options.reuse_metrics_port)
        if metrics is None:
            http.close()
            return None
    grpc_listener = open_grpc_listener(server, options) if options.allow_grpc else None
    if options.allow_grpc and grpc_listener is None:
        http.close()
        if metrics is not None:
            metrics.close()
        return None
    return BoundPorts(http, metrics, grpc_listener)


class OpenPorts:
    """Serve the bound ports of a started engine in the background of the running event loop.

    No signal handler is installed: the host keeps its own and calls :meth:`stop_accepting`,
    drains the engine, then calls :meth:`close`, the order ``workbench serve`` follows.

    Args:
        server: the engine (started by the host).
        options: its options (addresses, exit timeout, log verbosity).
        bound: the listeners from :func:`bind_ports`.
    """

    def __init__(self, server: Server, options: ServerOptions, bound: BoundPorts) -> None:
        self.bound = bound
        self._server = server
        self._options = options
        self._http = http_service(server, options, embedded=True)
        self._http_task: asyncio.Task | None = None
        self._services = contextlib.AsyncExitStack()
        self._exit_started: float | None = None  # time.monotonic() at stop_accepting

    async def start(self) -> None:
        """Start serving metrics, gRPC and HTTP; returns once HTTP accepts connections.

        Raises:
            RuntimeError: the HTTP service stopped during start-up.
        """
        bound = self.bound
        if bound.metrics is not None:
            await self._services.enter_async_context(serve_metrics(self._server, self._options, bound.metrics))
        if bound.grpc is not None:
            await self._services.enter_async_context(serve_grpc(*bound.grpc, self._options))
        self._http_task = asyncio.create_task(self._http.serve(sockets=[bound.http]))
        while not self._http.started:
            if self._http_task.done():
                await self._services.aclose()
                bound.http.close()
                raise RuntimeError(f"the HTTP service stopped during start-up: {self._http_task!r}")
            await asyncio.sleep(0.01)
        host, port = bound.http.getsockname()[:2]
        log.info("Started HTTPService at %s:%d", host, port)

    async def stop_accepting(self) -> None:
        """Refuse new connections; returns once in-flight HTTP requests are answered (up to
        ``exit_timeout_secs``; a request arriving on an idle keep-alive connection meanwhile
        is answered with ``Connection: close``). RPCs on open gRPC connections are served
        for ``DRAIN_GRACE_S`` more, then gRPC's graceful stop (GOAWAY) ends in :meth:`close`.
        Idempotent."""
        if self._http_task is None:
            return
        if not self._http.should_exit:
            self._exit_started = time.monotonic()
            self._http.should_exit = True
            if self.bound.grpc is not None:
                stop_accepting_grpc(self.bound.grpc[0], self._options, self.bound.grpc[1])
        await self._http_task

    async def close(self) -> None:
        """Stop every service (after :meth:`stop_accepting` and the engine's drain) and
        release the ports. Idempotent."""
        await self.stop_accepting()
        if self.bound.grpc is not None and self._exit_started is not None:
            # RPCs on the gRPC connections still open are served until gRPC's stop
            await asyncio.sleep(max(0.0, self._exit_started + DRAIN_GRACE_S - time.monotonic()))
        await self._services.aclose()
        self.bound.http.close()


__all__ = ["SWITCH_GRPC_MAX_AGE_MS", "BoundPorts", "OpenPorts", "bind_ports", "bind_socket", "open_listener",
           "switchable_options"]
