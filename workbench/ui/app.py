"""The whole workbench dashboard: ``dashboard(server)`` for a notebook cell, ``create_app``
for a Bokeh/Panel server session (the Jupyter host mounts it at ``{base_url}/workbench/``).

Tabs, in order: Models, Config, Live, Rollout, Tuning, Headless. The Tuning tab (a config search by
the tuner of :mod:`workbench.tuning`, the one behind ``workbench tune``) is built by a
builder, ``tuning(store) -> Viewable``: by default
:func:`workbench.ui.tuning_view.tuning_tab`; pass another as ``tuning=``, or ``tuning=None``
for no Tuning tab.

Threading: Panel callbacks must reach the engine on the engine's event loop. Inside Jupyter,
the Bokeh server runs on the Jupyter server's tornado/asyncio loop, the loop the engine runs
on, so callbacks start tasks there and await engine methods directly; in a notebook kernel
that started the engine with top-level ``await`` it is the kernel's loop. Build the dashboard
on that loop; a callback that runs on another thread hands its coroutine to the engine's loop
(:class:`~workbench.ui.store.EngineStore`).

Per session: one :class:`~workbench.live_stats.LiveStatistics` (an observer on the engine:
one list append per successful request while the session is open), one periodic callback
(:meth:`Dashboard.tick`, default every second) for every live plot, the Models table and the
headless health, one model selection that every tab's model dropdown follows
(:mod:`workbench.ui.selection`), and the ``workbench serve`` process the session started,
stopped with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeAlias

import panel as pn
from panel.io.callbacks import PeriodicCallback

from workbench import Server
from workbench.ui import kernel_comm, panel_writes
from workbench.ui.config_view import ConfigView
from workbench.ui.headless_view import HeadlessView
from workbench.ui.live_view import LiveView
from workbench.ui.local_css import keep_stylesheets_local
from workbench.ui.models_view import ModelsView
from workbench.ui.rollout_view import RolloutView
from workbench.ui.store import EngineStore
from workbench.ui.tuning_view import tuning_tab

#: what a tab shows: a Panel component, or a view that makes one (``__panel__``)
Tab: TypeAlias = pn.viewable.Viewable | pn.viewable.Viewer
#: builds the Tuning tab for a session
TabBuilder: TypeAlias = Callable[[EngineStore], Tab]
#: the Panel extensions the dashboard's widgets need
EXTENSIONS = ("codeeditor", "tabulator")


class Dashboard(pn.viewable.Viewer):
    """Every tab of one session, and the periodic callback that feeds them.

    Args:
        server: the started engine.
        tuning: the Tuning tab's builder (see the module docstring; default
            :func:`~workbench.ui.tuning_view.tuning_tab`); None: no Tuning tab.
        history: live-plot rows kept (ticks).
        loop: the engine's loop (default: the running loop).
    """

    def __init__(self, server: Server, *, tuning: TabBuilder | None = tuning_tab, history: int = 300,
                 loop: asyncio.AbstractEventLoop | None = None, **params) -> None:
        super().__init__(**params)
        self.store = EngineStore(server, loop)
        self.config = ConfigView(self.store)
        self.live = LiveView(self.store, history=history)
        self.models = ModelsView(self.store, live=self.live.live, open_tab=self.open_tab)
        self.headless = HeadlessView(self.store)
        self.rollout = RolloutView(self.store)
        tabs: list[tuple[str, Tab]] = [
            ("Models", self.models), ("Config", self.config), ("Live", self.live),
            ("Rollout", self.rollout)]
        #: the Tuning tab's view (None without one)
        self.tuning = tuning(self.store) if tuning is not None else None
        if self.tuning is not None:
            tabs.append(("Tuning", self.tuning))
        tabs.append(("Headless", self.headless))
        self.tabs = pn.Tabs(*tabs, dynamic=True, sizing_mode="stretch_width")
        self._titles = [title for title, _ in tabs]
        self._callback: PeriodicCallback | None = None
        self._closed = False

    def __panel__(self) -> pn.viewable.Viewable:
        return self.tabs

    def open_tab(self, title: str) -> None:
        """Bring the tab titled ``title`` forward (nothing when there is none)."""
        if title in self._titles:
            self.tabs.active = self._titles.index(title)

    def start(self, interval_s: float = 1.0) -> Dashboard:
        """Fill the tabs (spawned on the engine's loop) and start the periodic callback
        (every ``interval_s`` seconds, on the session's document or the current loop)."""
        self.store.spawn(self.models.refresh())
        self.store.spawn(self.config.refresh_models())
        self._callback = pn.state.add_periodic_callback(self.tick, period=int(interval_s * 1000),
                                                        start=True)
        return self

    def tick(self) -> None:
        """One beat: stream the live plots, refresh the Models table (which shows the interval
        the live plots just closed) and the headless process's health, check the Config tab's
        file on disk."""
        if self._closed:
            return
        self.live.tick()
        self.models.tick()
        self.headless.tick()
        self.rollout.tick()
        self.config.tick()  # follows config.pbtxt changed elsewhere

    def close(self) -> None:
        """Stop the periodic callback, detach the live statistics, stop the session's
        ``workbench serve`` process and a running sweep (a Tuning tab with a ``stop()``
        method). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._callback is not None:
            self._callback.stop()
        self.live.close()
        self.headless.close()
        stop = getattr(self.tuning, "stop", None)
        if callable(stop):
            stop()


def dashboard(server: Server, *, tuning: TabBuilder | None = tuning_tab, interval_s: float = 1.0,
              history: int = 300) -> Dashboard:
    """The dashboard for a notebook cell: loads Panel's notebook extension, builds and starts
    a :class:`Dashboard` (display it as the cell's value). Call ``.close()`` when done: a
    notebook has no session end to do it.

    BokehJS, Panel and the extensions' scripts (Tabulator, Ace) are inlined in the notebook's
    output (~8 MB once per kernel), not loaded from Bokeh's and HoloViz's CDNs: the dashboard
    renders where the browser has no internet, as the one Jupyter serves at ``/workbench/``;
    so do the stylesheets of every tab (:mod:`workbench.ui.local_css`). The browser's changes
    (a tab clicked, a field typed) are applied on the engine's loop, as every other change of
    the dashboard, also where JupyterLab sends them to a kernel subshell's thread
    (:mod:`workbench.ui.kernel_comm`)."""
    pn.extension(*EXTENSIONS, inline=True)
    keep_stylesheets_local()
    board = Dashboard(server, tuning=tuning, history=history)
    kernel_comm.apply_on_loop(board.tabs, board.store.loop)  # the output shown is the tabs'
    return board.start(interval_s)


def create_app(server: Server, *, tuning: TabBuilder | None = tuning_tab, interval_s: float = 1.0,
               history: int = 300) -> Dashboard:
    """The dashboard of one Bokeh/Panel server session: call it per session (e.g. as the
    function given to ``pn.serve`` or a Bokeh ``FunctionHandler``), on the engine's loop. It is
    closed when the session is destroyed. Panel's stylesheets come from the session's server
    (:mod:`workbench.ui.local_css`), never from its CDN, and Panel's queued websocket writes are
    made lossless first (:mod:`workbench.ui.panel_writes`: without that, a change made while the
    socket is busy could stay unsent, e.g. the Models table on READY after Unload)."""
    panel_writes.install()
    pn.extension(*EXTENSIONS)
    keep_stylesheets_local()
    app = Dashboard(server, tuning=tuning, history=history).start(interval_s)
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        pn.state.on_session_destroyed(lambda _context: app.close())
    return app


__all__ = ["EXTENSIONS", "Dashboard", "Tab", "TabBuilder", "create_app", "dashboard"]
