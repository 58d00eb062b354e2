"""No CDN, in Chromium: every script and stylesheet of the dashboard comes from the Jupyter
server, in every tab, in the Jupyter-hosted dashboard (``{base_url}/workbench/``) and in the
inline notebook dashboard (a kernel's, in JupyterLab). The browser's requests are watched
(``page.on("request")``) while every tab is opened, and every stylesheet model in the page's
Bokeh documents (those of tabs not rendered yet too) is checked (issue 16, a new user's
finding: the Tuning and Headless tabs fetched Panel's ``loading.css`` and ``markdown.css``
from ``cdn.holoviz.org``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.browser.browser_support import BASE_URL, PATIENCE_S, run_all_cells_until, write_dashboard_notebook
from tests.browser.test_dashboard_browser import open_dashboard
from tests.browser.test_lab_launcher_browser import lab  # noqa: F401 - the lab fixture

WAIT_MS = PATIENCE_S * 1000
#: every tab, and a text each one shows once rendered
TABS = {"Models": "Refresh", "Config": "Apply (write + reload)", "Live": "Model version",
        "Tuning": "Run", "Headless": "Start workbench serve"}
#: the URLs of the stylesheet models (Bokeh's ImportedStyleSheet) in the page's documents
#: (absolute, as the browser would fetch them)
STYLESHEETS_JS = """() => {
  const urls = [];
  for (const doc of Bokeh.documents)
    for (const model of doc._all_models.values())
      if (model.type === 'ImportedStyleSheet')
        urls.push(new URL(model.url, document.baseURI).href);
  return urls;
}"""


def _elsewhere(url: str, here: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != here


def _watch(page, here: str) -> list[str]:
    elsewhere: list[str] = []
    page.on("request", lambda r: elsewhere.append(r.url) if _elsewhere(r.url, here) else None)
    return elsewhere


def _click_every_tab(page, scope, shots: Path, prefix: str) -> None:
    for title, shown in TABS.items():
        scope.locator(".bk-tab", has_text=title).first.click()
        scope.get_by_text(shown, exact=True).locator("visible=true").first.wait_for(timeout=WAIT_MS)
        page.screenshot(path=shots / f"{prefix}-{title.lower()}.png", full_page=True)


def test_the_hosted_dashboard_fetches_nothing_from_another_server(browser, dashboard, shots: Path) -> None:
    here = urlsplit(dashboard.root).netloc
    elsewhere: list[str] = []
    page = open_dashboard(browser, dashboard, elsewhere)
    _click_every_tab(page, page, shots, "hosted")
    stylesheets = page.evaluate(STYLESHEETS_JS)
    page.close()
    assert stylesheets, "no stylesheet model found in the page's Bokeh document"
    assert elsewhere == []
    assert [url for url in stylesheets if _elsewhere(url, here)] == []


def test_the_inline_dashboard_fetches_nothing_from_another_server(
        browser, lab, models: Path, shots: Path) -> None:  # noqa: F811 - the lab fixture
    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "resources_inline.ipynb", models)
    here = f"127.0.0.1:{lab.jupyter.jupyter_port}"
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    elsewhere = _watch(page, here)
    page.goto(f"http://{here}{BASE_URL}lab/tree/resources_inline.ipynb?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    run_all_cells_until(page, lambda: output.locator(".tabulator-cell", has_text="add_sub").first.is_visible(),
                        "the dashboard's Models table in the notebook's output")
    _click_every_tab(page, output, shots, "inline")
    stylesheets = page.evaluate(STYLESHEETS_JS)
    page.close()
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():  # the kernel and its engine
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()
    assert elsewhere == []
    assert [url for url in stylesheets if _elsewhere(url, here)] == []
