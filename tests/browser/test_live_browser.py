"""The Live tab in a real browser, in both hosts: the Jupyter-hosted dashboard
(``{base_url}/workbench/``) and the inline notebook dashboard (a kernel's engine, in
JupyterLab). Idle first (the page says "no traffic", axes start at 0, the time plots share
one x-range, the histogram marks max_batch_size and the preferred sizes), then traffic
visible on the plot and in the status line, with the diagnosis line, the histogram's bars and
the time axis following the traffic, then idle again (latency left empty, the status says
since when). Screenshots of each step are kept (see conftest)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx

from tests.browser.browser_support import (
    ADD_SUB,
    BASE_URL,
    FIND_JS,
    PATIENCE_S,
    Dashboard,
    Subject,
    doc_image,
    doc_images_run,
    run_all_cells_until,
    subject,
    write_dashboard_notebook,
)

WAIT_MS = PATIENCE_S * 1000
TIME_FIGURES = ("live_throughput", "live_latency", "live_queue_compute", "live_pending")


def model_js(name: str) -> str:
    """A JS expression: the Bokeh model named ``name`` (or null)."""
    return f"({FIND_JS})({name!r})"


def check_idle_page(page, scope, key: str, shot: Path, model: Subject = ADD_SUB) -> None:
    """The idle state of ``key`` (a version of ``model``) as the page shows it, before any
    traffic."""
    scope.get_by_text(f"{key}: no traffic").first.wait_for(timeout=WAIT_MS)
    page.wait_for_function(f"() => {model_js('live_idle_throughput')}?.visible === true", timeout=WAIT_MS)
    axes = page.evaluate(f"""() => {{
      const figures = {list(TIME_FIGURES)!r}.map(n => ({FIND_JS})(n));
      return {{shared: new Set(figures.map(f => f.x_range.id)).size,
               ranges: figures.map(f => [f.y_range.start, f.y_range.end])}};
    }}""")
    # one time axis; y-axes drawn from 0 (not -1..1, not blank for an all-NaN latency)
    assert axes == {"shared": 1, "ranges": [[0, 1]] * 4}
    # the served config (add_sub: max_batch_size 8, preferred [8] by Triton's default) marked
    largest = model.max_batch_size
    page.wait_for_function(f"() => {model_js('live_batch_limits')}?.data.batch_size[0] === {largest}",
                           timeout=WAIT_MS)
    assert page.evaluate(f"() => Array.from({model_js('live_batch_preferred')}.data.batch_size)") == [largest]
    assert page.evaluate(f"() => {model_js('live_idle_batch_sizes')}.visible") is True
    scope.locator(".workbench-live-diagnosis").filter(
        has_text="Why p99 over the last 30 s: No traffic in the last 30 s").first.wait_for(timeout=WAIT_MS)
    page.screenshot(path=shot, full_page=True)


#: JS: the time axis spans from 2 s before the first interval with traffic to the latest one
#: (workbench.ui.live.live_plots.follow_window), read with the data in one go
AXIS_FOLLOWS_JS = f"""() => {{
  const data = {model_js('live_series')}.data, range = {model_js('live_time_range')};
  const times = Array.from(data.time), busy = Array.from(data.requests_per_s).map(r => r > 0);
  const first = times.find((t, i) => busy[i]);
  return first !== undefined && Math.abs(range.start - (first - 2000)) < 1
    && range.end >= times[times.length - 1];
}}"""


def check_traffic_shows(page, scope, model: Subject = ADD_SUB) -> None:
    """While traffic runs: the diagnosis line names a cause (not "no traffic"), the histogram
    has bars and says the mean batch against max_batch_size, the time axis follows the
    traffic (idle rows before it are off the axis), the version's overlay has its legend."""
    scope.locator(".workbench-live-diagnosis").filter(
        has_text=re.compile(r"Why p99 over the last 30 s: (?!No traffic)")).first.wait_for(timeout=WAIT_MS)
    page.wait_for_function(
        f"() => Array.from({model_js('live_batches')}.data.executions).reduce((a, b) => a + b, 0) > 0",
        timeout=WAIT_MS)
    page.wait_for_function(
        f"() => / mean [0-9.]+ of {model.max_batch_size}, [0-9]+ % at a preferred size/.test("
        f"{model_js('live_batch_sizes')}.title.text)", timeout=WAIT_MS)
    page.wait_for_function(AXIS_FOLLOWS_JS, timeout=WAIT_MS)
    legend = model_js("live_versions_throughput_legend")
    labels = page.evaluate(f"() => {legend}.items.filter(i => i.visible).map(i => i.label.value)")
    assert labels == list(model.versions)
    # every legend right of its plot, hiding a line on a click (they covered the lines' start)
    placed = page.evaluate(f"""() => ['live_throughput', 'live_latency', 'live_versions_latency'].map(name => {{
      const fig = ({FIND_JS})(name);
      return fig.right.some(r => r.type === 'Legend' && r.click_policy === 'hide')
        && !fig.center.some(r => r.type === 'Legend'); }})""")
    assert placed == [True, True, True], placed


def check_traffic_then_idle(page, scope, key: str, start, stop, shots: Path, prefix: str,
                            model: Subject = ADD_SUB) -> None:
    """Traffic (``start()``) shows on the plot and the status line; after ``stop()`` the page
    says since when the version is idle and plots no latency for idle intervals."""
    start()
    try:
        page.wait_for_function(
            f"() => Math.max(0, ...{model_js('live_series')}.data.inferences_per_s) > 0",
            timeout=WAIT_MS)
        status = re.compile(re.escape(key) + r" over the last [0-9.]+ s: .*infer/s")  # names its window
        scope.get_by_text(status).first.wait_for(timeout=WAIT_MS)
        page.wait_for_function(f"() => {model_js('live_idle_throughput')}.visible === false",
                               timeout=WAIT_MS)
        page.wait_for_function(f"() => {model_js('live_idle_batch_sizes')}.visible === false",
                               timeout=WAIT_MS)
        check_traffic_shows(page, scope, model)
        page.screenshot(path=shots / f"{prefix}-2-traffic.png", full_page=True)
        if prefix == "hosted":
            if doc_images_run():  # the docs' screenshot: ten intervals of traffic on the plots
                page.wait_for_function(
                    f"() => Array.from({model_js('live_series')}.data.requests_per_s).filter(r => r > 0)"
                    ".length >= 10", timeout=WAIT_MS)
            doc_image(page, "Live")
    finally:
        stop()
    scope.get_by_text(f"{key}: no traffic for").first.wait_for(timeout=WAIT_MS)
    assert "last request at" in scope.get_by_text(f"{key}: no traffic for").first.inner_text()
    last = page.evaluate(f"""() => {{
      const data = {model_js('live_series')}.data;
      return [data.p99_ms[data.p99_ms.length - 1], data.inferences_per_s[data.inferences_per_s.length - 1]];
    }}""")
    assert last[0] is None or last[0] != last[0]  # NaN: the line stops, no frozen last value
    assert last[1] == 0
    # the traffic's points are still plotted: no "no traffic" line beside them (there was)
    page.wait_for_function(f"() => {model_js('live_series')}.data.time.length > 0", timeout=WAIT_MS)
    assert page.evaluate(f"() => {model_js('live_idle_latency')}.visible") is False
    assert page.evaluate(f"() => {model_js('live_idle_throughput')}.visible") is False
    page.screenshot(path=shots / f"{prefix}-3-idle-again.png", full_page=True)


class Traffic:
    """Requests to ``model`` (add_sub) on the engine's v2 HTTP port from a thread, until
    stopped."""

    def __init__(self, http_port: int, model: Subject = ADD_SUB) -> None:
        self.http_port, self.model = http_port, model
        self.sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{self.http_port}", timeout=30) as client:
            while not self._stop.is_set():
                response = client.post(f"/v2/models/{self.model.name}/infer", json=self.model.body)
                assert response.status_code == 200, response.text
                self.sent += 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


def test_live_tab_traffic_then_idle_in_the_jupyter_hosted_dashboard(
        browser, dashboard: Dashboard, shots: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.goto(dashboard.page_url)
    page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    page.locator(".bk-tab", has_text="Live").click()
    model = subject()  # add_sub/1; digits_mlp/2 when the docs' screenshots are retaken
    page.get_by_label("Model version").select_option(model.key)
    check_idle_page(page, page, model.key, shots / "hosted-1-idle.png", model)
    # one client; four for the docs' screenshot, so that the batcher forms batches
    clients = [Traffic(dashboard.get("status")["ports"]["http"], model) for _ in range(4 if doc_images_run() else 1)]

    def start() -> None:
        for client in clients:
            client.start()

    def stop() -> None:
        for client in clients:
            client.stop()

    check_traffic_then_idle(page, page, model.key, start, stop, shots, "hosted", model)
    assert all(client.sent > 0 for client in clients)
    page.close()


#: the current notebook's kernel runs ``code`` (not a cell: nothing is added to the notebook)
EXECUTE_JS = """(code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  return kernel.requestExecute({code, store_history: false}).done.then(reply => reply.content.status);
}"""
TRAFFIC_CELL = """import asyncio
import numpy as np
from workbench import InferenceRequest, Tensor

traffic_on = asyncio.Event()


async def traffic():
    ones = np.ones((1, 16), np.float32)
    while True:
        await traffic_on.wait()
        await server.infer(InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", ones),
                                                        Tensor("INPUT1", "FP32", ones)]))
        await asyncio.sleep(0.005)


traffic_task = asyncio.ensure_future(traffic())"""


def test_live_tab_traffic_then_idle_in_the_inline_notebook_dashboard(
        browser, lab: Dashboard, models: Path, shots: Path) -> None:
    write_dashboard_notebook(Path(lab.jupyter.root_dir) / "live.ipynb", models, cells=(TRAFFIC_CELL,))
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"http://127.0.0.1:{lab.jupyter.jupyter_port}{BASE_URL}lab/tree/live.ipynb"
              f"?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    table = output.locator(".tabulator-cell", has_text="add_sub").first
    run_all_cells_until(page, table.is_visible, "the inline dashboard's Models table")
    output.locator(".bk-tab", has_text="Live").first.click()
    output.get_by_label("Model version").select_option("add_sub/1")
    check_idle_page(page, output, "add_sub/1", shots / "inline-1-idle.png")
    check_traffic_then_idle(
        page, output, "add_sub/1",
        lambda: assert_ok(page.evaluate(EXECUTE_JS, "traffic_on.set()")),
        lambda: assert_ok(page.evaluate(EXECUTE_JS, "traffic_on.clear()")), shots, "inline")
    assert_ok(page.evaluate(EXECUTE_JS, "traffic_task.cancel(); board.close(); await server.stop()"))
    page.close()
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():  # the kernel
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()


def assert_ok(status: str) -> None:
    assert status == "ok", status
