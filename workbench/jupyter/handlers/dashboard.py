"""The dashboard's routes: Panel's and Bokeh's handlers behind Jupyter's authentication.

Each class puts Jupyter's :class:`~jupyter_server.base.handlers.JupyterHandler` (identity
provider, login redirect, host and origin checks, error pages) in front of the Panel / Bokeh
handler that does the work:

* :class:`DashboardPageHandler` (``GET workbench/``): Panel's ``DocHandler``; creates the
  session and answers its HTML page. Unauthenticated: redirected to Jupyter's login page.
* :class:`DashboardSocketHandler` (``workbench/ws``): Panel's ``WSHandler``, the session's
  Bokeh protocol. Unauthenticated or cross-origin (Jupyter's websocket origin rules): 403.
* :class:`DashboardStaticHandler`, :class:`DashboardExtensionHandler`
  (``workbench/static/...``): BokehJS and the Bokeh extensions' files (Panel's bundles),
  authenticated as the page (a browser sends Jupyter's login cookie with them).

The page and websocket handlers are handed the dashboard's ``BokehTornado``
(:class:`~workbench.jupyter.dashboard.DashboardMount`, in the setting
``workbench_dashboard``) as their tornado application: Bokeh's code reads its session
contexts, keys and resources from it, and its settings are Jupyter's.
"""

from __future__ import annotations

from bokeh.embed.bundle import extension_dirs
from bokeh.server.views.multi_root_static_handler import MultiRootStaticHandler
from bokeh.server.views.static_handler import StaticHandler
from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from panel.io.server import DocHandler, WSHandler
from tornado import web

from workbench.jupyter.dashboard import DashboardMount


class _SessionRoute:
    """Hand the dashboard's Bokeh application (not Jupyter's) to the Bokeh handler."""

    def __init__(self, application: web.Application, request, **kwargs) -> None:
        mount: DashboardMount = application.settings["workbench_dashboard"]
        super().__init__(mount.tornado, request, application_context=mount.context,  # type: ignore[call-arg]
                         bokeh_websocket_path=mount.websocket_path, **kwargs)

    # Jupyter's (prepare() checks where get_current_user comes from; Bokeh's asks its
    # auth provider, which is none here)
    get_current_user = JupyterHandler.get_current_user

    def get_login_url(self) -> str:
        """Jupyter's login page (Panel's asks the Bokeh auth provider)."""
        return self.settings["login_url"]  # type: ignore[attr-defined]


class DashboardPageHandler(_SessionRoute, JupyterHandler, DocHandler):
    """``GET workbench/``: a new dashboard session and its page."""

    async def prepare(self) -> None:
        # Jupyter's (authentication, login redirect); it returns the rest of the chain's
        # prepare (Bokeh's asks its absent auth provider), awaited here
        rest = await JupyterHandler.prepare(self)
        if rest is not None:
            await rest

    @web.authenticated
    async def get(self, *args, **kwargs) -> None:
        await super().get(*args, **kwargs)


class DashboardSocketHandler(_SessionRoute, WSHandler, JupyterHandler):
    """``workbench/ws``: a session's websocket (Bokeh protocol)."""

    async def prepare(self) -> None:
        # Jupyter's authentication, without the login redirect (403 when unknown)
        await JupyterHandler.prepare(self, _redirect_to_login=False)

    # Jupyter's websocket origin policy (same host, or its allow_origin settings)
    check_origin = WebSocketMixin.check_origin

    @ws_authenticated
    async def get(self, *args, **kwargs) -> None:
        await super().get(*args, **kwargs)


class _AuthenticatedFiles(JupyterHandler):
    """GET / HEAD of a static file handler, authenticated."""

    @web.authenticated
    def head(self, path: str) -> object:
        return super().head(path)  # type: ignore[misc]

    @web.authenticated
    def get(self, path: str, include_body: bool = True) -> object:
        return super().get(path, include_body)  # type: ignore[misc]


class DashboardStaticHandler(_AuthenticatedFiles, StaticHandler):
    """``workbench/static/(.*)``: BokehJS."""


class DashboardExtensionHandler(_AuthenticatedFiles, MultiRootStaticHandler):
    """``workbench/static/extensions/(.*)``: the Bokeh extensions' files (Panel's)."""

    def initialize(self, root: dict | None = None) -> None:
        super().initialize(extension_dirs if root is None else root)


#: Panel's icon among the assets; the page links ``./favicon.ico``
FAVICON = "static/extensions/panel/images/favicon.ico"


def dashboard_handlers(path: str) -> list[tuple]:
    """The dashboard's routes under ``path`` (relative to Jupyter's base URL); the page's
    ``./favicon.ico`` is redirected (relative ``Location``) to Panel's icon among its assets."""
    return [
        (f"{path}/?", DashboardPageHandler),
        (f"{path}/favicon.ico", web.RedirectHandler, {"url": FAVICON}),
        (f"{path}/ws", DashboardSocketHandler),
        (f"{path}/static/extensions/(.*)", DashboardExtensionHandler),
        (f"{path}/static/(.*)", DashboardStaticHandler),
    ]


__all__ = ["FAVICON", "DashboardExtensionHandler", "DashboardPageHandler", "DashboardSocketHandler",
           "DashboardStaticHandler", "dashboard_handlers"]
