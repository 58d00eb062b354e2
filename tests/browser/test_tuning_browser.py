"""The Tuning tab in a real browser, on the Jupyter-hosted dashboard: a 3-level sweep of
digits_mlp comparing two candidate settings draws both curves and fills the table, Apply
best writes the winner into config.pbtxt, and the Config tab shows the new file. Screenshots
of each step are kept (see conftest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from browser_support import PATIENCE_S, eventually
from test_dashboard_browser import open_dashboard, tab

from workbench.ui.tuning_plot import SERIES_NAME

WAIT_MS = PATIENCE_S * 1000
CANDIDATES = ("max_queue_delay_us=100", "max_queue_delay_us=700")


def visible(page, label: str):
    """The visible widget labelled ``label`` (hidden tabs hold widgets of the same name)."""
    return page.get_by_label(label, exact=True).locator("visible=true")


def points(page, setting: str) -> int:
    """How many steps of ``setting`` the plot in the browser holds."""
    name = json.dumps(SERIES_NAME + setting)
    return page.evaluate(f"() => {{ const s = Bokeh.documents[0].get_model_by_name({name});"
                         " return s === null ? 0 : s.data.throughput.length; }")


def test_a_sweep_of_two_candidates_plots_both_and_apply_best_writes_the_winner(
        browser, dashboard, models: Path, shots: Path) -> None:
    page = open_dashboard(browser, dashboard)
    tab(page, "Tuning")
    model = visible(page, "Model")
    model.wait_for(timeout=WAIT_MS)
    eventually(lambda: "digits_mlp" in model.locator("option").all_inner_texts(), "digits_mlp offered")
    model.select_option("digits_mlp")
    page.get_by_text("digits_mlp is served now with").wait_for(timeout=WAIT_MS)
    for label, value in (("Levels (start:end:step or a list)", "1, 2, 4"), ("Warm-up (ms)", "100"),
                         ("Window (ms)", "400")):
        field = visible(page, label)
        field.fill(value)
        field.press("Enter")
    # Panel's checkbox: the input beside its label, in the widget's shadow root
    served = page.get_by_text("sweep the served config", exact=True)
    served.evaluate("e => e.getRootNode().querySelector('input[type=checkbox]').click()")
    assert served.evaluate("e => e.getRootNode().querySelector('input[type=checkbox]').checked") is False
    candidates = page.get_by_label(re.compile("^Candidate settings to compare")).locator("visible=true")
    candidates.fill("\n".join(CANDIDATES))
    candidates.press("Tab")  # Panel takes a text area's value when it loses focus
    page.screenshot(path=shots / "1-tuning-form.png", full_page=True)

    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("done: 6 steps measured in 2 setting(s)").wait_for(timeout=WAIT_MS)
    for setting in CANDIDATES:  # both curves in the browser's document, every step in the table
        assert eventually(lambda s=setting: points(page, s) == 3, f"3 points of {setting}")
        assert page.locator(".tabulator-cell", has_text=setting).count() == 3
    assert page.get_by_text("Best tested setting:").count() == 1
    page.screenshot(path=shots / "2-tuning-swept.png", full_page=True)
    best = page.get_by_text(re.compile(r"^Best tested setting: ")).inner_text()
    delay = int(best.rsplit("=", 1)[1])
    assert f"max_queue_delay_us={delay}" in CANDIDATES

    apply = page.get_by_role("button", name="Apply best to config.pbtxt")
    assert apply.is_enabled()
    apply.click()
    page.get_by_text(re.compile(r"^wrote max_queue_delay_us=\d+ into .*; reloaded$")).wait_for(timeout=WAIT_MS)
    config = models / "digits_mlp" / "config.pbtxt"
    assert f"max_queue_delay_microseconds: {delay}" in config.read_text()  # on disk
    assert (models / "digits_mlp" / "config.pbtxt.bak").exists()
    page.screenshot(path=shots / "3-tuning-applied.png", full_page=True)

    tab(page, "Config")
    visible(page, "Model").select_option("digits_mlp")
    page.get_by_text(f"max queue delay {delay} µs").wait_for(timeout=WAIT_MS)  # served now
    editor = page.locator(".ace_editor").locator("visible=true")
    eventually(lambda: f"max_queue_delay_microseconds: {delay}" in editor.evaluate("e => e.env.editor.getValue()"),
               "the Config tab's editor shows the written file")
    page.screenshot(path=shots / "4-config-after-apply.png", full_page=True)
    page.close()
