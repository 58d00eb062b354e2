"""Bokeh changes from background work in a notebook (the inline dashboard): each change made
through ``change_models`` reaches the browser over the output's comm, new models and property
changes alike (a notebook's document is not held: without a hold of its own the change's
events were dispatched to no one and nothing was pushed)."""

from __future__ import annotations

import json

import panel as pn
from bokeh.document import Document
from bokeh.models import ColumnDataSource
from bokeh.models.annotations import Title  # not in the __all__ mypy reads of bokeh.models
from bokeh.plotting import figure
from pyviz_comms import Comm  # type: ignore[import-untyped]  # pyviz_comms ships no types

from workbench.ui.shared.bokeh_doc import change_models


class RecordingComm(Comm):
    """An open comm that keeps what is sent (the notebook's browser side, here)."""

    def __init__(self) -> None:
        super().__init__()
        self._comm = True  # open: Panel sends at once
        self.sent: list[str] = []

    def send(self, data=None, metadata=None, buffers=None) -> None:
        if isinstance(data, (str, bytes)):
            self.sent.append(data.decode() if isinstance(data, bytes) else data)


def test_a_change_from_background_work_is_pushed_over_the_notebook_comm() -> None:
    plot = figure()
    pane = pn.pane.Bokeh(plot)
    comm = RecordingComm()
    document = Document()
    document.add_root(pane.get_root(document, comm=comm))  # as a notebook cell's output is
    assert plot.document is not None and plot.document.session_context is None  # a notebook's
    comm.sent.clear()

    def change() -> None:
        source = ColumnDataSource({"x": [1.0], "y": [2.0]}, name="pushed_source")
        plot.line("x", "y", source=source)
        assert isinstance(plot.title, Title)  # a figure's title is a Title (typed Title | str | None)
        plot.title.text = "pushed title"

    change_models(plot, change, pane)
    sent = "\n".join(comm.sent)
    assert "pushed_source" in sent and "pushed title" in sent
    patches = [json.loads(m) for m in comm.sent if m.startswith("{") and "events" in m]
    assert patches, comm.sent
