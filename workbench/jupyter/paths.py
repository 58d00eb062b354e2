"""The workbench's paths under Jupyter's base URL, shared by the routes and the dashboard mount
(a module of its own so that :mod:`workbench.jupyter.dashboard` need not import
:mod:`workbench.jupyter.routes`, which imports the dashboard's handlers: no import cycle)."""

from __future__ import annotations

#: the dashboard's path under Jupyter's base URL
DASHBOARD_PATH = "workbench"

__all__ = ["DASHBOARD_PATH"]
