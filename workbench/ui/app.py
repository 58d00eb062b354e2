"""The whole workbench dashboard: ``dashboard(server)`` for a notebook cell, ``create_app``
for a Bokeh/Panel server session (the Jupyter host mounts it at ``{base_url}/workbench/``).

Tabs, in order: Models, Config, Live, Rollout, Tuning, Headless. The Tuning tab (a config search by
the tuner of :mod:`workbench.tuning`, the one behind ``workbench tune``) is built by a
builder, ``tuning(store) -> Viewable``: by default
:func:`workbench.ui.tuning.tuning_view.tuning_tab`; pass another as ``tuning=``, or ``tuning=None``
for no Tuning tab.

Threading: Panel callbacks must reach the engine on the engine's event loop. Inside Jupyter,
the Bokeh server runs on the Jupyter server's tornado/asyncio loop, the loop the engine runs
on, so callbacks start tasks there and await engine methods directly; in a notebook kernel
that started the engine with top-level ``await`` it is the kernel's loop. Build the dashboard
on that loop; a callback that runs on another thread hands its coroutine to the engine's loop
(:class:`~workbench.ui.shared.store.EngineStore`).

Per session: one :class:`~workbench.serving.live_stats.LiveStatistics` (an observer on the engine:
one list append per successful request while the session is open), one periodic callback
(:meth:`Dashboard.tick`, default every second) for every live plot, the Models table and the
headless health, one model selection that every tab's model dropdown follows
(:mod:`workbench.ui.shared.selection`), and the ``workbench serve`` process the session started,
stopped with it.

Attached to a server by URL (the "Attach to a server" bar atop the Models tab, or
``dashboard(url="http://host:8000")`` / ``create_app(url=...)``): every tab is rebuilt over a
:class:`~workbench.remote.RemoteServer` (:mod:`workbench.ui.attach.attach_view`); Headless and Rollout say in
place why they are not available; "Back to this engine" returns to the engine in this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

import panel as pn
from panel.io.callbacks import PeriodicCallback

from workbench import Server
from workbench.remote import RemoteServer
from workbench.ui.attach.attach_view import HEALTH_EVERY, ROLLOUT_REMOTE, AttachBar, config_note, remote_note
from workbench.ui.config.config_view import ConfigView
from workbench.ui.headless.headless_view import HeadlessView
from workbench.ui.live.live_view import LiveView
from workbench.ui.models.models_view import ModelsView
from workbench.ui.rollout.rollout_view import RolloutView
from workbench.ui.shared import kernel_comm, panel_writes
from workbench.ui.shared.ace_theme import ship_editor_theme
from workbench.ui.shared.local_css import keep_stylesheets_local
from workbench.ui.shared.store import EngineStore
from workbench.ui.tuning.tuning_view import tuning_tab

#: what a tab shows: a Panel component, or a view that makes one (``__panel__``)
Tab: TypeAlias = pn.viewable.Viewable | pn.viewable.Viewer
#: builds the Tuning tab for a session
TabBuilder: TypeAlias = Callable[[EngineStore], Tab]
#: the Panel extensions the dashboard's widgets need
EXTENSIONS = ("codeeditor", "tabulator")


class Dashboard(pn.viewable.Viewer):
    """Every tab of one session, and the periodic callback that feeds them.

    Args:
        server: the started engine, or a server attached by URL (then there is no engine
            here to return to).
        tuning: the Tuning tab's builder (see the module docstring; default
            :func:`~workbench.ui.tuning.tuning_view.tuning_tab`); None: no Tuning tab.
        history: live-plot rows kept (ticks).
        loop: the engine's loop (default: the running loop).
        interval_s: the beat :meth:`start` will take, **seconds** (the Models table's live
            columns name it).
    """

    def __init__(self, server: Server | RemoteServer, *, tuning: TabBuilder | None = tuning_tab,
                 history: int = 300, loop: asyncio.AbstractEventLoop | None = None,
                 interval_s: float = 1.0, **params) -> None:
        super().__init__(**params)
        self._tuning_builder, self._history, self._interval_s = tuning, history, interval_s
        #: the engine's store (None when the dashboard was opened attached)
        self.engine_store = EngineStore(server, loop) if isinstance(server, Server) else None
        #: the Headless tab over the engine's store (kept while attached: its process runs on)
        self.headless = HeadlessView(self.engine_store) if self.engine_store is not None else None
        self.attach_bar = AttachBar(self.attach, self.detach if self.engine_store is not None else None)
        self.tabs = pn.Tabs(dynamic=True, sizing_mode="stretch_width")
        self._build(self.engine_store or EngineStore(server, loop))
        self._callback: PeriodicCallback | None = None
        self._closed = False
        self._ticks = 0

    def _build(self, store: EngineStore) -> None:
        """Every tab over ``store`` (the engine's, or an attached server's)."""
        self.store = store
        self.config = ConfigView(store)
        self.live = LiveView(store, history=self._history)
        self.models = ModelsView(store, live=self.live.live, open_tab=self.open_tab,
                                 interval_s=self._interval_s)
        remote = store.remote
        config: Tab = self.config if remote is None else pn.Column(
            config_note(remote), self.config, sizing_mode="stretch_width")
        # the attach bar heads the Models tab (the dashboard's root stays its Tabs)
        models = pn.Column(self.attach_bar, self.models, sizing_mode="stretch_width")
        tabs: list[tuple[str, Tab]] = [("Models", models), ("Config", config), ("Live", self.live)]
        #: the Rollout tab's view (None while attached: rollouts live in this process's engine)
        self.rollout: RolloutView | None = None
        if remote is None:
            self.rollout = RolloutView(store)
            tabs.append(("Rollout", self.rollout))
        else:
            tabs.append(("Rollout", remote_note("Rollout", remote, self.engine_store is not None, ROLLOUT_REMOTE)))
        #: the Tuning tab's view (None without one)
        self.tuning = self._tuning_builder(store) if self._tuning_builder is not None else None
        if self.tuning is not None:
            tabs.append(("Tuning", self.tuning))
        if remote is None and self.headless is not None:
            tabs.append(("Headless", self.headless))
        #: what the Headless tab says while attached (None otherwise)
        self.headless_note = None if remote is None else remote_note("Headless", remote,
                                                                     self.engine_store is not None)
        if self.headless_note is not None:
            tabs.append(("Headless", self.headless_note))
        self.tabs.clear()
        self.tabs.extend(tabs)
        self.tabs.active = 0
        self._titles = [title for title, _ in tabs]
        self.attach_bar.shown(remote)

    def __panel__(self) -> pn.viewable.Viewable:
        return self.tabs

    def attach(self, remote: RemoteServer) -> None:
        """Move every tab onto ``remote`` (the previous tabs' live statistics and sweep stop;
        a previous attached server's connections close)."""
        self._switch(EngineStore(remote, self.store.loop))

    def detach(self) -> None:
        """Back to the engine in this process (nothing when there is none)."""
        if self.engine_store is not None and self.store is not self.engine_store:
            self._switch(self.engine_store)

    def _switch(self, store: EngineStore) -> None:
        previous = self.store
        self._close_tabs()
        self._build(store)
        if previous.remote is not None:
            previous.spawn(previous.remote.close())
        if self._callback is not None:
            self._fill()

    def open_tab(self, title: str) -> None:
        """Bring the tab titled ``title`` forward (nothing when there is none)."""
        if title in self._titles:
            self.tabs.active = self._titles.index(title)

    def start(self, interval_s: float | None = None) -> Dashboard:
        """Fill the tabs (spawned on the engine's loop) and start the periodic callback
        (every ``interval_s`` seconds, on the session's document or the current loop;
        default: the one the dashboard was made with)."""
        if interval_s is not None and interval_s != self._interval_s:
            self._interval_s = interval_s
            self.models.name_window(interval_s)
        interval_s = self._interval_s
        self._fill()
        self._callback = pn.state.add_periodic_callback(self.tick, period=int(interval_s * 1000),
                                                        start=True)
        return self

    def _fill(self) -> None:
        self.store.spawn(self.models.refresh())
        self.store.spawn(self.config.refresh_models())

    def tick(self) -> None:
        """One beat: stream the live plots, refresh the Models table (which shows the interval
        the live plots just closed) and the headless process's health, check the Config tab's
        file on disk."""
        if self._closed:
            return
        self._ticks += 1
        self.live.tick()
        self.models.tick()
        if self.headless is not None:
            self.headless.tick()
        if self.rollout is not None:
            self.rollout.tick()
        self.config.tick()  # follows config.pbtxt changed elsewhere
        remote = self.store.remote
        if remote is not None:
            self.attach_bar.show_health()
            if self._ticks % HEALTH_EVERY == 1:
                self.store.spawn(self.attach_bar.read_health(remote))

    def close(self) -> None:
        """Stop the periodic callback, detach the live statistics, stop the session's
        ``workbench serve`` process and a running sweep (a Tuning tab with a ``stop()``
        method). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._callback is not None:
            self._callback.stop()
        self._close_tabs()
        if self.headless is not None:
            self.headless.close()
        if self.store.remote is not None:
            self.store.spawn(self.store.remote.close())

    def _close_tabs(self) -> None:
        """Detach the live statistics, stop a running sweep (a Tuning tab with ``stop()``)."""
        self.live.close()
        stop = getattr(self.tuning, "stop", None)
        if callable(stop):
            stop()


def _server(server: Server | None, url: str | Sequence[str] | None, headers: Mapping[str, str] | None,
            metrics_urls: Sequence[str] | None) -> Server | RemoteServer:
    if (server is None) == (url is None):
        raise ValueError("give either a started engine (server) or a server's URL (url=)")
    if server is not None:
        return server
    assert url is not None
    return RemoteServer(url, headers=headers, metrics_urls=metrics_urls)


def dashboard(server: Server | None = None, *, url: str | Sequence[str] | None = None,
              headers: Mapping[str, str] | None = None, metrics_urls: Sequence[str] | None = None,
              tuning: TabBuilder | None = tuning_tab, interval_s: float = 1.0,
              history: int = 300) -> Dashboard:
    """The dashboard for a notebook cell: loads Panel's notebook extension, builds and starts
    a :class:`Dashboard` (display it as the cell's value). Call ``.close()`` when done: a
    notebook has no session end to do it.

    ``dashboard(server)`` acts on the engine ``server`` of this kernel;
    ``dashboard(url="http://host:8000")`` (or a list of replicas' URLs) on a server it did
    not start, over its v2 API (``headers``: e.g. a restricted API's key, kept in memory
    only; ``metrics_urls``: each replica's ``/metrics`` for pending requests and latency
    quantiles).

    Raises:
        ValueError: neither or both of ``server`` and ``url``; a malformed URL.

    BokehJS, Panel and the extensions' scripts (Tabulator, Ace) are inlined in the notebook's
    output (~8 MB once per kernel), not loaded from Bokeh's and HoloViz's CDNs: the dashboard
    renders where the browser has no internet, as the one Jupyter serves at ``/workbench/``;
    so do the stylesheets of every tab (:mod:`workbench.ui.shared.local_css`). The browser's changes
    (a tab clicked, a field typed) are applied on the engine's loop, as every other change of
    the dashboard, also where JupyterLab sends them to a kernel subshell's thread
    (:mod:`workbench.ui.shared.kernel_comm`)."""
    ship_editor_theme()  # inlined with Ace: Ace could not fetch it from the notebook's page
    pn.extension(*EXTENSIONS, inline=True)
    keep_stylesheets_local()
    board = Dashboard(_server(server, url, headers, metrics_urls), tuning=tuning, history=history,
                      interval_s=interval_s)
    kernel_comm.apply_on_loop(board.tabs, board.store.loop)  # the output shown is the tabs'
    return board.start()


def prepare_session() -> None:
    """Make the current Panel server session ready for a dashboard (also one shown later in
    it, so that its page loads the dashboard's extensions): Panel's lossless websocket
    writes, the :data:`EXTENSIONS`, stylesheets from the session's server. Idempotent."""
    panel_writes.install()
    ship_editor_theme()
    pn.extension(*EXTENSIONS)
    keep_stylesheets_local()


def create_app(server: Server | None = None, *, url: str | Sequence[str] | None = None,
               headers: Mapping[str, str] | None = None, metrics_urls: Sequence[str] | None = None,
               tuning: TabBuilder | None = tuning_tab, interval_s: float = 1.0,
               history: int = 300) -> Dashboard:
    """The dashboard of one Bokeh/Panel server session: call it per session (e.g. as the
    function given to ``pn.serve`` or a Bokeh ``FunctionHandler``), on the engine's loop. It is
    closed when the session is destroyed. Panel's stylesheets come from the session's server
    (:mod:`workbench.ui.shared.local_css`), never from its CDN, and Panel's queued websocket writes are
    made lossless first (:mod:`workbench.ui.shared.panel_writes`: without that, a change made while the
    socket is busy could stay unsent, e.g. the Models table on READY after Unload)."""
    prepare_session()
    app = Dashboard(_server(server, url, headers, metrics_urls), tuning=tuning, history=history,
                    interval_s=interval_s).start()
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        pn.state.on_session_destroyed(lambda _context: app.close())
    return app


__all__ = ["EXTENSIONS", "Dashboard", "Tab", "TabBuilder", "create_app", "dashboard", "prepare_session"]
