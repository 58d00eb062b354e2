"""The Jupyter-hosted dashboard's page follows every action: many Unload / Load clicks in a
row, each one's table change shown, the websocket up throughout.

A change made while the session's websocket was busy could stay unsent (Panel 1.9's queued
writes, corrected by ``workbench.ui.shared.panel_writes``): the table stayed on READY after Unload
(or UNAVAILABLE after Load) until some later change flushed it, out of order. One click in a
few showed it on this machine, so twenty in a row catch it."""

from __future__ import annotations

from pathlib import Path

from tests.browser.browser_support import PATIENCE_S
from tests.browser.test_dashboard_browser import open_dashboard

#: Unload / Load pairs clicked
ROUNDS = 10
#: each action's table change shows within this (the engine acts in well under a second)
SHOWN_MS = 15_000


def test_every_action_of_many_in_a_row_shows_in_the_table(browser, dashboard, shots: Path) -> None:
    from playwright.sync_api import expect

    page = open_dashboard(browser, dashboard)
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    page.on("pageerror", lambda e: console.append(f"page error: {e}"))
    state = (page.locator(".tabulator-row")
             .filter(has=page.locator('.tabulator-cell[tabulator-field="model"]', has_text="add_sub"))
             .locator('.tabulator-cell[tabulator-field="state"]'))
    expect(state).to_have_text("READY", timeout=PATIENCE_S * 1000)
    expect(page.get_by_label("Model", exact=True).first).to_have_value("add_sub")
    shown: list[str] = []
    try:
        for _ in range(ROUNDS):
            for button, after, banner in (("Unload", "UNAVAILABLE", "'add_sub' unloaded"),
                                          ("Load", "READY", "'add_sub' loaded")):
                page.get_by_role("button", name=button, exact=True).first.click()
                page.get_by_text(banner, exact=True).wait_for(timeout=SHOWN_MS)
                expect(state).to_have_text(after, timeout=SHOWN_MS)
                shown.append(after)
    finally:
        page.screenshot(path=shots / f"after-{len(shown)}-actions.png", full_page=True)
    assert len(shown) == 2 * ROUNDS
    lost = [text for text in console if "Lost websocket" in text or "page error" in text]
    assert lost == []  # the session's websocket stayed up, the page applied every patch
    assert dashboard.state("add_sub") == "READY"
    page.close()
