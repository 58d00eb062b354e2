"""The workbench UI: Panel/Bokeh dashboards and notebook widgets (their live statistics are
:mod:`workbench.serving.live_stats`, below the UI, shared with the Jupyter host).

Like the frontends, the UI reads and acts only through the engine's public API (the names
``workbench`` exports). Importing this package imports neither Panel nor Bokeh: the
dashboards import them when they are built, so a host can import the UI without them (the
``ui`` extra installs Panel, Bokeh and ipywidgets).

* ``dashboard(server)``: the whole dashboard in a notebook cell (Models, Config, Live, Rollout,
  Tuning, Headless tabs); ``dashboard(url="http://host:8000")``: the same attached to a v2 server it
  did not start (:mod:`workbench.remote`, docs/attach.md).
* ``create_app(server)``: the same for one Bokeh/Panel server session;
  ``prepare_session()``: a session's page made ready for a dashboard shown later in it.
* ``workbench.ui.widgets.ModelControls``: ipywidgets controls for tuning loops in plain Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for the type checker (no import at run time)
    from workbench.ui.app import Dashboard, create_app, dashboard, prepare_session
    from workbench.ui.widgets import ModelControls

_LAZY = {"Dashboard": "workbench.ui.app", "create_app": "workbench.ui.app",
         "dashboard": "workbench.ui.app", "prepare_session": "workbench.ui.app",
         "ModelControls": "workbench.ui.widgets"}


def __getattr__(name: str) -> Any:
    """``workbench.ui.dashboard`` and friends, imported (with Panel) on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench.ui' has no attribute '{name}'")


__all__ = ["Dashboard", "ModelControls", "create_app", "dashboard", "prepare_session"]
