"""What the browser tests share (``tests.browser.browser_support``, as tests/gpu has its
helpers; not from ``conftest``, a name several test folders use)."""

from __future__ import annotations

import contextlib
import os
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from workbench.testing.process import JupyterProcess

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
#: the browser Playwright launches (Playwright cannot download its own here)
CHROMIUM = Path(os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium"))
#: Jupyter's base URL in these tests (as under JupyterHub)
BASE_URL = "/jhub/user/x/"


class Dashboard:
    """The Jupyter process under test, its URLs and an authenticated REST client."""

    def __init__(self, jupyter: JupyterProcess) -> None:
        self.jupyter = jupyter
        self.root = f"http://127.0.0.1:{jupyter.jupyter_port}{BASE_URL}"
        self.page_url = f"{self.root}workbench/?token={jupyter.token}"
        self.api = httpx.Client(base_url=f"{self.root}workbench/api/", headers=jupyter.headers,
                                timeout=60)

    def get(self, path: str) -> dict:
        """``GET workbench/api/<path>`` as JSON (raises for an error status)."""
        response = self.api.get(path)
        response.raise_for_status()
        return response.json()

    def state(self, model: str) -> str:
        """The state of ``model``'s version 1 in the engine (of the model, while a row
        without a version stands for it, as Triton's index has for a model not loaded)."""
        models = self.get("models")["models"]
        return next(m.get("state", "") for m in models
                    if m["name"] == model and m.get("version", "1") in ("1", ""))


@contextlib.contextmanager
def serving(jupyter: JupyterProcess) -> Iterator[Dashboard]:
    """``jupyter`` as a :class:`Dashboard`; its client closed and the process stopped after."""
    served = Dashboard(jupyter)
    try:
        yield served
    finally:
        served.api.close()
        jupyter.stop()


#: the environment variable naming the folder the docs' screenshots are written to (relative:
#: to the checkout), e.g. ``WORKBENCH_DOC_IMAGES=docs/images`` (``make doc-images``); unset
#: (as in ``make test``) nothing is written there
DOC_IMAGES = "WORKBENCH_DOC_IMAGES"
#: the docs' screenshot of each dashboard tab (and the attach bar), by the test step that
#: takes it (tests/docs/test_doc_images.py checks every tab has one and the docs show it)
TAB_IMAGES = {"Models": "models-tab.png", "Config": "config-tab.png", "Live": "live-tab.png",
              "Rollout": "rollout-tab.png", "Tuning": "tuning-tab.png",
              "Headless": "headless-switch.png", "Attach": "attach.png"}


def doc_images_run() -> bool:
    """Whether this run retakes the docs' screenshots (``$WORKBENCH_DOC_IMAGES`` set)."""
    return bool(os.environ.get(DOC_IMAGES))


@dataclass(frozen=True)
class Subject:
    """The model a browser test unloads, edits and sends traffic to, as the test expects it
    served: its name, the version traffic reaches, its ``max_batch_size`` (Triton's default
    preferred batch size too) and the value the Config test types instead, the v2 JSON body of
    one request, and the Live tab's per-version legend."""

    name: str
    version: str
    max_batch_size: int
    edited_batch_size: int
    body: dict
    versions: tuple[str, ...]

    @property
    def key(self) -> str:
        """``<name>/<version>``, as the Live tab's version picker names it."""
        return f"{self.name}/{self.version}"


#: the test model (workbench.testing.reload.write_add_sub: max_batch_size 8, 2 CPU instances)
ADD_SUB = Subject("add_sub", "1", 8, 4, {"inputs": [
    {"name": name, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16} for name in ("INPUT0", "INPUT1")]},
    ("v1",))
#: the sample digits_mlp (versions 1 and 2 served; a request without a version reaches 2)
DIGITS_MLP = Subject("digits_mlp", "2", 64, 32, {"inputs": [
    {"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}, ("v1", "v2"))
#: the sample models the docs' screenshots show (a new user serves them), beside digits_mlp
DOC_SAMPLE_MODELS = ("digits_mlp", "digits_router")


def subject() -> Subject:
    """digits_mlp when the docs' screenshots are retaken (they show the sample models), add_sub
    otherwise (the tests' own model, served in every tier)."""
    return DIGITS_MLP if doc_images_run() else ADD_SUB


def doc_image(page, tab: str, full_page: bool = True) -> None:
    """The docs' screenshot of ``tab`` (a key of :data:`TAB_IMAGES`) from ``page`` as it is,
    written to ``$WORKBENCH_DOC_IMAGES`` when that is set; nothing otherwise."""
    folder = os.environ.get(DOC_IMAGES)
    if not folder:
        return
    target = ROOT / folder / TAB_IMAGES[tab]
    target.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=target, full_page=full_page)


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (no Playwright, no Chromium), or None."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright; `make test` does)"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; `make test` does as root)"
    return None


def kernel_lab(home: Path) -> JupyterProcess:
    """`jupyter lab` without the workbench server extension (under ``home``): a notebook's
    kernel runs whatever engine it starts."""
    from workbench.testing.lab import LAB_TEST_FLAGS

    return JupyterProcess(
        [f"--ServerApp.base_url={BASE_URL}", *LAB_TEST_FLAGS,
         "--ServerApp.jpserver_extensions=workbench.jupyter=False"],
        home=home, enable_file=ENABLE_FILE, lab=True, engine=False)


#: seconds any awaited condition may take on a loaded machine (a deadline, not a measurement)
PATIENCE_S = 90.0


T = TypeVar("T")


def eventually(check: Callable[[], T | None], what: str) -> T:
    """``check()`` once it is truthy; fails with ``what`` past :data:`PATIENCE_S`."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what} (last: {value!r})")
        time.sleep(0.25)


#: the current tab's kernel is connected and idle (cells run before that are dropped)
KERNEL_IDLE_JS = """() => {
  const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
  return kernel?.connectionStatus === 'connected' && kernel?.status === 'idle';
}"""


def write_dashboard_notebook(path: Path, models: Path, options: str = "", cells: tuple[str, ...] = ()) -> None:
    """A notebook that starts a ``Server`` on ``models`` (``options``: more ServerOptions
    arguments, e.g. ``"model_control_mode='explicit'"``), runs ``cells``, then shows the inline
    dashboard as ``board``."""
    import nbformat

    extra = f", {options}" if options else ""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # each cell does its work once per kernel: a second run of all cells (Lab's dialogs, see
    # run_all_cells_until) shows the same dashboard again instead of a second engine and
    # dashboard that replaced the one a test was typing into (CI: the space typed was lost)
    notebook.cells = [
        nbformat.v4.new_code_cell("if 'server' not in globals():\n"
                                  "    from workbench import Server, ServerOptions\n"
                                  f"    server = Server(ServerOptions(model_repository=[{str(models)!r}]{extra}))\n"
                                  "    await server.start()"),
        *(nbformat.v4.new_code_cell(f"if '_cell_{i}_ran' not in globals():\n    _cell_{i}_ran = True\n"
                                    + textwrap.indent(code, "    ")) for i, code in enumerate(cells)),
        nbformat.v4.new_code_cell("if 'board' not in globals():\n"
                                  "    from workbench.ui import dashboard\n"
                                  "    board = dashboard(server)\n"
                                  "board"),
    ]
    nbformat.write(notebook, path)


def run_all_cells_until(page, shown: Callable[[], bool], what: str) -> None:
    """Once the open notebook's kernel is idle, run all its cells, and again after Lab's
    "Select Kernel" dialog (which it may show while the kernel starts, dropping the run, or
    not: then the cells run twice, which :func:`write_dashboard_notebook`'s cells allow),
    until ``shown()``."""
    page.locator(".jp-Notebook").wait_for(timeout=PATIENCE_S * 1000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=PATIENCE_S * 1000)
    runs: list[int] = []

    def ready() -> bool:
        select = page.locator(".jp-Dialog .jp-mod-accept")
        if select.is_visible():
            select.click()
            runs.clear()
        if not runs:
            # not awaited: the command's promise resolves when the cells have run
            page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            runs.append(1)
        return shown()

    eventually(ready, what)


#: a named Bokeh model of the page, from whichever document holds it (a notebook has several)
FIND_JS = """(name) => {
  for (const doc of Bokeh.documents) {
    const model = doc.get_model_by_name(name);
    if (model) return model;
  }
  return null;
}"""
