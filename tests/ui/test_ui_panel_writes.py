"""Panel's queued websocket writes (``workbench.ui.shared.panel_writes``): a change queued while the
previous write completes still reaches the browser, in order.

Driven through Panel's own queueing (``schedule_write_events``, what a session's change does
when the socket is busy) with real Bokeh documents, events and protocol messages; only the
socket is a stand-in, registered where Panel takes non-tornado sockets
(``extra_socket_handlers``), whose writes complete when the test says so."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from bokeh.document import Document
from bokeh.document.events import ModelChangedEvent
from bokeh.models.widgets import Div  # not in the __all__ mypy reads of bokeh.models
from bokeh.protocol import Protocol
from panel.io import document as panel_document
from tornado.locks import Lock

from workbench.ui.shared.panel_writes import install

#: seconds a write may take to reach the socket (a deadline, not a measurement)
DEADLINE_S = 5.0


class _Connection:
    """A Bokeh server connection as Panel's writer sees it: its socket and protocol."""

    def __init__(self, socket: _Socket) -> None:
        self._socket = socket
        self.protocol = Protocol()


class _Socket:
    """A session's websocket: records the PATCH-DOC messages written to it (the ``text`` of
    each), each write completing when :meth:`complete` is called; Bokeh's write lock."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.pending: list[asyncio.Future] = []
        self.write_lock = Lock()
        self._written = asyncio.Condition()
        self._notifying: set[asyncio.Future] = set()

    def write(self, connection, msg) -> list[asyncio.Future]:
        self.texts.extend(event["new"] for event in msg.content["events"])
        future = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        notifying = asyncio.ensure_future(self._notify())
        self._notifying.add(notifying)  # a reference until done: the loop keeps only a weak one
        notifying.add_done_callback(self._notifying.discard)
        return [future]

    async def _notify(self) -> None:
        async with self._written:
            self._written.notify_all()

    def complete(self) -> None:
        """The writes so far reach the browser."""
        for future in self.pending:
            future.set_result(None)
        self.pending.clear()

    async def written(self, count: int) -> list[str]:
        """The texts once ``count`` are written (TimeoutError past :data:`DEADLINE_S`)."""
        try:
            async with self._written:
                await asyncio.wait_for(self._written.wait_for(lambda: len(self.texts) >= count),
                                       DEADLINE_S)
        except TimeoutError:
            pytest.fail(f"{count} messages queued, only {self.texts} written")
        return self.texts


@pytest.fixture
def session():
    """A document with a Div, one connection on a :class:`_Socket`; Panel's queue for the
    document emptied afterwards."""
    assert install()
    doc = Document()
    div = Div(text="")
    doc.add_root(div)
    socket = _Socket()
    # panel types its handlers Callable[[Any], None]; it calls handler(conn, msg=msg) and keeps the futures returned
    panel_document.extra_socket_handlers[_Socket] = socket.write  # type: ignore[assignment]  # panel mistypes it
    connection = _Connection(socket)
    try:
        yield SimpleNamespace(doc=doc, div=div, socket=socket, connection=connection)
    finally:
        del panel_document.extra_socket_handlers[_Socket]
        for queue in (panel_document._WRITE_MSGS, panel_document._WRITE_BLOCK,
                      panel_document._WRITE_FUTURES):
            queue.pop(doc, None)


def queue_change(session, text: str) -> None:
    """Change the Div's text as a session does while the socket is busy: Panel serializes it
    and queues it for a writer task."""
    event = ModelChangedEvent(session.doc, session.div, "text", text)
    panel_document.schedule_write_events(session.doc, [session.connection], [event])


async def test_a_change_queued_as_the_previous_write_completes_is_written(session) -> None:
    queue_change(session, "'add_sub': working…")
    assert await session.socket.written(1) == ["'add_sub': working…"]
    # the writer awaits that write; it completes in the loop iteration the next change is
    # queued in (the table's new rows right after the action's banner)
    session.socket.complete()
    queue_change(session, "UNAVAILABLE")
    assert await session.socket.written(2) == ["'add_sub': working…", "UNAVAILABLE"]
    session.socket.complete()
    queue_change(session, "READY")  # and the queue keeps working after that
    assert await session.socket.written(3) == ["'add_sub': working…", "UNAVAILABLE", "READY"]


async def test_changes_wait_for_a_busy_socket_and_keep_their_order(session) -> None:
    async with session.socket.write_lock:  # Bokeh writes a message of its own meanwhile
        for text in ("1", "2", "3"):
            queue_change(session, text)
            await asyncio.sleep(0.02)  # the writer looks at the busy socket in between
        assert session.socket.texts == []
    session.socket.complete()
    assert await session.socket.written(3) == ["1", "2", "3"]
    session.socket.complete()
    await asyncio.wait_for(_drained(session.doc), DEADLINE_S)


async def _drained(doc) -> None:
    """Until the document has no queued writes (its queued-writes mark cleared)."""
    while doc in panel_document._WRITE_BLOCK or panel_document._WRITE_MSGS.get(doc):
        await asyncio.sleep(0.01)
