"""The dashboard's routes: Panel's and Bokeh's handlers behind Jupyter's authentication.

Each class puts Jupyter's :class:`~jupyter_server.base.handlers.JupyterHandler` (identity
provider, login redirect, host and origin checks, error pages) in front of the Panel / Bokeh
handler that does the work:

* :class:`DashboardPageHandler` (``GET workbench/``): Panel's ``DocHandler``; creates the
  session and answers its HTML page. Unauthenticated: redirected to Jupyter's login page.
* :class:`DashboardSocketHandler` (``workbench/ws``): Panel's ``WSHandler``, the session's
  Bokeh protocol. Unauthenticated or cross-origin (Jupyter's websocket origin rules): 403.
  Without Bokeh's subprotocol (``Sec-WebSocket-Protocol: bokeh, <session token>``): 400; a
  session token that is not this server's or has expired: 403; both before the upgrade,
  logged as one warning line (Bokeh would accept the upgrade, then raise ``ProtocolError``
  from ``open()``, which tornado logs as an uncaught exception with its traceback).
* :class:`DashboardStaticHandler`, :class:`DashboardExtensionHandler`
  (``workbench/static/...``): BokehJS and the Bokeh extensions' files (Panel's bundles),
  authenticated as the page (a browser sends Jupyter's login cookie with them).

The page and websocket handlers are handed the dashboard's ``BokehTornado``
(:class:`~workbench.jupyter.dashboard.DashboardMount`, in the setting
``workbench_dashboard``) as their tornado application: Bokeh's code reads its session
contexts, keys and resources from it, and its settings are Jupyter's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import cast

from bokeh.core.types import PathLike
from bokeh.embed.bundle import extension_dirs
from bokeh.protocol.exceptions import ProtocolError
from bokeh.server.tornado import BokehTornado
from bokeh.server.views.multi_root_static_handler import MultiRootStaticHandler
from bokeh.server.views.static_handler import StaticHandler
from bokeh.util.token import check_token_signature, get_token_payload
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

    async def prepare(self, *, _redirect_to_login: bool = True) -> None:
        # Jupyter's (authentication, login redirect); it returns the rest of the chain's
        # prepare (Bokeh's asks its absent auth provider), awaited here
        rest = await JupyterHandler.prepare(self, _redirect_to_login=_redirect_to_login)
        if rest is not None:
            await rest

    @web.authenticated
    async def get(self, *args, **kwargs) -> None:
        page = super().get(*args, **kwargs)  # Panel's DocHandler.get: a coroutine
        if page is not None:
            await page


class DashboardSocketHandler(_SessionRoute, WSHandler, JupyterHandler):
    """``workbench/ws``: a session's websocket (Bokeh protocol)."""

    async def prepare(self, *, _redirect_to_login: bool = False) -> None:
        # Jupyter's authentication, without the login redirect (403 when unknown); the keyword
        # is private: checked by tests/architecture/test_library_internals.py
        await JupyterHandler.prepare(self, _redirect_to_login=False)

    def check_origin(self, origin: str | None = None) -> bool:
        """Jupyter's websocket origin policy (same host, or its allow_origin settings);
        decided once per request (it logs a refusal)."""
        if getattr(self, "_origin_allowed", None) is None:
            self._origin_allowed = WebSocketMixin.check_origin(self, origin)
        return self._origin_allowed

    def _cross_origin(self) -> bool:
        """Whether tornado's ``get`` will refuse this request's origin (its 403): tornado's
        own check (6.5+), else Jupyter's origin policy on the ``Origin`` header."""
        check = getattr(self, "_check_cross_origin", None)
        if check is not None:
            return check(self.check_origin) is not None
        origin = self.request.headers.get("Origin")
        return origin is not None and not self.check_origin(origin)

    def open(self, *args, **kwargs) -> Awaitable[None] | None:
        """Bokeh's (Panel's) ``open``; a :class:`ProtocolError` it raises (it has closed the
        socket) is one warning line, not tornado's uncaught-exception traceback. ``get``
        refuses these requests before the upgrade; this is for any it lets through."""
        try:
            return super().open(*args, **kwargs)
        except ProtocolError as exc:
            self.log.warning("workbench: closed a dashboard websocket from %s: %s",
                             self.request.remote_ip, exc)
            return None

    @ws_authenticated
    async def get(self, *args, **kwargs) -> None:
        # a cross-origin request gets tornado's 403 (the origin is checked first)
        refusal = None if self._cross_origin() else self._refusal()
        if refusal is not None:
            status, reason = refusal
            self.log.warning("workbench: refused a dashboard websocket from %s: %s",
                             self.request.remote_ip, reason)
            self.set_status(status)
            await self.finish(f"{reason}\n")
            return
        await super().get(*args, **kwargs)

    def _refusal(self) -> tuple[int, str] | None:
        """Why this upgrade request cannot open a session's websocket, as ``(HTTP status,
        reason)``; None when it can. Checks what Bokeh's ``open()`` checks after the upgrade:
        the subprotocol ``bokeh, <token>``, the token's signature (this server's) and expiry."""
        offered = [p.strip() for p in self.request.headers.get("Sec-WebSocket-Protocol", "").split(",")
                   if p.strip()]
        if len(offered) != 2 or offered[0] != "bokeh":
            return 400, "no Bokeh subprotocol (Sec-WebSocket-Protocol: bokeh, <session token>)"
        token = offered[1]
        bokeh = cast(BokehTornado, self.application)  # the one _SessionRoute hands over
        try:
            valid = check_token_signature(token, secret_key=bokeh.secret_key,
                                          signed=bokeh.sign_sessions)
            expiry = get_token_payload(token).get("session_expiry") if valid else None
        except Exception:  # noqa: BLE001 - a malformed token (not base64 / JSON) is not valid
            valid, expiry = False, None
        if not valid:
            return 403, "the session token is not this server's"
        if expiry is None or time.time() >= expiry:
            return 403, "the session token has expired (reload the page)"
        return None


class _AuthenticatedFiles(JupyterHandler):
    """GET / HEAD of a static file handler, authenticated."""

    @web.authenticated
    def head(self, path: str) -> Awaitable[None] | None:
        return super().head(path)

    @web.authenticated
    def get(self, path: str, include_body: bool = True) -> Awaitable[None] | None:
        return super().get(path, include_body)


# [misc]: tornado's web.authenticated returns Callable[..., Awaitable[None] | None], its
# StaticFileHandler types get/head as coroutines: no authenticated override of them type-checks
class DashboardStaticHandler(_AuthenticatedFiles, StaticHandler):  # type: ignore[misc]
    """``workbench/static/(.*)``: BokehJS."""


class DashboardExtensionHandler(_AuthenticatedFiles, MultiRootStaticHandler):  # type: ignore[misc]
    """``workbench/static/extensions/(.*)``: the Bokeh extensions' files (Panel's)."""

    # [override]: as Bokeh's MultiRootStaticHandler, which replaces StaticFileHandler's
    # initialize(path, ...) by initialize(root)
    def initialize(self, root: dict[str, PathLike] | None = None) -> None:  # type: ignore[override]
        # Bokeh's table holds Paths (PathLikes) in a dict, which its own stubs make invariant
        super().initialize(cast("dict[str, PathLike]", extension_dirs) if root is None else root)


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
