"""The Tuning tab in a real browser, in both hosts: the Jupyter-hosted dashboard
(``{base_url}/workbench/``) and the inline notebook dashboard (a kernel's engine, in
JupyterLab). A 3-level sweep of digits_mlp comparing two candidate settings draws both
curves (in the page's Bokeh document) and fills the table; the plot's axes start at 0 and
end above the largest value plotted, the legend lies outside the plot area, every column of
the table is shown whole inside the table's box at a 1400 px wide window; Apply best writes
the winner into config.pbtxt (with ``.bak``) and the Config tab opens on the tuned model with
the new file. Each host works on its own temporary copy of digits_mlp. Screenshots of each
step are kept (see conftest). In both hosts the Config tab is clicked in the page after
Apply best; every field of the form lies inside its container (the notebook cell's output
area, inline) and each legend entry of the marks shows its icon, before and after a run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx

from tests.browser.browser_support import FIND_JS, PATIENCE_S, eventually, run_all_cells_until, write_dashboard_notebook
from tests.browser.test_dashboard_browser import open_dashboard
from tests.browser.test_live_browser import EXECUTE_JS, assert_ok, lab  # noqa: F401 - the lab fixture
from workbench.ui.tuning_plot import FIGURE_NAME, LEGEND_NAME, SERIES_NAME

WAIT_MS = PATIENCE_S * 1000
CANDIDATES = ("max_queue_delay_us=100", "max_queue_delay_us=700")
#: what the page's plot shows: its axes, the largest values plotted, where the legend is
PLOT_JS = f"""(names) => {{
  const find = {FIND_JS};
  const figure = find({FIGURE_NAME!r}), legend = find({LEGEND_NAME!r});
  const sources = names.map(n => find({SERIES_NAME!r} + n)).filter(s => s !== null);
  const top = column => Math.max(0, ...sources.flatMap(s => Array.from(s.data[column])));
  return {{points: sources.map(s => s.data.throughput.length),
           y: [figure.y_range.start, figure.y_range.end], p99: top("p99_ms"),
           x: [figure.x_range.start, figure.x_range.end], throughput: top("throughput"),
           legend_right: figure.right.includes(legend), legend_center: figure.center.includes(legend),
           labels: legend.items.map(i => i.label.value)}};
}}"""
#: each shown header and cell of a table: inside the table's box, its text not cut off
TABLE_JS = """(table) => {
  const box = table.getBoundingClientRect();
  const inside = r => r.left >= box.left - 1 && r.right <= box.right + 1;
  const shown = [...table.querySelectorAll('.tabulator-col, .tabulator-cell')]
    .filter(e => e.offsetParent !== null && e.getBoundingClientRect().width > 0);
  return shown.map(e => {
    const text = e.querySelector('.tabulator-col-title') ?? e;
    return {header: e.classList.contains('tabulator-col'), text: text.innerText,
            inside: inside(e.getBoundingClientRect()),
            whole: (text.scrollWidth <= text.clientWidth && text.scrollHeight <= text.clientHeight + 1)
                   || text.innerText.trim() === ''};
  });
}"""


#: each legend entry's label and whether BokehJS draws its icon (it draws none for an entry
#: whose renderers hold no data: a run without a knee, the plot before a run)
LEGEND_JS = f"""() => {{
  const find = {FIND_JS};
  return find({LEGEND_NAME!r}).items.map(i => [i.label.value,
    i.renderers.some(r => r.visible && r.data_source.get_length() > 0)]);
}}"""
#: the box of a field and of its container (the notebook cell's output area, or the window)
BOX_JS = """(e) => {
  let node = e, area = null;
  while (node && !area) {  // up through the widgets' shadow roots
    if (node.matches?.('.jp-OutputArea-output')) area = node;
    node = node.parentElement ?? node.getRootNode().host;
  }
  const r = e.getBoundingClientRect();
  const c = area ? area.getBoundingClientRect()
                 : {left: 0, right: document.documentElement.clientWidth};
  return {field: [r.left, r.right], container: [c.left, c.right]};
}"""
#: the form's fields, each of which must lie whole inside its container
FIELDS = ("Model", "Levels (start:end:step or a list)", "Batch size", "Window (ms)", "Warm-up (ms)",
          "JSON file (--input-data format)", "p99 target (ms, 0 = none)")


def visible(scope, label: str):
    """The visible widget labelled ``label`` (hidden tabs hold widgets of the same name)."""
    return scope.get_by_label(label, exact=True).locator("visible=true")


def open_tab(scope, title: str) -> None:
    scope.locator(".bk-tab", has_text=title).first.click()


def temporary_copy(sample_repository: Path, folder: Path) -> Path:
    """A writable repository holding a copy of digits_mlp (Apply best writes into it)."""
    repo = folder / "models"
    shutil.copytree(sample_repository / "digits_mlp", repo / "digits_mlp")
    return repo


def sweep_and_apply(page, scope, models: Path, shots: Path, prefix: str) -> int:
    """The click-through of one host (``scope``: the page or the notebook's output area), up
    to Apply best; returns the delay written."""
    from playwright.sync_api import expect

    open_tab(scope, "Tuning")
    model = visible(scope, "Model")
    model.wait_for(timeout=WAIT_MS)
    eventually(lambda: "digits_mlp" in model.locator("option").all_inner_texts(), "digits_mlp offered")
    model.select_option("digits_mlp")
    scope.get_by_text("digits_mlp is served now with").wait_for(timeout=WAIT_MS)
    for label in FIELDS:  # none cut off at the container's right edge (the Warm-up field was)
        box = visible(scope, label).evaluate(BOX_JS)
        assert box["container"][0] - 1 <= box["field"][0] < box["field"][1] <= box["container"][1] + 1, \
            (label, box)
    # the legend's entries of the marks show their icons before any run
    assert dict(page.evaluate(LEGEND_JS)) == {"knee": True, "best under target": True}
    for label, value in (("Levels (start:end:step or a list)", "1, 2, 4"), ("Warm-up (ms)", "100"),
                         ("Window (ms)", "400")):
        field = visible(scope, label)
        field.fill(value)
        field.press("Enter")
    # Panel's checkbox: the input beside its label, in the widget's shadow root
    served = scope.get_by_text("sweep the served config", exact=True)
    served.evaluate("e => e.getRootNode().querySelector('input[type=checkbox]').click()")
    assert served.evaluate("e => e.getRootNode().querySelector('input[type=checkbox]').checked") is False
    candidates = scope.get_by_label(re.compile("^Candidate settings to compare")).locator("visible=true")
    candidates.fill("\n".join(CANDIDATES))
    candidates.press("Tab")  # Panel takes a text area's value when it loses focus
    page.screenshot(path=shots / f"{prefix}-1-tuning-form.png", full_page=True)

    scope.get_by_role("button", name="Run", exact=True).click()
    scope.get_by_text("done: 6 steps measured in 2 setting(s)").wait_for(timeout=WAIT_MS)
    # both curves in the browser's document, the axes fitted to them, the legend beside the plot
    plot = eventually(lambda: (lambda p: p if p["points"] == [3, 3] and p["y"][1] >= p["p99"] > 0
                               else None)(page.evaluate(PLOT_JS, list(CANDIDATES))),
                      "3 points of each setting, inside the y-range")
    assert plot["y"][0] == 0 and plot["p99"] < plot["y"][1] <= plot["p99"] * 1.5, plot
    assert plot["x"][0] == 0 and plot["throughput"] < plot["x"][1] <= plot["throughput"] * 1.5, plot
    assert plot["legend_right"] and not plot["legend_center"], plot
    assert plot["labels"][-2:] == list(CANDIDATES)
    legend = page.evaluate(LEGEND_JS)  # every entry with its icon, with or without a knee
    assert [label for label, _ in legend] == ["knee", "best under target", *CANDIDATES], legend
    assert all(icon for _, icon in legend), legend
    table = scope.locator(".tabulator", has=page.locator(".tabulator-cell", has_text=CANDIDATES[0]))
    for setting in CANDIDATES:  # every step in the table
        expect(table.locator(".tabulator-cell", has_text=setting)).to_have_count(3)
    page.screenshot(path=shots / f"{prefix}-2-tuning-swept.png", full_page=True)
    shown = table.evaluate(TABLE_JS)
    headers = [s["text"] for s in shown if s["header"]]
    assert {"setting", "in flight", "infer/s", "p99", "queue"} <= set(headers), headers
    cut = [s for s in shown if not (s["inside"] and s["whole"])]
    assert cut == [], f"cut off or outside the table's box: {cut}"
    assert scope.get_by_text("Best tested setting:").count() == 1
    best = scope.get_by_text(re.compile(r"^Best tested setting: ")).inner_text()
    delay = int(best.rsplit("=", 1)[1])
    assert f"max_queue_delay_us={delay}" in CANDIDATES

    apply = scope.get_by_role("button", name="Apply best to config.pbtxt")
    assert apply.is_enabled()
    apply.click()
    scope.get_by_text(re.compile(r"^wrote max_queue_delay_us=\d+ into .*; reloaded$")).wait_for(timeout=WAIT_MS)
    config = models / "digits_mlp" / "config.pbtxt"
    assert f"max_queue_delay_microseconds: {delay}" in config.read_text()  # on disk
    assert (models / "digits_mlp" / "config.pbtxt.bak").exists()
    page.screenshot(path=shots / f"{prefix}-3-tuning-applied.png", full_page=True)
    return delay


def config_tab_shows(page, scope, delay: int, shot: Path) -> None:
    """The Config tab, opened after Apply best, is on the tuned model with the new file."""
    from playwright.sync_api import expect

    # the Config tab opens on the tuned model (nothing chosen there), with the new file
    open_tab(scope, "Config")
    expect(visible(scope, "Model")).to_have_value("digits_mlp", timeout=WAIT_MS)
    scope.get_by_text(f"max queue delay {delay} µs").wait_for(timeout=WAIT_MS)  # served now
    editor = scope.locator(".ace_editor").locator("visible=true")
    eventually(lambda: f"max_queue_delay_microseconds: {delay}" in editor.evaluate("e => e.env.editor.getValue()"),
               "the Config tab's editor shows the written file")
    page.screenshot(path=shot, full_page=True)


def test_a_sweep_of_two_candidates_plots_both_and_apply_best_writes_the_winner(
        browser, dashboard, models: Path, shots: Path) -> None:
    page = open_dashboard(browser, dashboard)
    delay = sweep_and_apply(page, page, models, shots, "hosted")
    config_tab_shows(page, page, delay, shots / "hosted-4-config-after-apply.png")
    page.close()


def test_a_sweep_and_apply_best_in_the_inline_notebook_dashboard(
        browser, lab, sample_repository: Path, tmp_path: Path, shots: Path) -> None:  # noqa: F811
    models = temporary_copy(sample_repository, tmp_path)
    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "tuning.ipynb", models,
                             "model_control_mode='explicit', load_model=['*']")
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors: list[str] = []
    # errors, and the kernel's tracebacks Panel logs as warnings (a browser message it failed on)
    page.on("console", lambda m: errors.append(m.text)
            if m.type == "error" or m.text.startswith("Python failed") else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(f"{lab.root}lab/tree/tuning.ipynb?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    run_all_cells_until(page, output.locator(".bk-tab", has_text="Tuning").first.is_visible,
                        "the inline dashboard's tabs")
    try:
        delay = sweep_and_apply(page, output, models, shots, "inline")
        # clicked in the page after the sweep and Apply best, the Config tab shows the tuned
        # model's new file (it stayed blank: the kernel handled the click on a subshell's
        # thread while the sweep's pushes ran on its main loop, and lost it)
        config_tab_shows(page, output, delay, shots / "inline-4-config-after-apply.png")
        assert page.evaluate(EXECUTE_JS, "assert board.tabs.active == 1") == "ok"  # the kernel got it
        failed = [e for e in errors if e.startswith("Python failed")]
        assert failed == [], failed  # e.g. Tabulator's ValueError on an echo of its own data
    finally:
        page.screenshot(path=shots / "inline-last.png")
        print("browser console errors:", errors)
        assert_ok(page.evaluate(EXECUTE_JS, "board.close(); await server.stop()"))
        page.close()
        with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
            for session in jupyter.get("api/sessions").json():  # the kernel
                jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()
