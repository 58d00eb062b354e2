"""What the README's screenshot scripts (``scripts/*_screenshot.py``) share: a Jupyter server
with the workbench extension, and its dashboard open in headless Chromium."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from workbench.testing.process import JupyterProcess

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")


#: Jupyter options for a dashboard whose engine serves the v2 ports (on ports from the OS;
#: ``GET {base}api/status`` says which)
OPEN_PORTS = ("--Workbench.open_ports=True", "--Workbench.http_port=0", "--Workbench.grpc_port=0",
              "--Workbench.metrics_port=0")


@contextlib.contextmanager
def dashboard_session(workbench_args: Sequence[str], home: Path, width: int, height: int) -> Iterator[tuple]:
    """``(page, jupyter)``: a Playwright page (``width`` x ``height`` pixels) showing the
    dashboard of a Jupyter server (:class:`~workbench.testing.process.JupyterProcess`)
    started with ``workbench_args`` (its home folder ``home``); the browser and the server
    stop when the block exits."""
    from playwright.sync_api import sync_playwright

    jupyter = JupyterProcess(list(workbench_args), home=home, enable_file=ENABLE_FILE)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=["--no-sandbox", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"http://127.0.0.1:{jupyter.jupyter_port}/workbench/?token={jupyter.token}")
                yield page, jupyter
            finally:
                browser.close()
    finally:
        jupyter.stop()


@contextlib.contextmanager
def dashboard_page(workbench_args: Sequence[str], home: Path, width: int, height: int) -> Iterator:
    """The page of :func:`dashboard_session` alone."""
    with dashboard_session(workbench_args, home, width, height) as (page, _jupyter):
        yield page


def v2_ports(jupyter: JupyterProcess) -> dict[str, int]:
    """The v2 ports (``{"http": ..., "grpc": ..., "metrics": ...}``) the dashboard's engine
    serves (started with :data:`OPEN_PORTS`)."""
    import httpx

    status = httpx.get(f"http://127.0.0.1:{jupyter.jupyter_port}/workbench/api/status",
                       headers=jupyter.headers, timeout=60).json()
    return status["ports"]


def shot_arguments(doc: str, image: str) -> argparse.Namespace:
    """A screenshot script's ``--out`` (default ``docs/images/<image>``) and ``--repository``
    (default the sample models) from its command line; ``doc``: the script's docstring."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images" / image))
    parser.add_argument("--repository", default=str(ROOT / "sample_models" / "repository"))
    return parser.parse_args()


@contextlib.contextmanager
def work_folder(prefix: str, repository: str | Path | None = None, model: str = "digits_mlp") -> Iterator[Path]:
    """A temporary folder (removed after the block) holding ``models/<model>`` copied from
    ``repository`` (nothing copied without one)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if repository is not None:
            shutil.copytree(Path(repository) / model, work / "models" / model)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def save(page, out: str, full_page: bool = False) -> None:
    """``page``'s screenshot into ``out`` (its folder made), the path printed."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=out, full_page=full_page)
    print(out)


__all__ = ["OPEN_PORTS", "dashboard_page", "dashboard_session", "save", "shot_arguments", "v2_ports", "work_folder"]
