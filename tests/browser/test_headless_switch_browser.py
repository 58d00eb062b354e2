"""The Headless tab's switch in a real browser, on the Jupyter-hosted dashboard: while HTTP
and gRPC clients send infer requests to the engine's v2 ports, a click hands the ports to a
headless ``workbench serve`` (the page shows the state and the command line it ran, ready
for a service file) and a second click takes them back; no request failed, no connection was
refused (issue 32 part 3). The inline notebook dashboard's engine serves no v2 ports, so its
Headless tab shows why there is no switch (tests/ui/test_ui_headless.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.browser.browser_support import ADD_SUB, PATIENCE_S, doc_image, subject
from tests.browser.test_headless_browser import open_headless
from workbench.testing.switch_load import SwitchLoad

WAIT_MS = PATIENCE_S * 1000
STATE = ".workbench-switch-state"
COMMAND = ".workbench-switch-command"


def load_inputs() -> dict[str, np.ndarray] | None:
    """The inputs of the load's requests to :func:`subject` (FP32, as its v2 JSON body); None
    for add_sub (the load's own inputs)."""
    if subject() is ADD_SUB:
        return None
    return {tensor["name"]: np.array(tensor["data"], dtype=np.float32).reshape(tensor["shape"])
            for tensor in subject().body["inputs"]}


def test_switch_to_headless_and_back_under_load(browser, dashboard, shots: Path) -> None:
    from playwright.sync_api import expect

    ports = dashboard.get("status")["ports"]
    page = open_headless(browser, dashboard)
    expect(page.locator(STATE)).to_contain_text("in-process", timeout=WAIT_MS)
    expect(page.get_by_role("button", name="Switch back")).to_be_disabled()
    # add_sub; digits_mlp when the docs' screenshot is retaken (the conftest's sample models)
    load = SwitchLoad(ports["http"], ports["grpc"], subject().name, load_inputs()).start()
    try:
        page.get_by_role("button", name="Switch to headless").click()
        expect(page.locator(STATE)).to_contain_text("started workbench serve", timeout=WAIT_MS)
        expect(page.locator(STATE)).to_contain_text(
            re.compile(r"headless: HTTP \d+, gRPC \d+, metrics \d+ served by the headless "
                       r"workbench serve \(pid \d+\)"), timeout=WAIT_MS)
        command = page.locator(COMMAND)
        expect(command).to_contain_text(f"--http-port={ports['http']} --reuse-http-port=true")
        expect(command).to_contain_text(f"--grpc-port={ports['grpc']} --reuse-grpc-port=true")
        expect(command).to_contain_text("ExecStart=")
        expect(page.get_by_role("button", name="Switch to headless")).to_be_disabled()
        page.screenshot(path=shots / "1-headless.png", full_page=True)
        doc_image(page, "Headless")

        page.get_by_role("button", name="Switch back").click()
        expect(page.locator(STATE)).to_contain_text(re.compile(r"^in-process: "), timeout=WAIT_MS)
        expect(page.locator(STATE)).to_contain_text("workbench serve drained and exited (0)")
        expect(page.locator(".alert-danger:visible")).to_have_count(0)
        expect(page.get_by_role("button", name="Switch to headless")).to_be_enabled()
        page.screenshot(path=shots / "2-back.png", full_page=True)
    finally:
        total = load.stop()
        page.close()
    assert total.requests > 0 and (total.failed, total.refused) == (0, 0), total.errors
