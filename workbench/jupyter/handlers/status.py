"""``GET api/status``: the engine's state in this Jupyter server (always answered, also
while it starts, after it failed or when no repository is configured)::

    {"state": "running", "error": "", "live": true, "ready": true, "version": "0.1.0",
     "model_control_mode": "explicit", "model_repository": ["/models"],
     "ports": {"http": 8000, "grpc": 8001, "metrics": 8002}, "dashboard_sessions": 1,
     "ports_key": {"header": "workbench-api-key",
                   "grpc_header": "triton-grpc-protocol-workbench-api-key",
                   "value": "...", "restricted": ["model-repository", "shared-memory", ...]}}

``state`` is ``not configured``, ``starting``, ``running``, ``failed``, ``stopping`` or
``stopped``; ``error`` says why it failed; ``ports`` are the v2 ports actually bound with
``open_ports`` (port 0 resolved), ``{}`` without; ``dashboard_sessions`` counts the dashboard
sessions alive (a closed tab's until it is cleaned up; null without the dashboard);
``ports_key`` is the key the v2 ports' restricted API groups need (``c.Workbench.ports_key``,
``ports_restricted_api``), null without ``open_ports``: only the signed-in user reads it here.
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
        self.reply({**self.host.status(), "dashboard_sessions": sessions,
                    "ports_key": self.settings.get("workbench_ports_key")})


__all__ = ["StatusHandler"]
