"""Panel 1.9's queue of websocket writes, made lossless: every dashboard change a server
session queues reaches the browser.

The defect (Panel 1.9.x, ``panel.io.document``): when a document change is made while the
session's websocket is busy (Bokeh is writing a message, holding the socket's write lock),
Panel serializes it into a PATCH-DOC message, queues it (``_WRITE_MSGS[doc]``), marks the
document as having queued writes (``_WRITE_BLOCK[doc]``) and starts a writer task
(``_dispatch_msgs``). A writer that was already writing the previous queue awaits its
writes; if they complete in the same loop iteration as the new change is queued, that writer
resumes first, sees nothing left *of its own*, and clears ``_WRITE_BLOCK``; the new writer
then finds the mark gone and returns without writing. The message stays queued until some
later change happens to flush it: the page shows the old state (the Models table stuck on
READY after Unload, a banner that never arrives), and when the next change does flush it, it
reaches the browser out of order. It is timing-dependent (a busy machine, a change right after
an action's banner) and hits every tab of the Jupyter-hosted dashboard and of ``panel serve``.

:func:`install` replaces that writer with :func:`dispatch_queued`: one writer per document
at a time, which writes until the queue is empty and clears the mark only then (with no
``await`` between the last check and the clearing, so no change can slip in between). Panel's
own serialization, socket writes and write-lock checks are used unchanged. Nothing is
replaced in a Panel whose queue is not this one (a newer Panel's rewritten queue).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

#: seconds between looks at a socket that Bokeh is writing to (Panel's own pause)
RETRY_S = 0.01
#: the documents whose queue a writer is emptying now
_writing: set[Any] = set()


# Panel's private write queue, Bokeh's connection._socket and tornado's Lock._block._value are
# checked by tests/architecture/test_library_internals.py (the bounds in pyproject.toml's `ui` extra)
def _panel_queue() -> Any | None:
    """Panel's ``panel.io.document`` module where its writer is the one :func:`install`
    corrects (1.9's ``_WRITE_MSGS`` / ``_WRITE_BLOCK`` queue), else None."""
    from panel.io import document

    needed = ("_WRITE_MSGS", "_WRITE_BLOCK", "_WRITE_FUTURES", "_dispatch_msgs",
              "_run_write_futures", "dispatch_tornado", "dispatch_django", "extra_socket_handlers")
    if all(hasattr(document, name) for name in needed) and not hasattr(document, "_WRITE_EVENTS"):
        return document
    return None


def _busy(connection: Any) -> bool:
    """Bokeh is writing a message to ``connection``'s socket (holds its write lock)."""
    lock = getattr(connection._socket, "write_lock", None)  # a tornado.locks.Lock
    return lock is not None and lock._block._value == 0  # as Panel checks it


def _write(document: Any, connection: Any, message: Any) -> list:
    """Write ``message`` to ``connection`` as Panel does (by socket type); its futures."""
    from tornado.websocket import WebSocketHandler

    socket = connection._socket
    if isinstance(socket, WebSocketHandler):
        return document.dispatch_tornado(connection, msg=message)
    handler = document.extra_socket_handlers.get(type(socket))
    if handler is not None:
        return handler(connection, msg=message)
    return document.dispatch_django(connection, msg=message)


async def dispatch_queued(doc: Any) -> None:
    """Write every message queued for ``doc``'s connections, in the order queued, until none
    is left (also those queued while it writes), then clear the document's queued-writes
    mark. A connection Bokeh is writing to is retried every :data:`RETRY_S` seconds, its
    messages kept ahead of newer ones. A second call while one writes returns at once (the
    running one writes what it queued). Replaces Panel 1.9's ``_dispatch_msgs`` (see the
    module docstring)."""
    document = _panel_queue()
    if document is None or doc in _writing:
        return
    _writing.add(doc)
    try:
        while document._WRITE_MSGS.get(doc):
            queued = document._WRITE_MSGS.pop(doc)
            waiting = {conn: msgs for conn, msgs in queued.items() if _busy(conn)}
            if waiting:  # back to the head of the queue, before anything queued meanwhile
                newer = document._WRITE_MSGS.pop(doc, {})
                document._WRITE_MSGS[doc] = {
                    **{conn: msgs + newer.get(conn, []) for conn, msgs in waiting.items()},
                    **{conn: msgs for conn, msgs in newer.items() if conn not in waiting}}
            futures = [future for conn, msgs in queued.items() if conn not in waiting
                       for message in msgs for future in _write(document, conn, message)]
            if futures:
                document._WRITE_FUTURES.setdefault(doc, []).extend(futures)
                await document._run_write_futures(doc)
            if waiting:
                await asyncio.sleep(RETRY_S)
    finally:
        _writing.discard(doc)
        # nothing queued is left without a writer: clear the mark only when the queue is empty
        if not document._WRITE_MSGS.get(doc):
            document._WRITE_MSGS.pop(doc, None)
            document._WRITE_BLOCK.pop(doc, None)


def install() -> bool:
    """Use :func:`dispatch_queued` as Panel's writer of queued messages (idempotent).
    Returns whether it is in use (False: this Panel's queue is another one, left alone)."""
    document = _panel_queue()
    if document is None:
        return False
    if document._dispatch_msgs is not dispatch_queued:
        document._dispatch_msgs = dispatch_queued
        log.debug("workbench: Panel's queued websocket writes are written by dispatch_queued")
    return True


__all__ = ["dispatch_queued", "install"]
