"""The Jupyter extension tier: a real in-process Jupyter server (pytest-jupyter's
``jp_serverapp`` / ``jp_fetch``) with the workbench extension enabled on a temporary copy of
real models, and the real engine behind it."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (pytest-jupyter's fixtures, for this folder only)
from traitlets.config import Config

from workbench.jupyter.host import EngineHost
from workbench.testing.reload import write_add_sub


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's fixture of this name (star-imported)
async def jp_asyncio_loop():
    """pytest-jupyter sets its server up on this loop and pytest-asyncio runs the tests on
    its own: make them one, so the engine, Jupyter's handlers and the test share a loop (and
    the server's clean-up, which stops the engine, runs before that loop closes)."""
    return asyncio.get_running_loop()


@pytest.fixture
def model_repository(tmp_path: Path, sample_repository: Path) -> Path:
    """A writable repository: add_sub (tiny ONNX, 2 CPU instances, dynamic batching) and a
    copy of the sample digits_mlp (two versions)."""
    repo = tmp_path / "models"
    write_add_sub(repo)
    shutil.copytree(sample_repository / "digits_mlp", repo / "digits_mlp")
    return repo


@pytest.fixture
def workbench_config() -> dict:
    """``c.Workbench`` traits beyond the repository; tests override it."""
    return {}


@pytest.fixture  # type: ignore[no-redef]  # overrides pytest-jupyter's fixture of this name (star-imported)
def jp_server_config(model_repository: Path, workbench_config: dict) -> Config:
    return Config({
        "ServerApp": {"jpserver_extensions": {"workbench.jupyter": True}},
        "Workbench": {"model_repository": [str(model_repository)], **workbench_config},
    })


@pytest.fixture
async def workbench(jp_serverapp) -> EngineHost:
    """The engine host of the running Jupyter server, once its models are loaded.

    pytest-jupyter starts the server without running its post-start hook; this runs it as
    ``ServerApp`` does once its loop runs (``extension_manager.start_all_extensions``)."""
    await jp_serverapp.extension_manager.start_all_extensions()
    host: EngineHost = jp_serverapp.web_app.settings["workbench_host"]
    assert await asyncio.wait_for(host.started(), timeout=30) == "running", host.error
    return host


@pytest.fixture
def jupyter_url(http_server_client, jp_base_url: str) -> str:
    """The in-process Jupyter server's base URL, for clients other than ``jp_fetch``."""
    return f"http://127.0.0.1:{http_server_client.get_http_port()}{jp_base_url}"


@pytest.fixture
def api(jp_fetch):
    """``await api("models", method="POST", body={...})``: a workbench API call through
    Jupyter (token auth); returns ``(status, JSON body)`` for any status."""
    from tornado.httpclient import HTTPClientError

    async def call(*path: str, method: str = "GET", body: object = None, params: dict | None = None):
        kwargs = {"method": method, "params": params}
        if body is not None or method in ("POST", "PUT"):
            kwargs["body"] = json.dumps(body if body is not None else {})
        try:
            response = await jp_fetch("workbench", "api", *path, **kwargs)
        except HTTPClientError as exc:
            assert exc.response is not None, exc
            return exc.code, json.loads(exc.response.body)
        return response.code, json.loads(response.body)

    return call
