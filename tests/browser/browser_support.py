"""What the browser tests share (imported as a sibling module, as tests/gpu does; not from
``conftest``, a name several test folders use)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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


#: seconds any awaited condition may take on a loaded machine (a deadline, not a measurement)
PATIENCE_S = 90.0


def eventually(check: Callable[[], object], what: str) -> object:
    """``check()`` once it is truthy; fails with ``what`` past :data:`PATIENCE_S`."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what} (last: {value!r})")
        time.sleep(0.25)
