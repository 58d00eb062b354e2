"""uvicorn's httptools protocol, with each response's head and body sent in one write.

uvicorn writes an HTTP response in two ``transport.write`` calls (status line and
headers, then the body). With TCP_NODELAY (uvloop's default) that is two send
syscalls and two TCP segments per response, and on the loopback both syscalls
run the receiver's TCP processing on the event-loop thread while it holds the
GIL. Holding the head back until the body follows makes it one ``writelines``
(one ``writev``, one segment for the client to read); the effect on throughput is
in bench/RESULTS.md ("Issue 3: one write per response"). Parsing, flow control,
keep-alive and ASGI handling stay uvicorn's own.

The protocol also tells the app when its client goes away: each request's scope carries
``scope["extensions"][DISCONNECT_EXTENSION]``, the connection's set of callbacks, and
``connection_lost`` calls every callback in it (no argument). An infer request registers one
while it waits for the engine (:class:`~workbench.frontends.http.infer_asgi.DisconnectWatch`),
which costs a set insertion instead of a watcher task per request awaiting ASGI
``receive`` for ``http.disconnect``.

uvicorn strips a header value's trailing whitespace (RFC 9110's OWS); Triton's HTTP server
(libevhtp) keeps it, and ``--http-header-forward-pattern`` forwards the value as sent
(L0_parameters ``test_headers``). The values it stripped are kept, as sent, in
``scope["extensions"][UNTRIMMED_EXTENSION]``, and :func:`sent_headers` gives the request's
headers with them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

# an undocumented uvicorn module, subclassed with its callbacks and state (parser, headers,
# scope, cycle): checked by tests/architecture/test_library_internals.py (uvicorn's bound in pyproject.toml)
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: the ASGI scope extension holding the connection's disconnect callbacks (a ``set``)
DISCONNECT_EXTENSION = "workbench.disconnect"
#: the ASGI scope extension holding ``(index in scope["headers"], value as sent)`` of each
#: header whose trailing whitespace uvicorn stripped (absent when none was)
UNTRIMMED_EXTENSION = "workbench.untrimmed_headers"
_OWS = (b" ", b"\t")


def sent_headers(scope: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
    """``scope["headers"]`` with each value as the client sent it (trailing whitespace
    kept, as Triton's HTTP server gives header values)."""
    headers = scope["headers"]
    untrimmed = scope.get("extensions", {}).get(UNTRIMMED_EXTENSION)
    if not untrimmed:
        return headers
    headers = list(headers)
    for index, value in untrimmed:
        headers[index] = (headers[index][0], value)
    return headers


class CoalescingTransport:
    """A transport proxy that keeps back a response head until the next write.

    The head (a write that starts with ``HTTP/``) is sent together with the next write,
    or at the end of the current event-loop iteration when no write follows in the same
    iteration (streamed responses). Writes keep their order; everything else is the
    wrapped transport's.

    Args:
        transport: the connection's real transport.
        loop: the event loop the protocol runs on.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif data[:5] == b"HTTP/":
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def writelines(self, chunks) -> None:
        self._flush()
        self._transport.writelines(chunks)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """``uvicorn.Config(http=...)`` class: uvicorn's httptools protocol over a
    :class:`CoalescingTransport`.

    A request with both ``Transfer-Encoding: chunked`` and ``Content-Length`` is read as
    chunked (RFC 9112 6.3: Transfer-Encoding wins; Triton's libevhtp reads it too, while
    llhttp refuses it by default), and its connection is closed after the response, as
    nginx does, so no byte of it can be taken for a next request (request smuggling).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)
        #: callbacks to call when the connection is lost (see the module docstring)
        self.disconnect_callbacks: set[Any] = set()
        self._extensions: dict[Any, Any] = {DISCONNECT_EXTENSION: self.disconnect_callbacks}
        self._untrimmed: list[tuple[int, bytes]] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        if value[-1:] in _OWS:  # uvicorn stripped it: kept as sent (see the module docstring)
            self._untrimmed.append((len(self.headers) - 1, value))

    def on_headers_complete(self) -> None:
        if self._untrimmed:
            self.scope["extensions"] = {**self._extensions, UNTRIMMED_EXTENSION: self._untrimmed}
            self._untrimmed = []
        else:
            self.scope["extensions"] = self._extensions
        super().on_headers_complete()
        names = dict(self.headers)  # built in C: cheaper than a set comprehension per request
        if b"transfer-encoding" in names and b"content-length" in names and self.cycle is not None:
            self.cycle.keep_alive = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        callbacks = list(self.disconnect_callbacks)
        self.disconnect_callbacks.clear()
        for callback in callbacks:
            callback()


__all__ = ["DISCONNECT_EXTENSION", "UNTRIMMED_EXTENSION", "CoalescingHttpToolsProtocol", "CoalescingTransport",
           "sent_headers"]
