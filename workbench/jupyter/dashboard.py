"""The workbench dashboard inside the Jupyter server, at ``{base_url}/workbench/``.

The dashboard (:func:`workbench.ui.create_app`, one Panel session per browser tab) is served
by Bokeh's own server machinery, mounted in Jupyter's tornado application rather than on a
port of its own: :class:`DashboardMount` holds a :class:`bokeh.server.tornado.BokehTornado`
built by Panel's :func:`~panel.io.application.build_applications` (so Panel's session set-up
runs as under ``panel serve``) with the prefix ``{base_url}/workbench``. That application is
never routed to: its settings *are* Jupyter's (the same dict, so cookies, login URL, logging
and the identity provider are Jupyter's), and the routes in
:mod:`workbench.jupyter.handlers.dashboard` are Jupyter routes whose handlers are Panel's and
Bokeh's document, websocket and static handlers combined with Jupyter's authentication,
answering to this application (its session contexts, session keys and resource URLs).

Panel (Jupyter's extension ``panel.io.jupyter_server_extension`` serves apps from a kernel,
not from the server process) cannot be reused here: the engine lives in the Jupyter server
process, on its event loop, and so must the dashboard sessions that call it.

Sessions: created by ``GET workbench/``, kept while their websocket is connected, and
destroyed by Bokeh's clean-up job once unused for ``session_linger_s`` (tab closed); their
:class:`~workbench.ui.Dashboard` is closed then (live statistics detached, the session's
``workbench serve`` process stopped), and every remaining one when Jupyter stops.
"""

from __future__ import annotations

import logging
import secrets
from functools import partial

import panel as pn
from bokeh.server.contexts import ApplicationContext
from bokeh.server.session import ServerSession
from bokeh.server.tornado import BokehTornado
from panel.io.application import build_applications
from panel.io.resources import get_dist_path

from workbench.jupyter.host import RUNNING, EngineHost
from workbench.jupyter.paths import DASHBOARD_PATH
from workbench.jupyter.starting_view import StartingView
from workbench.ui import Dashboard, create_app, prepare_session

log = logging.getLogger("workbench")

#: the browser tab's title
TITLE = "Model Serving Workbench"


class DashboardMount:
    """The Bokeh application of the dashboard and its open sessions.

    Args:
        host: the engine host (a session on an engine that is not running shows its state).
        jupyter_settings: the Jupyter tornado application's settings (shared, not copied).
        interval_s: the dashboards' refresh period.
        session_linger_s: seconds a session without a browser connected lives on.
    """

    def __init__(self, host: EngineHost, jupyter_settings: dict, *, interval_s: float = 1.0,
                 session_linger_s: float = 15.0) -> None:
        self.host = host
        self.interval_s = interval_s
        #: the dashboards of the sessions open now
        self.dashboards: set[Dashboard] = set()
        base_url = jupyter_settings.get("base_url", "/")
        apps = build_applications({"/": self._session}, title=TITLE, location=False)
        linger_ms = max(int(session_linger_s * 1000), 1)
        self.tornado = BokehTornado(
            apps, prefix=f"{base_url.rstrip('/')}/{DASHBOARD_PATH}",
            secret_key=secrets.token_bytes(32), sign_sessions=True,
            unused_session_lifetime_milliseconds=linger_ms,
            check_unused_sessions_milliseconds=max(linger_ms // 3, 1),
        )
        self.tornado.settings = jupyter_settings
        self._started = False

    @property
    def context(self) -> ApplicationContext:
        """The dashboard application's context (its sessions)."""
        return self.tornado.applications["/"]

    @property
    def websocket_path(self) -> str:
        """The sessions' websocket route, ``{base_url}workbench/ws``."""
        return f"{self.tornado.prefix}/ws"

    @property
    def open_sessions(self) -> int:
        """Dashboard sessions alive now (a closed tab's lingers ``session_linger_s``)."""
        return len(self.dashboards)

    def _session(self) -> pn.viewable.Viewable | Dashboard:
        """One session's root: the dashboard, or while the engine is not running a notice
        of its state that replaces itself with the dashboard once it runs
        (:class:`~workbench.jupyter.starting_view.StartingView`)."""
        # Panel's stylesheets point at this server's copy (not its CDN) from the start: Panel
        # sets this when it renders the page, too late for a session the websocket re-creates
        document = pn.state.curdoc
        assert document is not None  # Bokeh calls this with the new session's document current
        document.template_variables["dist_url"] = get_dist_path(cdn=False)
        if self.host.state == RUNNING:
            return self._dashboard()
        prepare_session()  # the page loads what the dashboard shown later needs
        return StartingView(self.host, self._dashboard, document).root

    def _dashboard(self) -> Dashboard:
        """The session's dashboard on the running engine (on the session's document)."""
        app = create_app(self.host.engine(), interval_s=self.interval_s)
        self.dashboards.add(app)
        pn.state.on_session_destroyed(partial(self._destroyed, app))
        return app

    def _destroyed(self, app: Dashboard, _context: object) -> None:
        app.close()  # create_app closes it too; idempotent
        self.dashboards.discard(app)

    def start(self) -> None:
        """Start Bokeh's session clean-up and keep-alive jobs on the running loop."""
        from tornado.ioloop import IOLoop

        if not self._started:
            self.tornado.initialize(IOLoop.current())
            self.tornado.start()
            self._started = True

    async def stop(self) -> None:
        """Stop the jobs, close the browser connections and destroy every session (each
        closes its dashboard). A session that fails to end is logged and the others still
        end: Jupyter's shutdown (and the engine's drain after it) goes on."""
        if self._started:
            self.tornado.stop()
            self._started = False
        for session in list(self.context.sessions):
            try:
                self._disconnect(session)
                # Bokeh's own discard path (runs the session-destroyed callbacks; private, as
                # _subscribed_connections and _socket below: tests/architecture/test_library_internals.py);
                # BokehTornado.stop leaves sessions alive ("TODO ... shut down all sessions")
                await self.context._discard_session(session, lambda _session: True)
            except Exception:  # one session must not keep Jupyter up
                log.exception("workbench: dashboard session %s did not end cleanly", session.id)
        for app in list(self.dashboards):
            self._destroyed(app, None)

    def _disconnect(self, session: ServerSession) -> None:
        """Detach and close the websockets of ``session`` (a tab still open): Bokeh refuses
        to discard a session with open connections."""
        for connection in list(session._subscribed_connections):
            socket = connection._socket
            self.tornado.client_lost(connection)  # unsubscribes it, as the socket's on_close does
            socket.connection = None  # so that on_close, when the close completes, does nothing more
            socket.close(1001, "the Jupyter server is stopping")  # 1001: going away


__all__ = ["DASHBOARD_PATH", "TITLE", "DashboardMount"]
