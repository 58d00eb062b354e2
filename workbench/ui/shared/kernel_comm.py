"""The inline (notebook) dashboard's browser messages, applied on the engine's loop.

The browser's changes arrive over a Jupyter comm, which JupyterLab 4.4+ / ipykernel 7+
handle on a subshell's thread, while the dashboard's background work changes the same Bokeh
document on the kernel's main loop; and Panel's notebook comm manager echoes back every
change the kernel pushed. Why both broke the dashboard: docs/jupyter.md, "The inline
dashboard's browser messages".

- :func:`apply_on_loop`: a Panel object's browser messages run on the engine's loop (the
  kernel's main loop); a message arriving on another thread is handed to that loop and the
  thread waits until it is applied, so Panel's acknowledgement (its flow control) follows the
  change and carries its error, and messages keep their order; one already on the loop's
  thread is applied at once.
- :func:`without_echoes` drops the echoes of the kernel's own changes first (Bokeh's server
  client drops those: ``event.sync`` false).
- :class:`PushedValues` records each value the kernel pushes (``ModelChanged`` of the comm's
  ``PATCH-DOC``); an event returning one of them, in order, is an echo and dropped, whatever
  listens to it (a stale echo would set the widget back).
- :func:`in_steps` splits a browser message holding property changes and a browser event (a key
  press, a click) into ordered parts, so the changes reach the widgets before the event's
  callback runs (Panel drops held changes when that callback changes a widget)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
from collections import deque
from collections.abc import Callable
from typing import Any

import panel as pn
from bokeh.core.types import ID
from bokeh.document import Document
from bokeh.models import ColumnDataSource

#: the browser's events of a data source's data: only ever echoes in this dashboard
DATA_EVENTS = frozenset({"ColumnsStreamed", "ColumnsPatched", "ColumnDataChanged"})


def _on_this_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` runs on the calling thread (or nowhere: then there is no other)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    return running is loop or not loop.is_running()


def on_loop(handle: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    """``handle`` wrapped to run on ``loop``'s thread: called from another thread, it is
    scheduled there (``loop.call_soon_threadsafe``, in call order) and the caller waits for
    its result; its exception is raised to the caller. Called on the loop's thread, or once
    the loop is closed or stopped, it runs at once."""

    @functools.wraps(handle)
    def run(*args: Any, **kwargs: Any) -> Any:
        if loop.is_closed() or _on_this_thread(loop):
            return handle(*args, **kwargs)
        done: concurrent.futures.Future = concurrent.futures.Future()

        def apply() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(handle(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(apply)
        return done.result()

    return run


#: values kept per model property awaiting their echo (a browser that echoes nothing keeps
#: this bounded)
PUSHED_KEPT = 16


class PushedValues:
    """The values the kernel pushed to the browser per (model id, property), in order, until
    the browser's echo of each comes back (:meth:`is_echo`). Values are compared as JSON.

    The browser echoes only a value it did not hold: a push of the value the browser last
    had (a person's pick the kernel then pushes again, e.g. a form's fill) is not awaited,
    or a later pick of that value would be taken for its echo."""

    def __init__(self) -> None:
        self._sent: dict[tuple[str, str], deque[str]] = {}
        #: the value the browser holds once it has applied what was sent, by property
        self._browser: dict[tuple[str, str], str] = {}

    def record(self, data: object) -> None:
        """Note the ``ModelChanged`` values of one part of a message sent on the comm (a
        ``PATCH-DOC``'s content as JSON text; other parts are ignored)."""
        if not isinstance(data, str) or '"ModelChanged"' not in data:
            return
        try:
            content = json.loads(data)
        except ValueError:
            return
        for event in content.get("events", ()) if isinstance(content, dict) else ():
            if isinstance(event, dict) and event.get("kind") == "ModelChanged":
                key = (str((event.get("model") or {}).get("id")), str(event.get("attr")))
                value = _json(event.get("new"))
                if self._browser.get(key) != value:  # else the browser has it: no echo comes
                    self._sent.setdefault(key, deque(maxlen=PUSHED_KEPT)).append(value)
                self._browser[key] = value

    def is_echo(self, event: dict) -> bool:
        """Whether the browser's ``ModelChanged`` ``event`` returns a value the kernel pushed
        (then it and the values pushed before it are no longer awaited)."""
        key = (str((event.get("model") or {}).get("id")), str(event.get("attr")))
        sent = self._sent.get(key)
        value = _json(event.get("new"))
        if not sent or value not in sent:
            if not sent:  # a person's change: what the browser holds now
                self._browser[key] = value
            return False
        while sent.popleft() != value:
            pass
        return True

    def recording(self, comm: Any) -> None:
        """Record what ``comm`` (a notebook output's comm to the browser) sends from now on."""
        if getattr(comm, "_workbench_recorded", False):
            return
        send = comm.send

        def recorded_send(data: Any = None, metadata: Any = None, buffers: Any = ()) -> Any:
            self.record(data)
            return send(data, metadata=metadata, buffers=list(buffers or []))

        comm.send = recorded_send
        comm._workbench_recorded = True


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def without_echoes(document: Document, msg: dict, pushed: PushedValues | None = None) -> dict:
    """``msg`` (a browser's PATCH-DOC as Panel's client comm decodes it) without the events
    that only echo the kernel's own changes (see the module docstring): a data source's data
    (its streams, patches and replacements: no data source of the dashboard is edited in
    the browser, its tables are disabled and its plots have no edit tools), and a property
    change nothing in the kernel listens to (a status text, an axis end, a layout's width),
    and a value the kernel pushed coming back (``pushed``: a widget's value too, which could
    be stale). What the kernel listens to (a widget's value, the active tab, a table's
    selection) changed in the browser and the browser's events (a button's click) are kept.
    Changes ``msg`` in place; returns it."""
    content = msg.get("content")
    if not isinstance(content, dict) or not content.get("events"):
        return msg
    events = content["events"]
    kept = []
    for event in events:
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind in DATA_EVENTS:
            continue
        if kind == "ModelChanged":
            if pushed is not None and pushed.is_echo(event):
                continue
            model = document.get_model_by_id(ID(str((event.get("model") or {}).get("id"))))
            attr = event.get("attr")
            if (model is None or (isinstance(model, ColumnDataSource) and attr == "data")
                    or not model._callbacks.get(attr)):  # Bokeh's on_change callbacks (private:
                # checked by tests/architecture/test_library_internals.py)
                continue
        kept.append(event)
    content["events"] = kept
    return msg


def in_steps(msg: dict) -> list[dict]:
    """``msg`` (a browser's PATCH-DOC as Panel's client comm decodes it) as the messages to
    apply one after the other, in order: each run of property changes, and each browser event
    (a key press, a click: ``MessageSent``) on its own, so that the changes before an event
    reach the widgets before the event's callback runs (see the module docstring, "Lost
    changes"). A message of property changes only is returned whole."""
    content = msg.get("content")
    if not isinstance(content, dict) or not content.get("events"):
        return [msg]

    def changed(event: object) -> bool:
        return isinstance(event, dict) and event.get("kind") == "ModelChanged"

    runs: list[list] = []
    for event in content["events"]:
        if changed(event) and runs and changed(runs[-1][-1]):
            runs[-1].append(event)
        else:
            runs.append([event])
    if len(runs) == 1:
        return [msg]
    # each step is a whole message: the header, the metadata and the buffers (events name
    # buffers by id) of the browser's; Panel's assembling pops ``_buffers`` from each
    return [{**msg, "header": dict(msg.get("header") or {}), "content": {**content, "events": run},
             "_buffers": dict(msg.get("_buffers") or {})} for run in runs]


def apply_on_loop(viewable: pn.viewable.Viewable, loop: asyncio.AbstractEventLoop) -> None:
    """Apply the browser's messages to ``viewable``'s notebook output on ``loop``, without
    the echoes of the kernel's own changes (see the module docstring). Call it before the
    output is rendered (before the cell shows it): Panel binds the handler when it renders.
    Only outputs rendered from ``viewable`` itself are covered (not a layout containing it)."""
    handle = viewable._on_msg
    render = viewable._render_model
    pushed = PushedValues()

    def render_model(doc: Document | None = None, comm: Any = None) -> Any:
        if comm is not None:
            pushed.recording(comm)  # before anything is pushed on it
        return render(doc, comm)

    def on_msg(ref: str, manager: Any, msg: dict) -> None:
        shown = viewable._models.get(ref)
        if shown is not None and shown[0].document is not None:
            without_echoes(shown[0].document, msg, pushed)
        for step in in_steps(msg):
            handle(ref, manager, step)

    # this one viewable's handlers, replaced on the instance (Panel offers no hook for them;
    # _on_msg, _render_model and _models are private: checked by tests/architecture/test_library_internals.py)
    viewable._render_model = render_model  # type: ignore[method-assign]
    viewable._on_msg = on_loop(on_msg, loop)  # type: ignore[method-assign]


__all__ = ["DATA_EVENTS", "PUSHED_KEPT", "PushedValues", "apply_on_loop", "in_steps", "on_loop", "without_echoes"]
