"""A dashboard session's root while the Jupyter server's engine is not running yet.

``GET workbench/`` answers at once, also while the engine is still loading its models (the
URL ``make jupyter`` prints comes well before the engine runs). The session then shows the
engine host's state with its progress (seconds since the start began, model versions ready
so far) and, from a Panel periodic callback on the session's document, replaces itself with
the dashboard as soon as the host is ``running``. A host that ``failed`` shows why and is
watched on (a restart may come). The callback stops once the dashboard is shown or the
session ends. Beyond Triton (which has no dashboard).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import panel as pn
from bokeh.document import Document
from panel.io.state import set_curdoc

from workbench.jupyter.host import FAILED, RUNNING, STARTING, EngineHost

#: how often the host's state is read (milliseconds)
WATCH_PERIOD_MS = 500


def describe(host: EngineHost) -> str:
    """The notice for ``host`` not running: its state, the reason it failed or is not
    configured, and while starting the seconds elapsed and the model versions ready so far."""
    if host.state == STARTING:
        ready, known = host.loading_progress()
        models = f"; {ready} of {known} model versions ready so far" if known else ""
        return (f"The workbench engine is starting ({host.elapsed_s():.0f} s{models}). "
                "This page switches to the dashboard once it runs.")
    reason = f": {host.error}" if host.error else ""
    if host.state == FAILED:
        return (f"The workbench engine did not start{reason}. Watching for a restart: this page "
                "switches to the dashboard once it runs.")
    return f"The workbench engine is {host.state}{reason}."


class StartingView:
    """The notice of a session opened before the engine runs, swapped for the dashboard.

    Args:
        host: the engine host watched.
        build: makes the session's dashboard (called once, on the session's document, when
            the host is ``running``).
        document: the session's document (the periodic callback runs on it).
        period_ms: how often the host is read (milliseconds).
    """

    def __init__(self, host: EngineHost, build: Callable[[], pn.viewable.Viewable | pn.viewable.Viewer],
                 document: Document, period_ms: int = WATCH_PERIOD_MS) -> None:
        self.host, self._build, self._document = host, build, document
        self.notice = pn.pane.Alert(describe(host), alert_type=self._alert_type(), name="engine-starting")
        #: the session's root: the notice, then the dashboard
        self.root = pn.Column(self.notice, sizing_mode="stretch_width")
        self._callback: pn.io.PeriodicCallback | None = pn.state.add_periodic_callback(
            self.refresh, period=period_ms)
        pn.state.on_session_destroyed(lambda _context: self.stop())

    @property
    def watching(self) -> bool:
        """Whether the periodic callback still reads the host."""
        return self._callback is not None

    def _alert_type(self) -> Literal["danger", "warning"]:
        return "danger" if self.host.state == FAILED else "warning"

    def refresh(self) -> None:
        """One beat: the dashboard in place of the notice when the host runs (then the
        callback stops), else the notice brought up to date."""
        if self._callback is None:
            return
        if self.host.state != RUNNING:
            self.notice.object, self.notice.alert_type = describe(self.host), self._alert_type()
            return
        self.stop()
        with set_curdoc(self._document):  # the dashboard registers its clean-up on this session
            self.root.objects = [self._build()]

    def stop(self) -> None:
        """Stop reading the host; idempotent."""
        if self._callback is not None:
            self._callback.stop()
            self._callback = None


__all__ = ["WATCH_PERIOD_MS", "StartingView", "describe"]
