"""A real `jupyter server` process with the workbench extension: the engine starts with it,
serves the Jupyter API and the v2 ports, and stops with it on SIGTERM, releasing its ports."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from workbench.testing.attack import load_body
from workbench.testing.process import JupyterProcess
from workbench.testing.reload import write_add_sub

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"


def get_json(url: str, headers: dict[str, str]) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
        return json.loads(response.read())


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def check_the_ports_load_no_code_without_the_key(jupyter: JupyterProcess, status: dict, marker: Path) -> None:
    """The attack on `make jupyter`: a web page's cross-site "simple" POST (text/plain, a
    foreign Origin) to the v2 port's load API with a Python model that runs code."""
    body = load_body(marker)
    load = f"http://{jupyter.url}/v2/repository/models/evil/load"
    code, reply = post(load, body, {"Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert code == 403 and "refused" in reply["error"]
    key = status["ports_key"]
    code, reply = post(load, body, {"Content-Type": "application/json"})  # no key: Triton's 403
    assert (code, reply) == (403, {"error": f"This API is restricted, expecting header '{key['header']}'"})
    assert not marker.exists()
    assert key["restricted"] == ["model-repository", "shared-memory", "logging", "trace"]
    code, _ = post(f"http://{jupyter.url}/v2/repository/index", b"{}", {key["header"]: key["value"]})
    assert code == 200


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_jupyter_server_hosts_the_engine_and_stops_it_on_sigterm(tmp_path: Path, sample_repository: Path) -> None:
    repo = tmp_path / "models"
    write_add_sub(repo)
    shutil.copytree(sample_repository / "digits_mlp", repo / "digits_mlp")
    jupyter = JupyterProcess([f"--Workbench.model_repository={repo}", "--Workbench.open_ports=True",
                              "--Workbench.http_port=0", "--Workbench.grpc_port=0", "--Workbench.metrics_port=0"],
                             home=tmp_path / "jupyter", enable_file=ENABLE_FILE)
    try:
        status = get_json(f"{jupyter.api_url}/status", jupyter.headers)
        assert status["state"] == "running", jupyter.log
        assert status["ports"] == {"http": jupyter.port, "grpc": jupyter.grpc_port, "metrics": jupyter.metrics_port}
        models = get_json(f"{jupyter.api_url}/models", jupyter.headers)["models"]
        assert {(m["name"], m["state"]) for m in models} == {("add_sub", "READY"), ("digits_mlp", "READY")}
        with pytest.raises(urllib.error.HTTPError, match="403"):
            get_json(f"{jupyter.api_url}/models", {})
        check_the_ports_load_no_code_without_the_key(jupyter, status, tmp_path / "ran")

        client = httpclient.InferenceServerClient(jupyter.url)
        assert client.is_server_ready()
        pixels = httpclient.InferInput("pixels", [1, 64], "FP32")
        pixels.set_data_from_numpy(np.zeros((1, 64), np.float32))
        assert client.infer("digits_mlp", [pixels]).as_numpy("logits").shape == (1, 10)
        client.close()
    finally:
        code = jupyter.stop(signal.SIGTERM)
    assert code == 0, jupyter.log
    assert "all models unloaded" in jupyter.log
    assert [refused(port) for port in (jupyter.jupyter_port, jupyter.port, jupyter.grpc_port,
                                       jupyter.metrics_port)] == [True] * 4


def test_the_shipped_config_file_enables_the_extension(tmp_path: Path) -> None:
    enabled = tmp_path / "config" / "jupyter_server_config.d"
    enabled.mkdir(parents=True)
    shutil.copy(ENABLE_FILE, enabled / "workbench.json")
    result = subprocess.run(
        [sys.executable, "-m", "jupyter_server", "extension", "list"], capture_output=True, text=True,
        timeout=120, env={**__import__("os").environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
                          "NO_COLOR": "1"},
    )
    listing = result.stdout + result.stderr
    assert result.returncode == 0, listing
    section = listing.split(f"Config dir: {tmp_path / 'config'}")[1].split("Config dir:")[0]
    assert "workbench.jupyter" in section and "enabled" in section
    assert "workbench.jupyter 0.1.0" in section and "OK" in section, section


async def test_sigterm_with_a_dashboard_tab_connected_stops_jupyter_and_frees_the_ports(
        tmp_path: Path) -> None:
    """A browser tab's websocket still connected when Jupyter gets SIGTERM: its session is
    closed (not refused with "Should not be discarding a session with open connections"), the
    engine drains, and Jupyter and the v2 ports are gone within the engine's exit timeout."""
    import asyncio
    import re
    import time

    import httpx
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    repo = tmp_path / "models"
    write_add_sub(repo)
    exit_timeout_s = 5
    jupyter = JupyterProcess([f"--Workbench.model_repository={repo}", "--Workbench.open_ports=True",
                              "--Workbench.http_port=0", "--Workbench.grpc_port=0", "--Workbench.metrics_port=0",
                              f"--Workbench.server_options={{'exit_timeout_secs': {exit_timeout_s}}}"],
                             home=tmp_path / "jupyter", enable_file=ENABLE_FILE)
    socket_ = None
    try:
        root = f"http://127.0.0.1:{jupyter.jupyter_port}"
        async with httpx.AsyncClient(timeout=60) as client:
            page = await client.get(f"{root}/workbench/?token={jupyter.token}")
        assert page.status_code == 200, page.text
        found = re.search(r'"token":\s*"([^"]+)"', page.text)
        assert found is not None, page.text[:500]
        session_token = found.group(1)
        cookie = "; ".join(f"{name}={value}" for name, value in page.cookies.items())
        socket_ = await websocket_connect(
            HTTPRequest(f"ws://127.0.0.1:{jupyter.jupyter_port}/workbench/ws",
                        headers={"Cookie": cookie, "Origin": root}),
            subprotocols=["bokeh", session_token])
        ack = await socket_.read_message()
        assert ack is not None, "the socket closed"
        assert json.loads(ack)["msgtype"] == "ACK"  # the tab is connected
        started = time.monotonic()
        code = await asyncio.to_thread(jupyter.stop, signal.SIGTERM, exit_timeout_s + 25)
        took = time.monotonic() - started
    finally:
        if socket_ is not None:
            socket_.close()
            # the server is gone: the closing handshake would never end, and the loop closes
            # with the test; close the socket now (else it is reported unclosed in a later test)
            if socket_.stream is not None:
                socket_.stream.close()
        jupyter.stop()
    assert "Should not be discarding a session" not in jupyter.log, jupyter.log
    assert "Traceback" not in jupyter.log, jupyter.log
    assert code == 0, jupyter.log
    assert took < exit_timeout_s + 20, (took, jupyter.log)  # not killed after the 30 s wait
    assert "all models unloaded" in jupyter.log
    assert [refused(port) for port in (jupyter.jupyter_port, jupyter.port, jupyter.grpc_port,
                                       jupyter.metrics_port)] == [True] * 4
