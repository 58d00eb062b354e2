"""The Rollout tab in Chromium, in the Jupyter-hosted dashboard (``{base_url}/workbench/``) and in
the inline notebook dashboard: a split and a mirror set by typing and clicking, the live
per-version counts and the mirror's agreement read off the page, Promote and Roll back clicked
(issue 32, part 1). The tests run in ``test_models_browser`` on its Jupyter server and Lab (two
processes less to start); the steps are here."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.browser.browser_support import (
    PATIENCE_S,
    Dashboard,
    doc_image,
    run_all_cells_until,
    write_dashboard_notebook,
)
from tests.browser.test_dashboard_browser import open_dashboard, tab

WAIT_MS = PATIENCE_S * 1000
DIGIT = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                     "data": [float(i % 17) for i in range(64)]}]}
#: a notebook cell: digits_mlp requests in the background, as live traffic
TRAFFIC = """import asyncio, numpy as np
from workbench import InferenceRequest, Tensor
async def traffic():
    pixels = (np.arange(64, dtype=np.float32).reshape(1, 64) % 17)
    while True:
        await server.infer(InferenceRequest('digits_mlp', [Tensor('pixels', 'FP32', pixels)]))
        await asyncio.sleep(0.02)
traffic_task = asyncio.ensure_future(traffic())"""


def set_rollout(scope, weights: str, candidate: str, mirror: int) -> None:
    scope.get_by_label("Model", exact=True).first.select_option("digits_mlp")
    scope.get_by_label("Candidate", exact=True).first.select_option(candidate)
    for label, value in (("Weights", weights), ("Mirror %", str(mirror))):
        field = scope.get_by_label(label, exact=True).first
        field.fill(value)
        field.press("Enter")
    scope.get_by_role("button", name="Set rollout", exact=True).first.click()


def rollout_tab_in_the_jupyter_dashboard(browser, dashboard: Dashboard, shots: Path) -> None:
    from playwright.sync_api import expect

    page = open_dashboard(browser, dashboard)
    tab(page, "Rollout")
    set_rollout(page, "1:1", "2", 100)
    expect(page.get_by_text("Rollout of 'digits_mlp' set.")).to_be_visible(timeout=WAIT_MS)
    report = page.locator(".workbench-rollout-report")
    with httpx.Client(base_url=f"http://127.0.0.1:{dashboard.get('status')['ports']['http']}", timeout=30) as v2:
        for sent in range(1, 6):
            answer = v2.post("/v2/models/digits_mlp/infer", json=DIGIT)
            assert answer.status_code == 200 and answer.json()["model_version"] == "1", answer.text
            # each copy ends before the next request (copies beyond the mirror's cap of 4 in
            # flight are shed by design), as the report, followed without a click, says
            expect(report).to_contain_text(f"mirrored {sent}, shed 0", timeout=WAIT_MS)
    expect(report).to_contain_text("Mirror to version 2", timeout=WAIT_MS)
    expect(report.locator("tr", has_text="logits")).to_contain_text("argmax")
    expect(report.locator("tr", has_text="logits")).to_contain_text("100.0 %")
    page.screenshot(path=shots / "1-rollout-mirror.png", full_page=True)
    doc_image(page, "Rollout")

    page.get_by_role("button", name="Promote candidate", exact=True).click()
    expect(page.get_by_text("Version 2 of 'digits_mlp' promoted")).to_be_visible(timeout=WAIT_MS)
    assert httpx.post(f"http://127.0.0.1:{dashboard.get('status')['ports']['http']}/v2/models/digits_mlp/infer",
                      json=DIGIT).json()["model_version"] == "2"
    expect(report).to_contain_text("Promoted: version 2")
    page.screenshot(path=shots / "2-promoted.png", full_page=True)
    page.get_by_role("button", name="Roll back", exact=True).click()
    expect(page.get_by_text("'digits_mlp' rolled back")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_label("Weights", exact=True)).to_have_value("1:1")
    page.get_by_role("button", name="Clear", exact=True).click()
    expect(report).to_contain_text("No rollout", timeout=WAIT_MS)

    # bad input: a sentence in place, nothing set
    page.get_by_label("Weights", exact=True).fill("1:1, 9:1")
    page.get_by_role("button", name="Set rollout", exact=True).click()
    expect(page.get_by_text("names unknown version 9")).to_be_visible(timeout=WAIT_MS)
    expect(report).to_contain_text("No rollout")
    page.close()


def rollout_tab_in_the_inline_notebook_dashboard(browser, lab: Dashboard, models: Path, shots: Path) -> None:
    from playwright.sync_api import expect

    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "rollout_inline.ipynb", models,
                             "model_control_mode='explicit', load_model=['digits_mlp']", (TRAFFIC,))
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    # a fresh workspace: Lab would restore an earlier test's notebook beside this one, and its
    # (dead) dashboard's fields would match the locators below
    page.goto(f"{lab.root}lab/tree/rollout_inline.ipynb?reset&token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    rollout_tab = output.locator(".bk-tab", has_text="Rollout")
    try:
        run_all_cells_until(page, lambda: rollout_tab.first.is_visible(), "the inline dashboard's tabs")
    finally:
        page.screenshot(path=shots / "inline-0-rendered.png")
    rollout_tab.first.click()
    report = output.locator(".workbench-rollout-report")
    expect(report).to_contain_text("requests (statistics)", timeout=WAIT_MS)  # the form is filled
    set_rollout(output, "1:1, 2:1", "2", 100)
    lost = output.get_by_text("rollout mirror_percent needs a candidate version")
    output.get_by_text("Rollout of 'digits_mlp' set.").or_(lost).first.wait_for(timeout=WAIT_MS)
    if lost.is_visible():
        # the candidate picked sometimes did not reach the kernel when this test ran after
        # another inline dashboard in the same Lab (the page showed 2, the view held "none"):
        # pick it once more (the report says it: issue 32's helper report)
        output.get_by_label("Candidate", exact=True).first.select_option("none")
        output.get_by_label("Candidate", exact=True).first.select_option("2")
        output.get_by_role("button", name="Set rollout", exact=True).first.click()
    try:
        expect(report).to_contain_text("Mirror to version 2", timeout=WAIT_MS)
    finally:
        page.screenshot(path=shots / "inline-1-set.png")
    # the background traffic: both versions count requests, the mirror compares outputs
    expect(report.locator("tr", has_text="logits")).to_contain_text("argmax", timeout=WAIT_MS)
    expect(report).to_contain_text("Rollout: weights 1:1, 2:1")
    page.screenshot(path=shots / "inline-1-rollout.png")
    output.get_by_role("button", name="Promote candidate", exact=True).first.click()
    expect(output.get_by_text("Version 2 of 'digits_mlp' promoted")).to_be_visible(timeout=WAIT_MS)
    output.get_by_role("button", name="Roll back", exact=True).first.click()
    expect(output.get_by_text("'digits_mlp' rolled back")).to_be_visible(timeout=WAIT_MS)
    page.screenshot(path=shots / "inline-2-rolled-back.png")
    page.close()
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()
