"""JupyterLab in a real browser: the "Model Serving Workbench" launcher card opens the
dashboard in a Lab tab whose clicks reach the engine, the command brings the same tab forward
instead of opening another, without the workbench server extension the card says why
instead of framing a 404, and ``workbench.ui.dashboard(server)`` renders inline in a Lab
notebook with nothing fetched from another server (no CDN: this machine has no internet).

Needs Chromium and Playwright (see conftest) and the built Lab extension (``make setup``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.browser.browser_support import (
    BASE_URL,
    ENABLE_FILE,
    PATIENCE_S,
    Dashboard,
    eventually,
    run_all_cells_until,
    serving,
    write_dashboard_notebook,
)
from workbench.testing.lab import LAB_TEST_FLAGS, OPEN_DASHBOARD_COMMAND, lab_missing
from workbench.testing.process import JupyterProcess

LABEL = "Model Serving Workbench"
WAIT_MS = PATIENCE_S * 1000


def start_lab(home: Path, *flags: str, engine: bool = True) -> JupyterProcess:
    """`jupyter lab` under :data:`BASE_URL`; ``engine=False`` disables the workbench server
    extension (on the command line: it outranks every ``jupyter_server_config.d`` file)."""
    missing = lab_missing()
    if missing:
        pytest.skip(missing)
    if not engine:
        flags = (*flags, "--ServerApp.jpserver_extensions=workbench.jupyter=False")
    return JupyterProcess([f"--ServerApp.base_url={BASE_URL}", *LAB_TEST_FLAGS, *flags], home=home,
                          enable_file=ENABLE_FILE, lab=True, engine=engine)


@pytest.fixture(scope="module")
def lab(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """`jupyter lab` with the workbench server extension on ``models`` (add_sub, digits_mlp)."""
    home = tmp_path_factory.mktemp("lab-home")
    with serving(start_lab(home, f"--Workbench.model_repository={models}")) as served:
        yield served


def open_lab(browser, jupyter: JupyterProcess):
    """A new browser tab on Lab, once the launcher shows the workbench card."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"http://127.0.0.1:{jupyter.jupyter_port}{BASE_URL}lab?token={jupyter.token}")
    card = page.locator(".jp-LauncherCard", has_text=LABEL)
    card.wait_for(timeout=WAIT_MS)
    return page, card


def dashboard_tabs(page) -> int:
    """How many Lab tabs carry the dashboard's label."""
    return page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=LABEL).count()


def test_the_launcher_card_opens_a_working_dashboard_tab(browser, lab: Dashboard, shots: Path) -> None:
    page, card = open_lab(browser, lab.jupyter)
    page.screenshot(path=shots / "1-launcher.png")
    card.click()

    frame = page.frame_locator(".jp-WorkbenchDashboard iframe")
    frame.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    assert dashboard_tabs(page) == 1
    page.screenshot(path=shots / "2-dashboard-tab.png")

    # the framed dashboard is the live one: its buttons reach the engine
    frame.get_by_role("button", name="Unload", exact=True).click()
    eventually(lambda: lab.state("add_sub") == "UNAVAILABLE", "add_sub unloaded from the Lab tab")
    frame.get_by_role("button", name="Load", exact=True).click()
    eventually(lambda: lab.state("add_sub") == "READY", "add_sub loaded again from the Lab tab")

    # the command (also in the palette) brings the open tab forward instead of a second one
    label = page.evaluate(f"() => window.jupyterapp.commands.label({json.dumps(OPEN_DASHBOARD_COMMAND)})")
    assert label == LABEL
    page.evaluate(f"() => window.jupyterapp.commands.execute({json.dumps(OPEN_DASHBOARD_COMMAND)})")
    page.wait_for_timeout(500)
    assert dashboard_tabs(page) == 1
    page.screenshot(path=shots / "3-after-command.png")
    page.close()


def test_without_the_server_extension_the_card_says_why(
        browser, tmp_path_factory: pytest.TempPathFactory, shots: Path) -> None:
    jupyter = start_lab(tmp_path_factory.mktemp("lab-bare-home"), engine=False)
    try:
        page, card = open_lab(browser, jupyter)
        card.click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=WAIT_MS)
        assert "workbench server extension is not running" in dialog.inner_text()
        page.screenshot(path=shots / "no-server-extension.png")
        assert dashboard_tabs(page) == 0
        page.close()
    finally:
        jupyter.stop()


def test_the_dashboard_renders_inline_in_a_lab_notebook_without_a_cdn(
        browser, lab: Dashboard, models: Path, shots: Path) -> None:
    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "inline.ipynb", models)

    here = f"127.0.0.1:{lab.jupyter.jupyter_port}"
    elsewhere: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.on("request", lambda r: elsewhere.append(r.url)
            if urlsplit(r.url).scheme in ("http", "https") and urlsplit(r.url).netloc != here else None)
    page.goto(f"http://{here}{BASE_URL}lab/tree/inline.ipynb?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    run_all_cells_until(page, lambda: output.locator(".tabulator-cell", has_text="add_sub").first.is_visible(),
                        "the dashboard's Models table in the notebook's output")
    output.locator(".bk-tab", has_text="Config").first.click()
    page.screenshot(path=shots / "inline-dashboard.png")
    # the notebook's engine serves no v2 ports: the Headless tab says why it has no switch
    output.locator(".bk-tab", has_text="Headless").first.click()
    output.get_by_text("The switch needs the v2 ports served by this process").first.wait_for(timeout=30_000)
    assert output.get_by_role("button", name="Switch to headless").first.is_disabled()
    assert elsewhere == []
    page.close()
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():  # the kernel and its engine
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()
