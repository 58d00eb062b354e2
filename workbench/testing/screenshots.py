"""What the README's screenshot scripts (``scripts/*_screenshot.py``) share: a Jupyter server
with the workbench extension, and its dashboard open in headless Chromium."""

from __future__ import annotations

import contextlib
import os
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


__all__ = ["OPEN_PORTS", "dashboard_page", "dashboard_session", "v2_ports"]
