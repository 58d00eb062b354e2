"""``GET api/status``: the engine's state in this Jupyter server (always answered, also
while it starts, after it failed or when no repository is configured)::

    {"state": "running", "error": "", "live": true, "ready": true, "version": "0.1.0",
     "model_control_mode": "explicit", "model_repository": ["/models"],
     "ports": {"http": 8000, "grpc": 8001, "metrics": 8002}, "dashboard_sessions": 1}

``state`` is ``not configured``, ``starting``, ``running``, ``failed``, ``stopping`` or
``stopped``; ``error`` says why it failed; ``ports`` are the v2 ports actually bound with
``open_ports`` (port 0 resolved), ``{}`` without; ``dashboard_sessions`` counts the dashboard
sessions alive (a closed tab's until it is cleaned up; null without the dashboard).
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from workbench.jupyter.handlers.base import WorkbenchHandler


class StatusHandler(WorkbenchHandler):
    """``GET api/status``."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        dashboard = self.settings.get("workbench_dashboard")
        sessions = dashboard.open_sessions if dashboard is not None else None
        self.reply({**self.host.status(), "dashboard_sessions": sessions})


__all__ = ["StatusHandler"]
