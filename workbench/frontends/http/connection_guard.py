"""Connection limits of the HTTP listener: how many connections, how long and how big a head.

uvicorn leaves a connection that never completes a request head open for ever, with no cap
on their number or a head's size (slowloris). :class:`GuardedHttpToolsProtocol` adds, per
connection: a deadline for each request head (``http_header_timeout``, s: 408, or a silent
close when no byte came); an inactivity timeout while a body is read (``http_body_timeout``,
s: 408); a head-size cap (``http_max_header_size``, bytes: 431); and a lingering close after
a response sent before its body arrived (:meth:`GuardedHttpToolsProtocol._linger`: FIN, the
rest dropped unparsed for at most the keep-alive timeout). For the listener, a cap on open
connections (``http_max_connections``): at the cap a new connection closes the one idle
longest, else the one whose body is furthest behind ``http_body_min_rate`` bytes/s (408,
after :data:`MIN_RATE_GRACE_S`, as mod_reqtimeout's ``MinRate``), else it gets 503. None of
these are tritonserver flags (beyond Triton).

Draining (:meth:`GuardedHttpToolsProtocol.shutdown`, policy :attr:`ConnectionLimits.drain_s`):
the listener closes at once; ``workbench serve`` keeps live connections (idle ones too)
served until the client or the keep-alive timeout closes them or ``--exit-timeout-secs``
ends (Triton's ``HTTPServer::Stop``), each response then carrying ``Connection: close``; the
embedded listener (Jupyter host, headless switch) keeps an idle connection
:data:`DRAIN_IDLE_GRACE_S` more and answers every request with ``Connection: close``. User
view and why: docs/serve.md, "HTTP connection limits" and the drain at SIGTERM."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson

from workbench.frontends import fd_budget
from workbench.frontends.fd_budget import AUTO_MAX_CONNECTIONS
from workbench.frontends.http.protocol import CoalescingHttpToolsProtocol

#: seconds an idle keep-alive connection stays open once the server drains (see above)
DRAIN_IDLE_GRACE_S = 1.0

#: seconds a request body may take before ``http_body_min_rate`` counts (its first bytes'
#: latency); after that it must have arrived at the rate since its head ended
MIN_RATE_GRACE_S = 1.0

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits one HTTP listener applies (seconds and bytes; see ``ServerOptions``)."""

    max_connections: int
    header_timeout_s: float
    body_timeout_s: float
    max_header_size: int
    body_min_rate: float = 0.0
    """bytes/s (0: no slow-body eviction)"""
    drain_s: float | None = None
    """seconds live connections are served, keep-alive, once the drain starts (Triton's: the
    exit timeout; ``inf``: until they close); None: the embedded policy (``Connection: close``
    on every request of a draining connection, idle ones closed after
    :data:`DRAIN_IDLE_GRACE_S`)"""

    @classmethod
    def from_options(cls, options: Any, *, serve_through_drain: bool = False) -> ConnectionLimits:
        """From ``ServerOptions``; ``http_max_connections=0`` becomes :func:`auto_max_connections`.
        ``serve_through_drain``: Triton's drain (:attr:`drain_s` = ``exit_timeout_secs``, 0 =
        no limit), for ``workbench serve``."""
        return cls(
            max_connections=options.http_max_connections or auto_max_connections(),
            header_timeout_s=options.http_header_timeout,
            body_timeout_s=options.http_body_timeout,
            max_header_size=options.http_max_header_size,
            body_min_rate=options.http_body_min_rate,
            drain_s=(options.exit_timeout_secs or float("inf")) if serve_through_drain else None,
        )


def body_deficit(received: int, elapsed: float, min_rate: float) -> float:
    """Bytes a request body is behind ``min_rate`` (bytes/s) after ``elapsed`` seconds since
    its head ended, with ``received`` bytes of it read; more than 0: too slow. The first
    :data:`MIN_RATE_GRACE_S` seconds are free."""
    return min_rate * (elapsed - MIN_RATE_GRACE_S) - received


def auto_max_connections() -> int:
    """Half the soft ``RLIMIT_NOFILE`` (a quarter is gRPC's, the rest for models, metrics and
    logs: :mod:`workbench.frontends.fd_budget`), at least 16, at most :data:`AUTO_MAX_CONNECTIONS`."""
    return fd_budget.auto_max_connections(fd_budget.HTTP_SHARE)


# uses uvicorn's private protocol state (connections, pipeline, cycle, flow, transport, parser
# callbacks): checked by tests/architecture/test_library_internals.py (uvicorn's bound in pyproject.toml)
class GuardedHttpToolsProtocol(CoalescingHttpToolsProtocol):
    """uvicorn's httptools protocol (with coalesced writes) under :class:`ConnectionLimits`.

    Give it to ``uvicorn.Config(http=...)`` as ``functools.partial(GuardedHttpToolsProtocol,
    limits=...)``.
    """

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._last_body = 0.0
        self._body_started = 0.0  # loop time when the current request's head ended
        self._body_bytes = 0  # bytes of the current request's body received so far
        self._in_body = False  # head complete, body not yet
        self._in_head = True  # waiting for (the rest of) a request head
        self._head_bytes = 0  # bytes received since the head began (an upper bound)
        self._head_begun = False
        self._rejected = False
        self._draining = False
        self.idle_since = self.loop.time()

    # --- connection cap ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if (len(self.connections) > self.limits.max_connections and not self._close_longest_idle()
                and not self._close_slowest_body()):
            self._reject(503, "too many connections: every connection has a request in progress")
            return
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timeout)

    def busy(self) -> bool:
        """Whether a request is in progress (head complete, response not yet complete)."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _close_longest_idle(self) -> bool:
        idle = [c for c in self.connections
                if isinstance(c, GuardedHttpToolsProtocol) and c is not self and not c.busy()]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.idle_since)
        self.connections.discard(victim)  # gone now, for the next connection's count
        victim.transport.close()
        return True

    def _close_slowest_body(self) -> bool:
        """Close (408) the connection whose request body is furthest behind the minimum rate
        (:func:`body_deficit`), if one is behind; a body the server is not reading (flow
        control paused) is never the client's fault."""
        rate = self.limits.body_min_rate
        if rate <= 0:
            return False
        now = self.loop.time()
        behind = [(body_deficit(c._body_bytes, now - c._body_started, rate), c) for c in self.connections
                  if isinstance(c, GuardedHttpToolsProtocol) and c is not self and c._in_body
                  and not c._rejected and not c.flow.read_paused]
        deficit, victim = max(behind, key=lambda pair: pair[0], default=(0.0, None))
        if victim is None or deficit <= 0:
            return False
        self.connections.discard(victim)
        victim._abandon(408, f"request body slower than {rate:g} bytes/s while every connection "
                             "was in use (--http-body-min-rate)")
        return True

    # --- graceful shutdown ------------------------------------------------------------------

    def shutdown(self) -> None:
        """Start this connection's drain (uvicorn calls it for every connection once the
        listener is closed). With :attr:`ConnectionLimits.drain_s` (Triton's): an idle
        connection stays open for that many seconds (its keep-alive timeout still closes it)
        and a request on it is served, answered with ``Connection: close`` (beyond Triton,
        which keeps it alive: a proxy that keeps sending on its pooled connections would hold
        the drain for the whole exit timeout); a connection still open then is closed when
        idle, after its response when busy. Without: a request in progress, and any that arrives in the
        next :data:`DRAIN_IDLE_GRACE_S` seconds, is answered with ``Connection: close``; a
        connection still idle then is closed."""
        drain_s = self.limits.drain_s
        self._draining = True
        if drain_s is not None:
            if self.busy() and self.cycle is not None:
                self.cycle.keep_alive = False  # the request in progress is this connection's last
            if drain_s != float("inf"):
                self.loop.call_later(drain_s, self._end_drain)
            return
        if self.busy():
            super().shutdown()  # keep_alive off: closed after this response
            return
        self.loop.call_later(DRAIN_IDLE_GRACE_S, self._close_if_idle)

    def _end_drain(self) -> None:
        """The exit timeout ran out: no more requests on this connection."""
        self._draining = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False
        self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self.transport.is_closing():
            return
        if self.busy() or self._head_begun:  # a request came: closed after its response
            if self.cycle is not None:
                self.cycle.keep_alive = False
            return
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    # --- head: size and deadline ------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.limits.max_header_size:
            self._reject_oversized_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True
        if self._head_timer is None:  # a later request on a keep-alive connection
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timeout)

    def head_size(self) -> int:
        """The request head's size so far: URL plus header names and values, 4 bytes each for
        ``: `` and CRLF (counted once the head is parsed: no Python call per header)."""
        headers = self.headers
        return len(self.url) + 4 * len(headers) + sum(map(len, chain.from_iterable(headers)))

    def on_headers_complete(self) -> None:
        if self._rejected:
            return
        if self.head_size() > self.limits.max_header_size:
            self._reject_oversized_head()
            return
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False  # the last request of this connection
        self._last_body = self._body_started = self.loop.time()
        self._body_bytes, self._in_body = 0, True
        self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timeout)

    def _reject_oversized_head(self) -> None:
        self._reject(431, f"request head larger than {self.limits.max_header_size} bytes "
                          "(--http-max-header-size)")

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self._rejected or self.transport.is_closing():
            return
        if not self._head_begun and self._head_bytes == 0:
            self._rejected = True
            self.transport.close()  # never sent a byte: nothing to answer
            return
        self._reject(408, f"request head not received within {self.limits.header_timeout_s:g} s "
                          "(--http-header-timeout)")

    # --- body: inactivity timeout -----------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        if self._rejected:
            return
        self._last_body = self.loop.time()
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._rejected:
            return
        super().on_message_complete()
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._in_head, self._head_bytes, self._head_begun = True, 0, False

    def _body_timeout(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if self._rejected or self.transport.is_closing() or cycle is None or not cycle.more_body:
            return
        waited = self.loop.time() - self._last_body
        if self.flow.read_paused or waited < self.limits.body_timeout_s:  # the server is not reading
            delay = max(self.limits.body_timeout_s - waited, 0.05)
            self._body_timer = self.loop.call_later(delay, self._body_timeout)
            return
        self._abandon(408, f"request body paused for more than {self.limits.body_timeout_s:g} s "
                           "(--http-body-timeout)")

    def _abandon(self, status: int, message: str) -> None:
        """:meth:`_reject` a request whose body is being read: its application sees
        ``http.disconnect`` and sends nothing."""
        cycle = self.cycle
        if cycle is not None:
            cycle.disconnected = True
            cycle.message_event.set()
        self._reject(status, message)

    def on_response_complete(self) -> None:
        cycle = self.cycle
        early = cycle is not None and cycle.more_body and not self.pipeline and not self._rejected
        super().on_response_complete()  # arms the keep-alive timer: the lingering's bound
        if early and not self.transport.is_closing():
            self._linger()
        if not self.busy():
            self.idle_since = self.loop.time()

    def _linger(self) -> None:
        """Answered before its body arrived (a body over its limit, a 405): end the connection
        (uvicorn would read and parse the whole rest, GBs maybe, to keep it alive). The answer
        is followed by a FIN (half-close); what the client still sends is dropped unparsed
        until it closes or the keep-alive timeout ends the connection, so a client that sends
        its whole body before reading reads the answer instead of a reset (nginx's lingering
        close)."""
        self._rejected = True  # no further request on this connection: input dropped
        self._cancel_timers()
        self.transport.write_eof()

    # --- answering --------------------------------------------------------------------------

    def _reject(self, status: int, message: str) -> None:
        """Answer ``status`` with Triton's error shape and close the connection."""
        self._rejected = True
        self._cancel_timers()
        if self.transport.is_closing():
            return
        body = orjson.dumps({"error": message})
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                             % (status, _REASONS[status], len(body), body))
        self.transport.close()


__all__ = ["AUTO_MAX_CONNECTIONS", "ConnectionLimits", "GuardedHttpToolsProtocol",
           "auto_max_connections"]
