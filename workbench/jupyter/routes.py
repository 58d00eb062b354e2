"""Every route the workbench extension adds to the Jupyter server, relative to its base URL.

:func:`workbench_handlers` is the one list; the workbench dashboard (the Panel app served at
``{base_url}/workbench/``, :mod:`workbench.jupyter.handlers.dashboard`) has its routes
there, after the API's. Without Panel (the ``ui`` extra) the dashboard is not mounted.
"""

from __future__ import annotations

from workbench.jupyter.handlers.config import ModelConfigHandler, RevertConfigHandler, ValidateConfigHandler
from workbench.jupyter.handlers.models import ModelActionHandler, ModelsHandler
from workbench.jupyter.handlers.statistics import StatisticsHandler, StatisticsStreamHandler
from workbench.jupyter.handlers.status import StatusHandler
from workbench.jupyter.paths import DASHBOARD_PATH

#: the REST API's prefix under Jupyter's base URL
API_PREFIX = f"{DASHBOARD_PATH}/api"
#: a model name in a route: one path segment (tornado passes it URL-decoded)
_MODEL = r"(?P<name>[^/]+)"


def api_handlers() -> list[tuple[str, type]]:
    """The REST API routes (docs in each handler module)."""
    return [
        (f"{API_PREFIX}/status", StatusHandler),
        (f"{API_PREFIX}/models", ModelsHandler),
        (f"{API_PREFIX}/models/{_MODEL}/(?P<action>load|unload|reload)", ModelActionHandler),
        (f"{API_PREFIX}/models/{_MODEL}/config", ModelConfigHandler),
        (f"{API_PREFIX}/models/{_MODEL}/config/validate", ValidateConfigHandler),
        (f"{API_PREFIX}/models/{_MODEL}/config/revert", RevertConfigHandler),
        (f"{API_PREFIX}/statistics", StatisticsHandler),
        (f"{API_PREFIX}/statistics/stream", StatisticsStreamHandler),
    ]


def workbench_handlers(dashboard: bool = True) -> list[tuple]:
    """Every workbench route (``(pattern, handler)`` or ``(pattern, handler, kwargs)``): the
    API's, then (``dashboard``) the dashboard's (``workbench/``, its websocket, icon and
    assets), which need the setting ``workbench_dashboard``."""
    if not dashboard:
        return api_handlers()
    from workbench.jupyter.handlers.dashboard import dashboard_handlers

    return api_handlers() + dashboard_handlers(DASHBOARD_PATH)


__all__ = ["API_PREFIX", "DASHBOARD_PATH", "api_handlers", "workbench_handlers"]
