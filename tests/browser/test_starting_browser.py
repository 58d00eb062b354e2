"""The Jupyter-hosted dashboard opened while the engine is still loading its models (the URL
``make jupyter`` prints comes first): the page shows the engine starting, with its progress,
and switches to the dashboard by itself once the engine runs, no reload (issue 35). The
engine is held at its start by a Python model whose ``initialize`` waits for a file the test
writes after the page showed "starting"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.browser_support import BASE_URL, ENABLE_FILE, PATIENCE_S, Dashboard, browser_missing, serving
from workbench.testing.process import JupyterProcess

WAIT_MS = PATIENCE_S * 1000

GATED_CONFIG = """name: "gated"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

#: initialize returns once the file named by the model's parameter exists
GATED_MODEL = '''import os
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        gate = os.path.join(os.path.dirname(__file__), "go")
        while not os.path.exists(gate):
            threading.Event().wait(0.05)

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''


@pytest.fixture
def gated(tmp_path: Path) -> Path:
    """A repository of one model whose load waits for ``gated/1/go``."""
    version = tmp_path / "models" / "gated" / "1"
    version.mkdir(parents=True)
    (version.parent / "config.pbtxt").write_text(GATED_CONFIG)
    (version / "model.py").write_text(GATED_MODEL)
    return tmp_path / "models"


@pytest.fixture
def starting(gated: Path, tmp_path: Path) -> Iterator[Dashboard]:
    """A Jupyter server up (its URL printed) while its engine still loads ``gated``."""
    missing = browser_missing()
    if missing:
        pytest.skip(missing)
    jupyter = JupyterProcess([f"--Workbench.model_repository={gated}", f"--ServerApp.base_url={BASE_URL}"],
                             home=tmp_path / "home", enable_file=ENABLE_FILE, engine=False)
    with serving(jupyter) as served:
        yield served


def test_the_page_opened_while_the_engine_starts_becomes_the_dashboard(
        browser, starting: Dashboard, gated: Path, shots: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(starting.page_url)
    notice = page.get_by_text("The workbench engine is starting")
    notice.wait_for(timeout=WAIT_MS)
    page.get_by_text("0 of 1 model versions ready").wait_for(timeout=WAIT_MS)
    page.screenshot(path=shots / "1-starting.png", full_page=True)
    assert page.locator(".bk-tab", has_text="Models").count() == 0

    (gated / "gated" / "1" / "go").write_text("")
    page.locator(".tabulator-cell", has_text="gated").first.wait_for(timeout=WAIT_MS)
    page.locator(".bk-tab", has_text="Models").first.wait_for(timeout=WAIT_MS)
    page.screenshot(path=shots / "2-dashboard.png", full_page=True)
    assert notice.count() == 0
    assert starting.state("gated") == "READY"
    page.close()
