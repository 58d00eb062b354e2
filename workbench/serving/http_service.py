"""The HTTP listener of a host: uvicorn serving the v2 REST frontend on a pre-bound socket.

``workbench serve`` runs it in the foreground and lets it own SIGINT/SIGTERM
(:class:`HTTPService`); a host that owns the signals itself, as the Jupyter server does, runs
it in the background without (:class:`EmbeddedHTTPService`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import socket
import time
from collections.abc import Callable, Collection, Iterator
from types import FrameType

import uvicorn

from workbench import Server, ServerOptions
from workbench.frontends.http import create_app
from workbench.frontends.http.connection_guard import ConnectionLimits, GuardedHttpToolsProtocol
from workbench.serving.countdown import count_down

log = logging.getLogger("workbench")


def _report(left: int, connections: Collection[object]) -> None:
    log.info("Timeout %d: Found %d HTTP service connections", left, len(connections))


# overrides uvicorn.Server's startup/shutdown/handle_exit/capture_signals and reads its
# server_state: checked by tests/architecture/test_library_internals.py (uvicorn's bound in pyproject.toml)
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
        #: called once the listener serves, with SIGINT/SIGTERM already captured: a
        #: "ready" line printed here is never followed by a signal that kills the process
        #: undrained (uvicorn installs its handlers only inside ``serve``)
        self.on_started: list[Callable[[], None]] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            for callback in self.on_started:
                callback()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown (listener closed, live connections served until they close,
        up to ``timeout_graceful_shutdown``), logging tritonserver's countdown each second
        while connections are open: ``Timeout N: Found M HTTP service connections``."""
        countdown = asyncio.ensure_future(self._count_down())
        try:
            await super().shutdown(sockets)
        finally:
            countdown.cancel()

    async def _count_down(self) -> None:
        await count_down(int(self.config.timeout_graceful_shutdown or 0), lambda: self.server_state.connections,
                         _report, stop_at_zero=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            self.exit_started = time.monotonic()
            log.info("received %s: no new requests accepted; finishing in-flight ones",
                     signal.Signals(sig).name)
            for callback in self.on_exit:
                callback()
        super().handle_exit(sig, frame)

    @staticmethod
    def _while_draining(sig: int, frame: FrameType | None) -> None:
        log.info("received %s again: still finishing in-flight requests (the exit timeout bounds it)",
                 signal.Signals(sig).name)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGINT / SIGTERM start the graceful shutdown; once it has started they stay
        captured after the HTTP listener stops, for the engine's drain that follows (a second
        signal there, e.g. a supervisor's repeated SIGTERM, killed the process with requests
        still executing). ``--exit-timeout-secs`` bounds the drain."""
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, self._while_draining if self.exit_started is not None else handler)


class EmbeddedHTTPService(HTTPService):
    """The HTTP service inside another host's process: it installs no signal handler (the
    host keeps its own) and stops when the host sets ``should_exit``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def http_service(server: Server, options: ServerOptions, *, embedded: bool = False) -> HTTPService:
    """The uvicorn server for the v2 HTTP frontend of ``server``; ``embedded``: an
    :class:`EmbeddedHTTPService` (no signal handling). Connections are capped and timed as
    ``options.http_*`` say (:mod:`workbench.frontends.http.connection_guard`); on exit, live
    connections are served through ``exit_timeout_secs`` as Triton's (embedded, or with
    ``reuse_http_port``: ``Connection: close`` at once, so clients move to the other
    listener)."""
    # a server sharing its port (--reuse-http-port: the headless switch's child) hands its
    # clients over to the other listener at once instead of serving them through the drain
    limits = ConnectionLimits.from_options(options, serve_through_drain=not (embedded or options.reuse_http_port))
    protocol = functools.partial(GuardedHttpToolsProtocol, limits=limits)
    config = uvicorn.Config(
        create_app(server),
        log_level="debug" if options.log_verbose else "warning",
        access_log=options.log_verbose > 0,
        timeout_graceful_shutdown=int(options.exit_timeout_secs) or None,
        lifespan="off",
        server_header=False,
        proxy_headers=False,  # no X-Forwarded-* rewriting on the hot path
        date_header=False,
        timeout_keep_alive=options.http_keepalive_timeout,  # type: ignore[arg-type]  # uvicorn says int; floats work
        http=protocol,  # type: ignore[arg-type]  # limits + head and body in one write
    )
    return (EmbeddedHTTPService if embedded else HTTPService)(config)


__all__ = ["EmbeddedHTTPService", "HTTPService", "http_service"]
