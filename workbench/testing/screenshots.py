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


@contextlib.contextmanager
def dashboard_page(workbench_args: Sequence[str], home: Path, width: int, height: int) -> Iterator:
    """A Playwright page (``width`` x ``height`` pixels) showing the dashboard of a Jupyter
    server started with ``workbench_args`` (its home folder ``home``); the browser and the
    server stop when the block exits."""
    from playwright.sync_api import sync_playwright

    jupyter = JupyterProcess(list(workbench_args), home=home, enable_file=ENABLE_FILE)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=["--no-sandbox", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"http://127.0.0.1:{jupyter.jupyter_port}/workbench/?token={jupyter.token}")
                yield page
            finally:
                browser.close()
    finally:
        jupyter.stop()


__all__ = ["dashboard_page"]
