"""The Models tab in Chromium, in the Jupyter-hosted dashboard (``{base_url}/workbench/``) and
in the inline notebook dashboard (a kernel's engine, in JupyterLab): Load / Unload / Reload
clicked and the table's cells read as the page shows them (whole states, no ``UNAVAILA``),
changes made elsewhere (the v2 API) followed without Refresh, the per-version columns
(backend, instances, max_batch_size and batching, live requests/s, p99, failures, memory)
and the click-through that opens a model in the Config and Live tabs; the Rollout tab's steps
(``tests/browser/rollout_steps.py``) on the same servers."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.browser_support import (
    BASE_URL,
    CHROMIUM,
    ENABLE_FILE,
    PATIENCE_S,
    Dashboard,
    eventually,
    run_all_cells_until,
    serving,
    write_dashboard_notebook,
)
from tests.browser.rollout_steps import (
    rollout_tab_in_the_inline_notebook_dashboard,
    rollout_tab_in_the_jupyter_dashboard,
)
from tests.browser.test_dashboard_browser import infer_add_sub, open_dashboard
from tests.browser.test_lab_launcher_browser import lab  # noqa: F401 - the lab fixture
from workbench.testing.process import JupyterProcess
from workbench.ui.models.models_view import BUTTONS

WAIT_MS = PATIENCE_S * 1000


@pytest.fixture(scope="module")
def served(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A real Jupyter server with the workbench extension, its dashboard sessions lingering
    as by default (15 s), as a person's does. (A table that stopped updating after an action
    was Panel's queued websocket writes losing a change, with either linger: see
    ``workbench.ui.shared.panel_writes`` and ``test_dashboard_socket_browser``.)"""
    if importlib.util.find_spec("playwright") is None or not CHROMIUM.exists():
        pytest.skip("needs Playwright and Chromium (see conftest)")
    jupyter = JupyterProcess(
        [f"--Workbench.model_repository={models}", f"--ServerApp.base_url={BASE_URL}",
         "--Workbench.open_ports=True", "--Workbench.http_port=0", "--Workbench.grpc_port=0",
         "--Workbench.metrics_port=0"],
        home=tmp_path_factory.mktemp("jupyter-home"), enable_file=ENABLE_FILE)
    with serving(jupyter) as running:
        yield running
#: a table changed elsewhere shows within this (the dashboard refreshes it every second)
FOLLOW_MS = 10_000


def row(scope, model: str, version: str = "1"):
    """The Models table's row of ``model`` / ``version``, as a locator."""
    inner = getattr(scope, "page", scope)  # a filter's locator is relative: from the page
    return (scope.locator(".tabulator-row")
            .filter(has=inner.locator('.tabulator-cell[tabulator-field="model"]', has_text=model))
            .filter(has=inner.locator('.tabulator-cell[tabulator-field="version"]',
                                      has_text=version)))


def cell(scope, model: str, field: str, version: str = "1"):
    return row(scope, model, version).locator(f'.tabulator-cell[tabulator-field="{field}"]')


def expect_state(scope, model: str, state: str, timeout_ms: float = WAIT_MS) -> None:
    """Wait until the page's table shows ``state`` for ``model``'s version 1, and check the
    cell shows all of it (not cut off)."""
    from playwright.sync_api import expect

    state_cell = cell(scope, model, "state")
    expect(state_cell).to_have_text(state, timeout=timeout_ms)
    assert state_cell.evaluate("e => e.scrollWidth <= e.clientWidth"), f"'{state}' is cut off"


def v2_call(served: Dashboard, path: str) -> None:
    """POST ``path`` on the engine's v2 HTTP port, with the ports key its repository API
    needs."""
    status = served.get("status")
    key = status["ports_key"]
    with httpx.Client(base_url=f"http://127.0.0.1:{status['ports']['http']}", timeout=60,
                      headers={key["header"]: key["value"]}) as client:
        response = client.post(path, json={})
        assert response.status_code == 200, response.text


def click_button(scope, name: str) -> None:
    scope.get_by_role("button", name=name, exact=True).first.click()


def test_models_tab_actions_and_the_table_in_the_jupyter_dashboard(
        browser, served: Dashboard, shots: Path, models: Path) -> None:
    from playwright.sync_api import expect

    page = open_dashboard(browser, served)
    lost: list[str] = []
    page.on("console", lambda m: lost.append(m.text) if "Lost websocket" in m.text else None)
    expect_state(page, "add_sub", "READY")
    # the per-version columns of a person's first look
    expect(cell(page, "add_sub", "backend")).to_have_text("onnxruntime")
    expect(cell(page, "add_sub", "max_batch_size")).to_have_text("8")
    expect(cell(page, "add_sub", "batching")).to_have_text("dynamic")
    expect(cell(page, "add_sub", "instances")).to_have_text("2 × CPU")
    expect(cell(page, "add_sub", "memory")).to_contain_text("≈")
    page.screenshot(path=shots / "1-models.png", full_page=True)

    # Unload: the table shows it at once, whole, with the reason
    expect(page.get_by_label("Model", exact=True).first).to_have_value("add_sub")
    click_button(page, "Unload")
    expect_state(page, "add_sub", "UNAVAILABLE")
    expect(cell(page, "add_sub", "reason")).to_have_text("unloaded")
    page.screenshot(path=shots / "2-unloaded.png", full_page=True)
    click_button(page, "Load")
    expect_state(page, "add_sub", "READY")
    click_button(page, "Reload")
    page.get_by_text("'add_sub' reloaded").wait_for(timeout=WAIT_MS)
    expect_state(page, "add_sub", "READY")

    # changes made elsewhere (the v2 API) show without Refresh
    v2_call(served, "/v2/repository/models/add_sub/unload")
    expect_state(page, "add_sub", "UNAVAILABLE", FOLLOW_MS)
    v2_call(served, "/v2/repository/models/add_sub/load")
    expect_state(page, "add_sub", "READY", FOLLOW_MS)

    # live traffic shows as requests/s and p99 in the table
    http_port = served.get("status")["ports"]["http"]

    def traffic_shown() -> bool:
        infer_add_sub(http_port, 30)
        shown = cell(page, "add_sub", "requests_per_s").inner_text()
        p99 = cell(page, "add_sub", "p99_ms").inner_text()
        return shown not in ("", "–") and float(shown) > 0 and p99 not in ("", "–")
    eventually(traffic_shown, "add_sub's requests/s and p99 in the Models table")
    assert float(cell(page, "add_sub", "failures").inner_text()) == 0
    for field in ("memory", "instances", "backend"):  # whole texts, as the state's
        assert cell(page, "add_sub", field).evaluate("e => e.scrollWidth <= e.clientWidth"), field
    page.screenshot(path=shots / "3-traffic.png", full_page=True)

    # a failed load's reason, longer than its column: whole on hover and under the table when
    # its row is selected (the column alone cut it off: the new-user trial could not read it)
    broken = models / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    (broken / "1" / "model.onnx").write_bytes(b"<not an ONNX file> * __0__")
    status = served.get("status")
    key = status["ports_key"]
    with httpx.Client(base_url=f"http://127.0.0.1:{status['ports']['http']}", timeout=60,
                      headers={key["header"]: key["value"]}) as client:
        assert client.post("/v2/repository/models/broken/load", json={}).status_code == 400
        [entry] = [e for e in client.post("/v2/repository/index", json={}).json()
                   if e["name"] == "broken"]
    reason = entry["reason"]
    assert len(reason) > 60, reason
    expect_state(page, "broken", "UNAVAILABLE", FOLLOW_MS)
    reason_cell = cell(page, "broken", "reason")
    expect(reason_cell.locator("span")).to_have_attribute("title", reason)
    assert not reason_cell.evaluate("e => e.scrollWidth <= e.clientWidth"), "expected a cut reason"
    cell(page, "broken", "state").click()
    note = page.locator(".workbench-reason")
    expect(note).to_have_text(f"broken version 1: {reason}", timeout=WAIT_MS)
    page.screenshot(path=shots / "3b-failed-reason.png", full_page=True)
    shutil.rmtree(broken)  # the module's repository is the inline test's too (it loads '*')

    # click through: digits_mlp's Config button opens it in the Config tab, Live follows
    row(page, "digits_mlp", "2").locator(".tabulator-cell", has_text="⚙ Config").click()
    expect(page.locator(".bk-tab.bk-active")).to_have_text("Config")
    expect(page.get_by_label("Model", exact=True).first).to_have_value("digits_mlp", timeout=WAIT_MS)
    page.get_by_text('name: "digits_mlp"').first.wait_for(timeout=WAIT_MS)
    page.screenshot(path=shots / "4-config-of-digits.png", full_page=True)
    page.locator(".bk-tab", has_text="Models").click()
    row(page, "digits_mlp", "2").locator(".tabulator-cell", has_text=BUTTONS["live"]).click()
    expect(page.locator(".bk-tab.bk-active")).to_have_text("Live")
    expect(page.get_by_label("Model version")).to_have_value("digits_mlp/2", timeout=WAIT_MS)
    page.screenshot(path=shots / "5-live-of-digits.png", full_page=True)
    assert lost == []  # the session's websocket stayed up throughout
    page.close()


def test_models_tab_actions_in_the_inline_notebook_dashboard(
        browser, lab, models: Path, shots: Path) -> None:  # noqa: F811 - the lab fixture
    from playwright.sync_api import expect

    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "models_inline.ipynb", models,
                             "model_control_mode='explicit', load_model=['*']")
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(f"{lab.root}lab/tree/models_inline.ipynb?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    try:
        run_all_cells_until(page, lambda: cell(output, "add_sub", "state").first.is_visible(),
                            "the inline dashboard's Models table")
    finally:
        page.screenshot(path=shots / "inline-0-rendered.png")
    expect_state(output, "add_sub", "READY")
    expect(output.get_by_label("Model", exact=True).first).to_have_value("add_sub")
    click_button(output, "Unload")
    expect_state(output, "add_sub", "UNAVAILABLE")
    expect(cell(output, "add_sub", "reason")).to_have_text("unloaded")
    # the selected row's whole reason under the table, as in the Jupyter-hosted dashboard
    expect(cell(output, "add_sub", "reason").locator("span")).to_have_attribute("title", "unloaded")
    cell(output, "add_sub", "state").click()
    expect(output.locator(".workbench-reason")).to_have_text("add_sub version 1: unloaded",
                                                            timeout=WAIT_MS)
    page.screenshot(path=shots / "inline-unloaded.png")
    click_button(output, "Load")
    expect_state(output, "add_sub", "READY")
    click_button(output, "Reload")
    output.get_by_text("'add_sub' reloaded").wait_for(timeout=WAIT_MS)
    expect_state(output, "add_sub", "READY")
    row(output, "digits_mlp", "1").locator(".tabulator-cell", has_text="⚙ Config").click()
    expect(output.get_by_label("Model", exact=True).first).to_have_value("digits_mlp",
                                                                          timeout=WAIT_MS)
    page.screenshot(path=shots / "inline-config-of-digits.png")
    page.close()
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()


def test_rollout_tab_in_the_jupyter_dashboard(browser, served: Dashboard, shots: Path) -> None:
    rollout_tab_in_the_jupyter_dashboard(browser, served, shots)


def test_rollout_tab_in_the_inline_notebook_dashboard(
        browser, lab, models: Path, shots: Path) -> None:  # noqa: F811 - the lab fixture
    rollout_tab_in_the_inline_notebook_dashboard(browser, lab, models, shots)
