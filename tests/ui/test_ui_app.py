"""The whole dashboard: tabs, the Tuning slot, one periodic callback, rendering to Bokeh
models, and ``create_app`` served per session by a real Panel server on the engine's loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import panel as pn

from tests.ui.ui_helpers import add_sub_request, rendered_tab_titles
from workbench import Server, ui
from workbench.ui import create_app, dashboard
from workbench.ui.shared.store import EngineStore
from workbench.ui.tuning.tuning_view import TuningView


async def test_dashboard_has_the_tabs_in_order_and_renders(server: Server) -> None:
    board = dashboard(server, interval_s=60)
    try:
        await board.store.settle()
        assert board.models.model.options == ["add_sub", "digits_mlp"]
        assert board.config.editor.value.startswith("\nname: \"add_sub\"")
        # the Bokeh models a notebook cell or session shows
        assert rendered_tab_titles(board) == ["Models", "Config", "Live", "Rollout", "Tuning", "Headless"]
        assert isinstance(board.tuning, TuningView)
        assert board.tuning.form.model.options == ["add_sub", "digits_mlp"]
    finally:
        board.close()
        board.close()  # idempotent


async def test_the_tutorial_and_the_docs_name_every_tab_the_dashboard_shows(server: Server) -> None:
    """A new user reads the tab list in notebook 01 (section 4), docs/dashboard.md and the
    module texts: each names every tab a dashboard renders (Rollout and Tuning were missing)."""
    board = dashboard(server, interval_s=60)
    try:
        titles = rendered_tab_titles(board)
    finally:
        board.close()
    root = Path(__file__).resolve().parents[2]
    cells = json.loads((root / "notebooks" / "01_quickstart.ipynb").read_text())["cells"]
    section = next("".join(c["source"]) for c in cells
                   if "".join(c["source"]).startswith("## 4. The dashboard, inline"))
    dashboard_doc = (root / "docs" / "dashboard.md").read_text()
    for title in titles:
        assert f"* **{title}**:" in section, title
        assert f"* **{title}**:" in dashboard_doc, title
    listed = f"{', '.join(titles)} tabs"
    for text in (ui.__doc__ or "", (root / "docs" / "jupyter.md").read_text(),
                 (root / "docs" / "development.md").read_text()):
        assert listed in " ".join(text.split()), listed


async def test_the_tuning_slot_goes_between_live_and_headless(server: Server) -> None:
    stores = []

    def tuning(store: EngineStore) -> pn.viewable.Viewable:
        stores.append(store)
        return pn.pane.Markdown("sweep")

    board = dashboard(server, tuning=tuning, interval_s=60)
    try:
        assert rendered_tab_titles(board) == ["Models", "Config", "Live", "Rollout", "Tuning", "Headless"]
        assert stores == [board.store]
    finally:
        board.close()


async def test_no_tuning_tab_when_asked_and_closing_stops_a_running_search(server: Server) -> None:
    board = dashboard(server, tuning=None, interval_s=60)
    board.close()
    assert rendered_tab_titles(board) == ["Models", "Config", "Live", "Rollout", "Headless"]
    assert board.tuning is None
    board = dashboard(server, interval_s=60)
    try:
        await board.store.settle()
        view = board.tuning
        assert isinstance(view, TuningView)
        form = view.form
        form.model.value = "add_sub"
        await board.store.settle()  # the space filled from the model
        form.space.value, form.levels.value = "max_queue_delay_us=0,100", "1:20:1"
        form.warmup_ms.value, form.interval_ms.value, form.max_windows.value = 0, 250, 3
        view.param.watch(lambda _e: board.close(), "points_done")  # after the first point
        task = view.start()
        await board.store.settle()
    finally:
        board.close()
    assert task is not None and view.points_done == 1 and not view.running
    assert view.outcome.result is not None and view.outcome.result.stopped


async def test_one_periodic_callback_feeds_the_live_plots(server: Server) -> None:
    board = dashboard(server, interval_s=0.05)
    try:
        async def two_points() -> None:
            while len(board.live.series.data["time"]) < 2:
                await server.infer(add_sub_request())
                await asyncio.sleep(0.02)

        await asyncio.wait_for(two_points(), 20)  # asyncio.timeout is Python 3.11+
        assert max(board.live.series.data["inferences_per_s"]) > 0
    finally:
        board.close()
    rows = len(board.live.series.data["time"])
    await asyncio.sleep(0.2)
    assert len(board.live.series.data["time"]) == rows  # stopped with the dashboard


async def test_create_app_serves_a_session_on_the_engines_loop(server: Server) -> None:
    sessions = []

    def app():
        sessions.append(create_app(server, interval_s=60))
        return sessions[-1]

    served = pn.serve({"workbench": app}, port=0, address="127.0.0.1", show=False, start=False,
                      threaded=False)
    try:
        served.start()
        async with httpx.AsyncClient(timeout=30) as client:
            page = await client.get(f"http://127.0.0.1:{served.port}/workbench")
        assert page.status_code == 200 and "bokeh" in page.text.lower()
        assert len(sessions) == 1
        await sessions[0].store.settle()
        assert sessions[0].models.model.options == ["add_sub", "digits_mlp"]
    finally:
        served.stop()
        for session in sessions:
            session.close()
