"""The extension's lifecycle: the engine starts with the Jupyter server and stops with it;
Jupyter's authentication guards the API."""

from __future__ import annotations

import httpx
import pytest

from workbench import ServerNotReady
from workbench.jupyter.host import EngineHost


async def test_engine_starts_with_jupyter_and_lists_models_ready(workbench: EngineHost, api) -> None:
    status, body = await api("models")
    assert status == 200
    rows = {(r["name"], r.get("version")): r["state"] for r in body["models"]}
    assert rows == {("add_sub", "1"): "READY", ("digits_mlp", "1"): "READY", ("digits_mlp", "2"): "READY"}
    status, state = await api("status")
    assert status == 200
    assert state["state"] == "running" and state["live"] and state["ready"]
    assert state["model_control_mode"] == "explicit" and state["ports"] == {}


async def test_unauthenticated_requests_get_403(workbench: EngineHost, jupyter_url: str) -> None:
    url = f"{jupyter_url}workbench/api"
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{url}/models")).status_code == 403
        assert (await client.get(f"{url}/statistics/stream")).status_code == 403
        refused = await client.post(f"{url}/models/add_sub/unload")
        wrong = await client.get(f"{url}/models", headers={"Authorization": "token wrong"})
    assert refused.status_code == 403 and wrong.status_code == 403
    assert workbench.engine().is_live()  # nothing was unloaded
    assert [r["state"] for r in await workbench.engine().repository_index() if r["name"] == "add_sub"] == ["READY"]


async def test_stopping_jupyter_stops_the_engine(workbench: EngineHost, jp_serverapp) -> None:
    server = workbench.engine()
    await jp_serverapp.extension_manager.stop_all_extensions()  # what ServerApp._cleanup calls
    assert workbench.state == "stopped" and not server.is_live()
    with pytest.raises(ServerNotReady, match="the workbench engine is stopped"):
        workbench.engine()


@pytest.mark.parametrize("workbench_config", [{"model_control_mode": "none"}])
async def test_model_control_mode_is_configurable(workbench: EngineHost, api) -> None:
    status, body = await api("models", "add_sub", "unload", method="POST")
    assert status == 503 and body["reason"] == "UNAVAILABLE"
    assert "explicit model load / unload is not allowed" in body["message"]
    assert (await api("status"))[1]["model_control_mode"] == "none"


@pytest.fixture
def unconfigured_config():
    from traitlets.config import Config

    return Config({"ServerApp": {"jpserver_extensions": {"workbench.jupyter": True}}})


async def test_without_a_repository_nothing_starts_and_the_api_says_why(jp_configurable_serverapp,
                                                                       unconfigured_config) -> None:
    app = jp_configurable_serverapp(config=unconfigured_config)
    await app.extension_manager.start_all_extensions()
    host: EngineHost = app.web_app.settings["workbench_host"]
    assert host.state == "not configured" and host.server is None
    with pytest.raises(ServerNotReady, match="no model repository configured"):
        host.engine()
