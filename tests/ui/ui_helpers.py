"""Helpers shared by the UI tests (fixtures are in conftest.py)."""

from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.model import Model
from bokeh.models import TabPanel, Tabs
from panel.viewable import Viewable

from workbench import InferenceRequest, Server, Tensor


def add_sub_request(batch: int = 1) -> InferenceRequest:
    a = np.ones((batch, 16), np.float32)
    return InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)])


def render_root(obj: object) -> Model:
    """The root Bokeh model ``pn.panel(obj)`` renders (what a notebook cell or a session shows)."""
    view = pn.panel(obj)
    assert isinstance(view, Viewable), view  # pn.panel is typed to return a ServableMixin too
    return view.get_root()


def rendered_tab_titles(obj: object) -> list[str]:
    """The titles of the Bokeh ``Tabs`` that ``pn.panel(obj)`` renders, in order."""
    root = render_root(obj)
    assert isinstance(root, Tabs), root
    titles = []
    for tab in root.tabs:
        assert isinstance(tab, TabPanel), tab  # bokeh also types a tab as a (title, child) pair
        titles.append(tab.title)
    return titles


async def index_states(server: Server, name: str) -> dict[str, tuple[str, str]]:
    """version -> (state, reason) of ``name`` in the repository index."""
    return {row.get("version", ""): (row.get("state", ""), row.get("reason", ""))
            for row in await server.repository_index() if row["name"] == name}
