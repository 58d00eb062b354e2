"""The browser tier: headless Chromium (Debian's ``chromium``), driven by Playwright, on the
dashboard of a real ``jupyter server`` process (token authentication, a non-root base URL,
the v2 ports open) over a temporary copy of real models.

Skipped, with the reason, when Playwright or Chromium is missing (``make test`` installs both:
Playwright from the ``dev`` extra, Chromium with apt-get where it runs as root). Screenshots
go to pytest's ``tmp_path`` and, when ``WORKBENCH_TEST_ARTIFACTS`` is set, are copied under
that folder (CI keeps it as the run's artifacts).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.browser_support import (
    BASE_URL,
    CHROMIUM,
    DOC_SAMPLE_MODELS,
    ENABLE_FILE,
    Dashboard,
    browser_missing,
    doc_images_run,
    kernel_lab,
    serving,
)
from workbench.testing.lab import lab_missing
from workbench.testing.process import JupyterProcess
from workbench.testing.reload import write_add_sub


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, sample_repository: Path) -> Path:
    """A writable repository: add_sub (max_batch_size 8) and a copy of digits_mlp; when the
    docs' screenshots are retaken, copies of sample models instead (digits_mlp and the python
    digits_router: what a new user serves; the tests then act on digits_mlp, see ``subject``)."""
    repo = tmp_path_factory.mktemp("browser") / "models"
    if doc_images_run():
        for name in DOC_SAMPLE_MODELS:
            shutil.copytree(sample_repository / name, repo / name)
        return repo
    write_add_sub(repo)
    shutil.copytree(sample_repository / "digits_mlp", repo / "digits_mlp")
    return repo


@pytest.fixture(scope="module")
def dashboard(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A real Jupyter server with the workbench extension; sessions linger 1 s after their tab
    (shorter than a page load here: the websocket then re-creates the session)."""
    missing = browser_missing()
    if missing:
        pytest.skip(missing)
    jupyter = JupyterProcess(
        [f"--Workbench.model_repository={models}", f"--ServerApp.base_url={BASE_URL}",
         "--Workbench.open_ports=True", "--Workbench.http_port=0", "--Workbench.grpc_port=0",
         "--Workbench.metrics_port=0", "--Workbench.dashboard_session_linger_s=1"],
        home=tmp_path_factory.mktemp("jupyter-home"), enable_file=ENABLE_FILE)
    with serving(jupyter) as served:
        yield served


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """`jupyter lab` without the workbench server extension: a notebook's kernel runs the
    engine the inline dashboard shows (or attaches it to a server by URL)."""
    missing = lab_missing()
    if missing:
        pytest.skip(missing)
    with serving(kernel_lab(tmp_path_factory.mktemp("lab-home"))) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium (the system's), for the module."""
    missing = browser_missing()
    if missing:
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def shots(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder for the test's screenshots; copied under ``$WORKBENCH_TEST_ARTIFACTS/<test>``
    afterwards when that is set."""
    folder = tmp_path / "screenshots"
    folder.mkdir()
    yield folder
    target = os.environ.get("WORKBENCH_TEST_ARTIFACTS")
    if target:
        shutil.copytree(folder, Path(target) / request.node.name, dirs_exist_ok=True)
