"""The workbench UI: live statistics, Panel/Bokeh dashboards and notebook widgets.

Like the frontends, the UI reads and acts only through the engine's public API (the names
``workbench`` exports). Importing this package imports neither Panel nor Bokeh: the
dashboards import them when they are built, so hosts can use :mod:`workbench.ui.live_stats`
without them.
"""
