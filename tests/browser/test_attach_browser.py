"""The dashboard attached to a headless ``workbench serve`` in a real browser, in both hosts:
the Jupyter-hosted dashboard (``{base_url}/workbench/``, whose own engine serves an ONNX
add_sub) and the inline notebook dashboard opened with ``dashboard(url=...)``. As a person
would: type the server's URL and the restricted API's key (a password field; never in the
notebook), click Attach, see the server's models (its add_sub is a python model), see Live
move under a little traffic, open Config (the served config, applied as a load override),
and read why Headless is not available."""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.browser_support import (
    BASE_URL,
    DIGITS_MLP,
    DOC_SAMPLE_MODELS,
    FIND_JS,
    PATIENCE_S,
    Dashboard,
    Subject,
    doc_image,
    doc_images_run,
    run_all_cells_until,
)
from workbench.testing.attach import (
    ADMIN_HEADER,
    KINDS,
    server_flags,
    start_server,
    triton_missing,
    write_python_add_sub,
)
from workbench.testing.process import ServerProcess, TritonProcess

WAIT_MS = PATIENCE_S * 1000
KEY_TEXT = "; ".join(f"{name}: {value}" for name, value in ADMIN_HEADER.items())


@pytest.fixture(scope="module", params=KINDS)
def headless(request, tmp_path_factory: pytest.TempPathFactory,
             sample_repository: Path) -> Iterator[ServerProcess | TritonProcess]:
    """``workbench serve`` (or the real tritonserver, where its venv is made) with the python
    add_sub, its repository API behind the key; when the docs' screenshots are retaken,
    ``workbench serve`` serves copies of sample models instead (digits_mlp and the python
    digits_router, see :func:`attached_subject`)."""
    missing = triton_missing() if request.param == "triton" else None
    if missing:
        pytest.skip(missing)
    repo = tmp_path_factory.mktemp("attach-browser") / "models"
    if doc_images_run() and request.param != "triton":
        for name in DOC_SAMPLE_MODELS:
            shutil.copytree(sample_repository / name, repo / name)
        flags = [f for f in server_flags(repo) if f != "--load-model=add_sub"]
        process = start_server(request.param, flags + [f"--load-model={name}" for name in DOC_SAMPLE_MODELS])
    else:
        process = start_server(request.param, server_flags(write_python_add_sub(repo)))
    yield process
    process.stop()


#: the python add_sub of workbench.testing.attach (INPUT0, INPUT1: FP32 [4])
PYTHON_ADD_SUB = Subject("add_sub", "1", 8, 4, {"inputs": [
    {"name": n, "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4} for n in ("INPUT0", "INPUT1")]}, ("v1",))


def attached_subject(headless: ServerProcess | TritonProcess) -> Subject:
    """The model the attached server sends traffic to: its python add_sub, or the sample
    digits_mlp when ``workbench serve`` serves the sample models (the docs' screenshot)."""
    return DIGITS_MLP if doc_images_run() and isinstance(headless, ServerProcess) else PYTHON_ADD_SUB


class Traffic:
    """Requests to ``url`` (``model``: the python add_sub) from a thread while the test looks."""

    def __init__(self, url: str, model: Subject = PYTHON_ADD_SUB) -> None:
        self.url, self.sent, self.model = url, 0, model
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self._stop.is_set():
                response = client.post(f"/v2/models/{self.model.name}/infer", json=self.model.body)
                assert response.status_code == 200, response.text
                self.sent += 1

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def attach_and_check(page, scope, headless: ServerProcess | TritonProcess, shots: Path, prefix: str) -> None:
    """Attach ``scope``'s dashboard to ``headless`` by typing, then check every tab."""
    url = f"http://127.0.0.1:{headless.port}"
    scope.get_by_label("Attach to a server").first.fill(url)
    scope.get_by_label("Headers (optional, this session only)").first.fill(KEY_TEXT)
    scope.get_by_role("button", name="Attach").first.click()
    scope.get_by_text(f"Attached to {url}").first.wait_for(timeout=WAIT_MS)
    model = attached_subject(headless)
    # Models: the attached server's add_sub (or digits_router), a python model (the engine here
    # has none)
    scope.locator(".tabulator-cell", has_text="python").first.wait_for(timeout=WAIT_MS)
    scope.get_by_text(f"{url}: live, ready").first.wait_for(timeout=WAIT_MS)
    assert page.locator("input[type=password]").first.input_value() == ""  # the key is not kept in the page
    page.screenshot(path=shots / f"{prefix}-1-models.png", full_page=True)
    if prefix == "hosted" and isinstance(headless, ServerProcess):  # a workbench serve
        doc_image(page, "Attach")
    # Live moves under a little traffic
    scope.locator(".bk-tab", has_text="Live").first.click()
    scope.get_by_label("Model version").first.select_option(model.key)
    with Traffic(url, model) as traffic:
        page.wait_for_function(
            f"() => Math.max(0, ...({FIND_JS})('live_series').data.inferences_per_s) > 0", timeout=WAIT_MS)
        status = re.compile(re.escape(model.key) + r" over the last [0-9.]+ s: .*infer/s")  # names its window
        scope.get_by_text(status).first.wait_for(timeout=WAIT_MS)
        page.screenshot(path=shots / f"{prefix}-2-live.png", full_page=True)
    assert traffic.sent > 0
    # Config: the served config, applied as a load override
    scope.locator(".bk-tab", has_text="Config").first.click()
    scope.get_by_text("the editor shows the served config").first.wait_for(timeout=WAIT_MS)
    scope.get_by_role("button", name="Apply (load with config override)").first.wait_for(timeout=WAIT_MS)
    # the served config as text (the engine completes it: a version policy the file has not)
    scope.locator(".ace_content", has_text="version_policy").first.wait_for(timeout=WAIT_MS)
    page.screenshot(path=shots / f"{prefix}-3-config.png", full_page=True)
    # Headless says why not
    scope.locator(".bk-tab", has_text="Headless").first.click()
    scope.get_by_text("is not available while attached").first.wait_for(timeout=WAIT_MS)


def test_hosted_dashboard_attaches_to_a_headless_server(
        browser, dashboard: Dashboard, headless: ServerProcess | TritonProcess, shots: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.goto(dashboard.page_url)
    page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    attach_and_check(page, page, headless, shots, "hosted")
    # and back to the engine in Jupyter
    page.locator(".bk-tab", has_text="Models").first.click()
    page.get_by_role("button", name="Back to this engine").click()
    page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    page.close()


def test_inline_dashboard_attaches_to_a_headless_server(
        browser, lab: Dashboard, headless: ServerProcess | TritonProcess, shots: Path) -> None:
    import nbformat

    url = f"http://127.0.0.1:{headless.port}"
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(
        f"from workbench.ui import dashboard\nboard = dashboard(url={url!r})\nboard")]
    path = Path(lab.jupyter.root_dir) / "attach.ipynb"
    nbformat.write(notebook, path)
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"http://127.0.0.1:{lab.jupyter.jupyter_port}{BASE_URL}lab/tree/attach.ipynb"
              f"?token={lab.jupyter.token}")
    output = page.locator(".jp-OutputArea")
    # without the key the repository API refuses: the page says so, in words
    refused = output.get_by_text("expecting header 'admin-key'").first
    run_all_cells_until(page, refused.is_visible, "the inline dashboard's refusal without the key")
    assert not output.get_by_role("button", name="Back to this engine").first.is_visible()
    attach_and_check(page, output, headless, shots, "inline")
    page.close()
    assert "s3cret" not in path.read_text()  # the key typed in the page is not in the notebook
    with httpx.Client(base_url=lab.root, headers=lab.jupyter.headers, timeout=60) as jupyter:
        for session in jupyter.get("api/sessions").json():  # the kernel
            jupyter.delete(f"api/sessions/{session['id']}").raise_for_status()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    """Two headless ``workbench serve`` replicas with the python add_sub (repository API
    behind the key)."""
    started: list[ServerProcess] = []
    try:
        for index in range(2):
            repo = write_python_add_sub(tmp_path_factory.mktemp(f"replica-{index}") / "models")
            process = start_server("workbench", server_flags(repo))
            assert isinstance(process, ServerProcess)
            started.append(process)
        yield started
    finally:
        for process in started:
            process.stop()


#: the replicas overlay's legend entries shown (one per replica), and how many have throughput
LEGEND_JS = f"({FIND_JS})('live_versions_throughput_legend').items.filter(i => i.visible)"
OVERLAY_JS = f"""() => {{
  const shown = {LEGEND_JS};
  const busy = shown.filter(i => Math.max(0, ...Array.from(i.renderers[0].data_source.data.y)) > 0).length;
  return shown.length === 2 && busy === 1;
}}"""


def test_hosted_dashboard_overlays_each_attached_replica(
        browser, dashboard: Dashboard, replicas: list[ServerProcess], shots: Path) -> None:
    """Attached to two replicas with traffic on one only: the Live tab's overlay shows one line
    per replica, named by host:port, only one with throughput (it summed them before)."""
    urls = [f"http://127.0.0.1:{process.port}" for process in replicas]
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(dashboard.page_url)
    page.locator(".tabulator-cell", has_text="digits_mlp").first.wait_for(timeout=WAIT_MS)
    page.get_by_label("Attach to a server").first.fill(", ".join(urls))
    page.get_by_label("Headers (optional, this session only)").first.fill(KEY_TEXT)
    page.get_by_role("button", name="Attach").first.click()
    page.locator(".tabulator-cell", has_text="python").first.wait_for(timeout=WAIT_MS)
    page.locator(".bk-tab", has_text="Live").first.click()
    page.get_by_label("Model version").first.select_option("add_sub/1")
    page.get_by_text("the sum of 2 replicas").first.wait_for(timeout=WAIT_MS)
    with Traffic(urls[0]):
        page.wait_for_function(OVERLAY_JS, timeout=WAIT_MS)
        page.screenshot(path=shots / "hosted-replicas-live.png", full_page=True)
    labels = page.evaluate(f"() => {LEGEND_JS}.map(i => i.label.value)")
    assert labels == [url.split("://")[1] for url in urls]
    title = page.evaluate(f"() => ({FIND_JS})('live_versions_throughput').title.text")
    assert title == "Replicas: throughput"
    page.close()
