"""The dashboard's layout at a 1400 px wide window, in both hosts it lives in: the
Jupyter-hosted page (``{base_url}/workbench/``) and the inline notebook dashboard (a kernel's
engine, in JupyterLab), read as a person sees it: what is on top at a point of the page.

* the Models table: the ``reason`` column is on screen (the table ran past the window after
  the ``failures`` column), the p99 header names its 1 s window, and the button columns
  (no header) carry no sort arrows; every header's and cell's text is whole in its cell (a
  long reason aside: cut by design), and in
  the Jupyter-hosted page every column is inside the table's box, with a model named as long
  as the sample repository's longest (the memory column ran past the table);
* the Config editor: scrolled to its end, the last line of ``config.pbtxt`` is on screen in
  the editor's text area (in the inline host, digits_mlp's long comment lines give the editor
  a horizontal scrollbar, which lay over the last line: Ace measures a 0 px scrollbar under
  headless Chromium or overlay scrollbars and draws a 20 px bar; see
  ``workbench.ui.config.config_view.EDITOR_CSS``), and the line under it counts the file's
  lines and, for a file longer than the text area, says it continues (a new user took the
  lines in view for the whole file);
* every tab of the inline dashboard opens without a browser console warning (the Live tab's
  idle sweeps plot warned "could not set initial ranges").

Issue 35 (a new user's findings). Screenshots kept (see conftest).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.browser_support import (
    PATIENCE_S,
    Dashboard,
    eventually,
    run_all_cells_until,
    write_dashboard_notebook,
)
from workbench.testing.reload import write_add_sub
from workbench.ui.models.models_view import BUTTONS
from workbench.ui.shared.ace_theme import EDITOR_THEME_CLASS

WAIT_MS = PATIENCE_S * 1000
WIDTH, HEIGHT = 1400, 1000
#: the element on top at (x, y), looking through Panel's shadow roots; returns whether it is
#: inside an element matching the selector
TOPMOST_IN_JS = """([x, y, selector]) => {
  let el = document.elementFromPoint(x, y);
  while (el && el.shadowRoot) {
    const inner = el.shadowRoot.elementFromPoint(x, y);
    if (!inner || inner === el) break;
    el = inner;
  }
  return !!el?.closest(selector);
}"""
#: every column of the table whose header title or a cell's text is cut (wider than the box
#: it is drawn in), or whose header or cells reach past the table's box: [field, what, sizes]
CLIPPED_JS = """table => {
  const bad = [], outer = table.getBoundingClientRect();
  const cut = el => el && el.scrollWidth > el.clientWidth + 1;
  const past = el => { const b = el.getBoundingClientRect();
                       return b.width > 0 && (b.left < outer.left - 1 || b.right > outer.right + 1); };
  for (const col of table.querySelectorAll('.tabulator-col[tabulator-field]')) {
    if (col.offsetParent === null) continue;  // a hidden column
    const field = col.getAttribute('tabulator-field'), title = col.querySelector('.tabulator-col-title');
    if (cut(title)) bad.push([field, 'header', title.innerText, title.scrollWidth, title.clientWidth]);
    if (past(col)) bad.push([field, 'header past the table']);
  }
  for (const cell of table.querySelectorAll('.tabulator-row .tabulator-cell[tabulator-field]')) {
    if (cell.offsetParent === null) continue;
    const field = cell.getAttribute('tabulator-field');
    // the text's own box: a template's span, else the cell
    const inner = cell.firstElementChild || cell;
    if (cut(cell) || inner.getBoundingClientRect().right > cell.getBoundingClientRect().right + 1)
      bad.push([field, 'cell', cell.innerText, cell.scrollWidth, cell.clientWidth]);
    if (past(cell)) bad.push([field, 'cell past the table']);
  }
  return bad;
}"""
#: the table's width and each column's, for a failure's message
WIDTHS_JS = """t => [Math.round(t.getBoundingClientRect().width),
  ...[...t.querySelectorAll('.tabulator-col[tabulator-field]')].filter(c => c.offsetParent !== null)
     .map(c => `${c.getAttribute('tabulator-field')}: ${Math.round(c.getBoundingClientRect().width)}`)]"""
#: the last line of the editor's text, after Ctrl+End scrolled to it: its row, the row count
#: and its box on the page (Ace's own geometry: the row Ace draws the line at)
LAST_LINE_JS = """e => {
  const editor = e.env.editor, renderer = editor.renderer, row = editor.session.getLength() - 1;
  const at = renderer.textToScreenCoordinates(row, 0);
  return {row, rows: editor.session.getLength(), x: at.pageX, y: at.pageY,
          height: renderer.lineHeight, text: editor.session.getLine(row)};
}"""

#: the editor's lines, Ace's rows (a final newline's empty row too) and the rows fully in view
ROWS_JS = """e => {
  const editor = e.env.editor, renderer = editor.renderer, text = editor.getValue();
  return {lines: text.split('\\n').length - (text.endsWith('\\n') ? 1 : 0),
          rows: editor.session.getLength(),
          in_view: Math.floor(renderer.$size.scrollerHeight / renderer.lineHeight)};
}"""

#: Ace's horizontal scrollbar's box on the page, or null when Ace hides it (no wide line)
SIDEWAYS_BAR_JS = """e => {
  const bar = e.querySelector('.ace_scrollbar-h');
  if (!bar || bar.style.display === 'none') return null;
  const box = bar.getBoundingClientRect();
  return {x: box.x, y: box.y, width: box.width, height: box.height};
}"""


# ----------------------------------------------------------------- the checks, in any host
def models_table_fits(page, scope, shot: Path, within_box: bool = True) -> None:
    """The reason column's header and cells are on top on the page, inside the window; every
    header's and cell's text is whole in its cell and (``within_box``) every column inside
    the table's box; the button columns cannot be sorted and show no sort arrow."""
    scope.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    header = scope.locator('.tabulator-col[tabulator-field="reason"]').first
    header.scroll_into_view_if_needed()
    page.screenshot(path=shot, full_page=True)

    def on_top():
        box = header.bounding_box()
        if box is None or box["width"] == 0:
            return None
        centre = [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2]
        return box if page.evaluate(TOPMOST_IN_JS, [*centre, '.tabulator-col[tabulator-field="reason"]']) else None

    box = eventually(on_top, "the reason column's header on top on the page")
    assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, box
    assert box["width"] >= 150, box
    assert page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth"), \
        "the page scrolls sideways"
    # every column's header and cell text whole inside its cell and the table's box (the
    # memory column's "CPU ≈ 1.2 MB" ended in "…" in the Jupyter-hosted page); a reason longer
    # than its column is cut by design (the row's reason line and the tooltip hold it whole)
    table = scope.locator(".tabulator").first
    memory = table.locator('.tabulator-row .tabulator-cell[tabulator-field="memory"]').first
    eventually(lambda: memory.inner_text().strip(), "a memory figure in the table")
    clipped = None
    for _ in range(8):  # the beat re-renders the rows: a read between two renders may miss some
        clipped = [c for c in table.evaluate(CLIPPED_JS) if c[:2] != ["reason", "cell"]
                   and (within_box or "past the table" not in c[1])]
        if not clipped:
            break
        time.sleep(0.5)
    if clipped:
        widths = table.evaluate(WIDTHS_JS)
        pytest.fail(f"cut or outside the table: {clipped}; the table and its columns (px): {widths}")
    for field in BUTTONS:
        column = scope.locator(f'.tabulator-col[tabulator-field="{field}"]').first
        assert "tabulator-sortable" not in (column.get_attribute("class") or ""), field
        assert column.locator(".tabulator-col-sorter .tabulator-arrow").count() == 0, field
    # the p99 column names its window as the Live tab does ("1 s"; it read "p99 (ms)")
    p99 = scope.locator('.tabulator-col[tabulator-field="p99_ms"] .tabulator-col-title').first
    assert " ".join(p99.inner_text().replace("\u00a0", " ").split()) == "p99 1 s (ms)"


def editor_shows_its_last_line(page, scope, model: str, shot: Path) -> None:
    """``model``'s config open in the Config tab: a click in the editor and Ctrl+End (as a
    person goes to the end) leave the last line on top on the page, in the window."""
    scope.locator(".bk-tab", has_text="Config").first.click()
    scope.get_by_role("button", name="Apply (write + reload)").wait_for(timeout=WAIT_MS)
    scope.get_by_label("Model", exact=True).filter(visible=True).first.select_option(model)
    editor = scope.locator(".ace_editor").filter(visible=True).first
    eventually(lambda: f'name: "{model}"' in editor.evaluate("e => e.env.editor.getValue()"),
               f"{model}'s config in the editor")
    # under the editor, the line count, and (a file longer than the text area) that it goes on
    from playwright.sync_api import expect

    view = editor.evaluate(ROWS_JS)
    note = scope.locator(".workbench-config-lines").filter(visible=True).first
    expect(note).to_contain_text(f"{view['lines']} lines", timeout=WAIT_MS)  # its shadow root's text
    text = note.evaluate("e => (e.shadowRoot || e).textContent")
    continues = "scroll the editor for the rest" in text
    assert continues == (view["rows"] > view["in_view"]), (text, view)
    if continues:
        assert f"{view['in_view']} in view" in text, (text, view)
    editor.locator(".ace_line").first.click(force=True)
    page.keyboard.press("Control+End")

    def last_line_on_top():
        line = editor.evaluate(LAST_LINE_JS)
        point = [line["x"] + 4, line["y"] + line["height"] * 0.75]  # its text's lower part
        if not 0 <= point[1] <= HEIGHT:
            page.mouse.wheel(0, 200)  # the page's own scroll, as a person scrolls down
            return None
        # the text area itself, not the gutter, a scrollbar over it or what lies below the box
        return line if page.evaluate(TOPMOST_IN_JS, [*point, ".ace_scroller"]) else None

    line = eventually(last_line_on_top, f"the last line of {model}'s config on screen")
    page.screenshot(path=shot, full_page=True)
    assert line["rows"] > 1, line
    bar = editor.evaluate(SIDEWAYS_BAR_JS)
    if bar is not None:  # a line wider than the editor: its bar lies under the last line, on top
        assert bar["y"] >= line["y"] + line["height"], (bar, line)
        centre = [bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2]
        assert page.evaluate(TOPMOST_IN_JS, [*centre, ".ace_scrollbar-h"]), bar


@pytest.fixture(scope="module")
def models(models: Path, sample_repository: Path) -> Path:
    """The browser tier's repository, a model with a name as long as the sample repository's
    longest (digits_jpeg_preprocess: the model column widened to fit it and pushed the memory
    column past the table at 1400 px) and the sample's sequence-batched accumulator (first by
    name: the dashboard opened on it)."""
    write_add_sub(models, "add_sub_with_a_long_name")
    shutil.copytree(sample_repository / "accumulator", models / "accumulator")
    return models


def opens_on_a_plain_model(scope) -> None:
    """The Models tab's model (every tab's, one selection) is add_sub: the first READY model
    that serves plain requests, not the sequence-batched accumulator first by name."""
    from playwright.sync_api import expect

    scope.locator('.tabulator-cell[tabulator-field="model"]', has_text="accumulator").first.wait_for(
        timeout=WAIT_MS)
    select = scope.get_by_label("Model", exact=True).filter(visible=True).first
    expect(select).to_have_value("add_sub", timeout=WAIT_MS)


# ----------------------------------------------------------------- the Jupyter-hosted page
@pytest.fixture
def hosted(browser, dashboard: Dashboard) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(dashboard.page_url)
    yield page
    page.close()


def test_models_table_fits_1400_px_in_the_jupyter_dashboard(hosted, shots: Path) -> None:
    models_table_fits(hosted, hosted, shots / "hosted-models.png")
    # the whole table in the window: its last column (memory) ended past it
    last = hosted.locator('.tabulator-col[tabulator-field="memory"]').first.bounding_box()
    assert last is not None and last["x"] + last["width"] <= WIDTH, last


def test_the_jupyter_dashboard_opens_on_a_model_that_serves_plain_requests(hosted) -> None:
    opens_on_a_plain_model(hosted)


@pytest.mark.parametrize("model", ["add_sub", "digits_mlp"])
def test_config_editor_shows_the_last_line_in_the_jupyter_dashboard(hosted, model: str, shots: Path) -> None:
    hosted.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    editor_shows_its_last_line(hosted, hosted, model, shots / f"hosted-config-{model}.png")


# ----------------------------------------------------------------- the inline notebook dashboard
@pytest.fixture(scope="module")
def inline(browser, lab: Dashboard, models: Path) -> Iterator[tuple[Any, Any]]:
    """The notebook's page and its inline dashboard's output (the kernel shut after)."""
    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "layout.ipynb", models,
                             "model_control_mode='explicit', load_model=['*']")
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(f"{lab.root}lab/tree/layout.ipynb?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    table = output.locator(".tabulator-cell", has_text="digits_mlp").first
    run_all_cells_until(page, table.is_visible, "the inline dashboard's Models table")
    yield page, output
    page.close()
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()


def test_the_inline_dashboard_opens_on_a_model_that_serves_plain_requests(inline) -> None:
    _page, output = inline  # before any test chose a model in it
    opens_on_a_plain_model(output)


def test_models_table_fits_1400_px_in_the_inline_dashboard(inline, shots: Path) -> None:
    page, output = inline
    output.locator(".bk-tab", has_text="Models").first.click()
    # a notebook's output is narrower (948 px here, beside Lab's side bar): the table scrolls
    # sideways in its box, its model, version and button columns frozen; text is still whole
    models_table_fits(page, output, shots / "inline-models.png", within_box=False)


@pytest.mark.parametrize("model", ["add_sub", "digits_mlp"])
def test_config_editor_shows_the_last_line_in_the_inline_dashboard(inline, model: str, shots: Path) -> None:
    page, output = inline
    editor_shows_its_last_line(page, output, model, shots / f"inline-config-{model}.png")


def test_every_inline_tab_opens_without_a_console_warning(inline) -> None:
    """Every tab of the inline dashboard opened in turn: no browser console warning or error
    (the idle sweeps plot of the Live tab warned "could not set initial ranges"; Ace, its
    scripts inlined, said "Unable to infer path to ace from script src" and asked the
    notebook's server for ``theme-github_light_default.js``: the editor had no theme)."""
    page, output = inline
    messages: list[str] = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}") if m.type in ("warning", "error") else None)
    page.on("pageerror", lambda e: messages.append(f"uncaught: {e}"))
    for title in ("Models", "Config", "Live", "Rollout", "Tuning", "Headless"):
        output.locator(".bk-tab", has_text=title).first.click()
        page.wait_for_timeout(2000)  # a beat or two of the tab's updates (nothing to wait for)
        if title == "Config":  # the editor shows its theme
            output.locator(f".ace_editor.{EDITOR_THEME_CLASS}").first.wait_for(timeout=10_000)
    assert messages == []
