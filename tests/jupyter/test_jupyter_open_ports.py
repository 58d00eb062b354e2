"""``c.Workbench.open_ports``: the standard v2 HTTP, gRPC and metrics ports served from the
Jupyter process, reached with the unmodified tritonclient clients, and released when
Jupyter stops."""

from __future__ import annotations

import asyncio
import os
import socket

import httpx
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from traitlets.config import Config
from tritonclient.utils import InferenceServerException

from workbench.jupyter.host import EngineHost

OPEN_ANY_PORTS = {"open_ports": True, "http_port": 0, "grpc_port": 0, "metrics_port": 0}


async def refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


@pytest.mark.parametrize("workbench_config", [OPEN_ANY_PORTS])
async def test_v2_ports_serve_the_jupyter_hosted_engine(workbench: EngineHost, api, jp_serverapp) -> None:
    ports = (await api("status"))[1]["ports"]
    assert set(ports) == {"http", "grpc", "metrics"} and all(ports.values())
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['http']}") as client:
        assert (await client.get("/v2/health/ready")).status_code == 200

    triton = httpclient.InferenceServerClient(f"127.0.0.1:{ports['http']}")
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result = await triton.infer("add_sub", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == (a * 2).tolist()
    finally:
        await triton.close()
    async with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as grpc_triton:
        assert await grpc_triton.is_model_ready("digits_mlp", "2")
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"http://127.0.0.1:{ports['metrics']}/metrics")).text
    assert 'nv_inference_request_success{model="add_sub",version="1"} 1' in metrics
    stats = (await api("statistics", params={"model": "add_sub"}))[1]
    assert stats["model_stats"][0]["inference_count"] == 1  # one engine behind both

    await jp_serverapp._cleanup()  # Jupyter's shutdown: extensions stop, then kernels
    assert workbench.state == "stopped" and (await api("status"))[1]["ports"] == {}
    assert [await refused(port) for port in ports.values()] == [True, True, True]


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def test_a_busy_port_fails_the_engine_not_jupyter(jp_configurable_serverapp, model_repository,
                                                        busy_port: int) -> None:
    config = Config({
        "ServerApp": {"jpserver_extensions": {"workbench.jupyter": True}},
        "Workbench": {"model_repository": [str(model_repository)], **OPEN_ANY_PORTS, "http_port": busy_port},
    })
    app = jp_configurable_serverapp(config=config)
    await app.extension_manager.start_all_extensions()
    host: EngineHost = app.web_app.settings["workbench_host"]
    assert await asyncio.wait_for(host.started(), timeout=10) == "failed"
    assert "cannot open the v2 ports" in host.error
    assert host.server is not None and not host.server.is_live()  # no model was loaded
    assert host.status()["ports"] == {}


@pytest.mark.parametrize("workbench_config", [OPEN_ANY_PORTS])
async def test_v2_ports_load_and_unload_only_with_the_ports_key(workbench: EngineHost, api) -> None:
    """The ports' model-repository, shared-memory and settings groups need the key that the
    signed-in user reads from api/status (and kernels from WORKBENCH_PORTS_KEY); tritonclient
    passes it as a header (HTTP) or as Triton's triton-grpc-protocol-<key> metadata (gRPC)."""
    status = (await api("status"))[1]
    key, ports = status["ports_key"], status["ports"]
    assert key["value"] and os.environ["WORKBENCH_PORTS_KEY"] == key["value"]
    assert key["grpc_header"] == "triton-grpc-protocol-workbench-api-key"
    http = httpclient.InferenceServerClient(f"127.0.0.1:{ports['http']}")
    try:
        with pytest.raises(InferenceServerException, match="This API is restricted, expecting header "
                                                           "'workbench-api-key'"):
            await http.unload_model("add_sub")
        with pytest.raises(InferenceServerException, match="This API is restricted"):
            await http.update_log_settings({"log_verbose_level": 1})
        assert await http.is_model_ready("add_sub")  # health, inference stay open
        await http.unload_model("add_sub", headers={key["header"]: key["value"]})
        assert not await http.is_model_ready("add_sub")
    finally:
        await http.close()
    async with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as grpc_triton:
        with pytest.raises(InferenceServerException, match="This protocol is restricted, expecting header "
                                                           "'triton-grpc-protocol-workbench-api-key'"):
            await grpc_triton.load_model("add_sub")
        await grpc_triton.load_model("add_sub", headers={key["grpc_header"]: key["value"]})
        assert await grpc_triton.is_model_ready("add_sub")


@pytest.mark.parametrize("workbench_config", [{**OPEN_ANY_PORTS, "ports_restricted_api": []}])
async def test_no_key_when_no_group_is_restricted(workbench: EngineHost, api) -> None:
    status = (await api("status"))[1]
    assert status["ports_key"] is None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{status['ports']['http']}") as client:
        assert (await client.post("/v2/repository/index")).status_code == 200
