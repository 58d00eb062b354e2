"""The Tuning tab inside a real dashboard session of the Jupyter host (a Bokeh server
session, with its document lock): a run of the tuner started by the Run button plots every
point, fills the table and ends "done" with a verdict, with no Bokeh model changed outside
the document's lock (which Bokeh refuses: "_pending_writes should be non-None when we have a
document lock")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import pytest
from panel.io.state import set_curdoc
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from workbench.jupyter.dashboard import DashboardMount
from workbench.ui.tuning.tuning_view import TuningView


@pytest.fixture
def jp_base_url() -> str:
    return "/jhub/user/x/"


async def until(check, what: str, timeout_s: float = 60.0):
    """``check()`` once truthy (re-checked each loop turn, up to ``timeout_s``)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (value := check()):
        assert asyncio.get_running_loop().time() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.02)
    return value


async def test_a_run_in_a_jupyter_session_plots_every_point(
        workbench, jp_serverapp, jupyter_url: str, jp_auth_header: dict) -> None:
    mount: DashboardMount = jp_serverapp.web_app.settings["workbench_dashboard"]
    page = await AsyncHTTPClient().fetch(HTTPRequest(f"{jupyter_url}workbench/", headers=jp_auth_header))
    assert page.code == 200
    session = next(iter(mount.context.sessions))
    app = next(iter(mount.dashboards))
    view, doc = app.tuning, session.document
    assert isinstance(view, TuningView)

    def click(action) -> None:
        with set_curdoc(doc):  # as Panel runs a browser event: in the session, under its lock
            action()

    async def locked(action: Callable[[], object]) -> None:
        # bokeh types with_document_locked as returning click's result; its decorator makes it a coroutine
        await cast("Awaitable[None]", session.with_document_locked(click, action))

    await locked(lambda: app.open_tab("Tuning"))
    await until(lambda: view.plot.figure.document is doc, "the Tuning tab rendered in the session")
    await until(lambda: "add_sub" in view.form.model.options, "the model list")
    form = view.form
    await locked(lambda: setattr(form.model, "value", "add_sub"))
    await until(lambda: (form.space.value or "").startswith("instance_count="), "the space filled from add_sub")
    form.space.value, form.levels.value = "max_queue_delay_us=0,100", "1, 2"
    form.warmup_ms.value, form.interval_ms.value, form.max_windows.value = 50, 250, 3
    await locked(lambda: setattr(view.run_button, "clicks", 1))
    await until(lambda: view._task is not None, "the run started")
    await app.store.settle()
    assert view._task is not None and view._task.exception() is None
    assert not view.error.visible, view.error.object
    result = view.outcome.result
    assert result is not None and len(result.points) >= 2
    assert view.status.object.startswith(f"done: {len(result.points)} points"), view.status.object
    await until(lambda: sum(len(s.data["throughput"]) for s in view.plot.sources.values()) == len(result.points),
                "every point on the plot")
    assert len(view.table.value) == len(result.points)
    assert result.decision.why in view.outcome.verdict.object
