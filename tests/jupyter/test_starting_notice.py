"""What the Jupyter-hosted dashboard says while the engine is not running (issue 35; the
page's switch to the dashboard is tests/browser/test_starting_browser.py): a start under way
with its seconds and the model versions ready so far, a failure with its reason and that
the page keeps watching."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from workbench import ServerOptions
from workbench.jupyter.host import EngineHost
from workbench.jupyter.starting_view import describe
from workbench.testing.fake_backend import BEHAVIOUR, write_fake_model

pytestmark = pytest.mark.usefixtures("fake_backend")


async def test_a_start_under_way_shows_its_progress(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "slow", count=1)
    host = EngineHost(ServerOptions(model_repository=[str(tmp_path)]), open_ports=False)
    BEHAVIOUR.load_gate.clear()
    host.begin()
    try:
        assert await asyncio.to_thread(BEHAVIOUR.loading.wait, 30), "no load started"
        text = describe(host)
        assert text.startswith("The workbench engine is starting (") and " s; 0 of 1 model versions ready" in text
        assert "switches to the dashboard once it runs" in text
    finally:
        BEHAVIOUR.load_gate.set()
    assert await host.started() == "running"
    assert host.loading_progress() == (1, 1)
    await host.stop()


def test_a_failed_engine_says_why_and_is_watched() -> None:
    host = EngineHost(None, open_ports=False, error="invalid configuration: nope")
    assert describe(host) == ("The workbench engine did not start: invalid configuration: nope. Watching for a "
                              "restart: this page switches to the dashboard once it runs.")
    assert "c.Workbench.model_repository" in describe(EngineHost(None, open_ports=False))
