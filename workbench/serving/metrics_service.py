"""The metrics listener of ``workbench serve``: ``GET /metrics`` on its own port (8002).

Runs in the same process and event loop as the HTTP frontend: a second uvicorn server
on its own pre-bound socket, serving :class:`workbench.frontends.metrics.MetricsFrontend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn

from workbench import Server, ServerOptions
from workbench.frontends.metrics import MetricsFrontend

log = logging.getLogger("workbench")


# capture_signals is uvicorn's undocumented hook: checked by tests/architecture/test_library_internals.py
class MetricsService(uvicorn.Server):
    """uvicorn's server without signal handling: the HTTP service owns SIGINT/SIGTERM and
    the host stops this one (``should_exit``) once the engine has drained."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_metrics(
    server: Server, options: ServerOptions, sock: socket.socket
) -> AsyncIterator[None]:
    """Serve Triton's metrics on ``sock`` (and sample CPU/GPU) until the block exits.

    Logs ``Started Metrics Service at <address>:<port>`` (Triton's line) once listening.
    """
    frontend = MetricsFrontend(server, options)
    config = uvicorn.Config(
        frontend.app,
        log_level="debug" if options.log_verbose else "warning",
        access_log=options.log_verbose > 0,
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=1,  # a scrape is short; never hold up the exit
    )
    service = MetricsService(config)
    host, port = sock.getsockname()[:2]
    async with frontend:
        task = asyncio.create_task(service.serve(sockets=[sock]))
        log.info("Started Metrics Service at %s:%d", host, port)
        try:
            yield
        finally:
            service.should_exit = True
            await task
