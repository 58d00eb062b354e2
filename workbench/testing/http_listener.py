"""The v2 HTTP frontend on a real uvicorn listener inside the test's event loop, with raw
socket clients: for tests of what only a real connection shows (timeouts, connection caps,
client disconnects), faster than a ``workbench serve`` process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn

from workbench import Server, ServerOptions
from workbench.serving.http_service import http_service
from workbench.serving.sockets import bind_socket


class RawClients:
    """Raw TCP connections to the listener at ``port`` (``127.0.0.1``), closed at the end;
    ``server`` is the engine, ``service`` the uvicorn server (its ``server_state`` holds the
    open connections and the running request tasks)."""

    def __init__(self, server: Server, service: uvicorn.Server, port: int) -> None:
        self.server = server
        self.service = service
        self.port = port
        self.writers: list[asyncio.StreamWriter] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new connection's reader and writer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writers.append(writer)
        return reader, writer

    async def close(self) -> None:
        """Close every connection made."""
        for writer in self.writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def http_listener(options: ServerOptions) -> AsyncIterator[RawClients]:
    """A started :class:`Server` for ``options`` behind :func:`http_service` on a free port of
    ``127.0.0.1``. The socket listens before uvicorn starts, so clients may connect at once."""
    async with Server(options) as server:
        service = http_service(server, options, embedded=True)
        sock = bind_socket("127.0.0.1", 0)
        task = asyncio.create_task(service.serve(sockets=[sock]))
        clients = RawClients(server, service, sock.getsockname()[1])
        try:
            yield clients
        finally:
            await clients.close()
            service.should_exit = True
            await task


__all__ = ["RawClients", "http_listener"]
