"""A real `jupyter server` process: a websocket to the dashboard (``{base_url}workbench/ws``)
that does not speak Bokeh's protocol (no ``Sec-WebSocket-Protocol: bokeh, <session token>``,
or a token that is not this server's) is refused before the upgrade with a 4xx and one
warning line in Jupyter's log, no traceback; the server stays healthy and a real session's
websocket still opens (issue 16, a new user's finding: Bokeh's ``ProtocolError`` logged as an
uncaught exception)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websocket  # websocket-client (a dependency of jupyter_server)

from workbench.testing.process import JupyterProcess
from workbench.testing.reload import write_add_sub

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
REFUSED = "refused a dashboard websocket"


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterProcess]:
    models = tmp_path_factory.mktemp("socket") / "models"
    write_add_sub(models)
    process = JupyterProcess([f"--Workbench.model_repository={models}"],
                             home=tmp_path_factory.mktemp("jupyter-home"), enable_file=ENABLE_FILE)
    try:
        yield process
    finally:
        process.stop()


def connect(jupyter: JupyterProcess, subprotocols: list[str] | None) -> websocket.WebSocket:
    return websocket.create_connection(
        f"ws://127.0.0.1:{jupyter.jupyter_port}/workbench/ws", timeout=30, subprotocols=subprotocols,
        header=[f"Authorization: token {jupyter.token}"])


@pytest.mark.parametrize(("subprotocols", "status"), [
    (None, 400), (["chat"], 400), (["bokeh"], 400), (["bokeh", "not-a-token"], 403),
    (["bokeh", "eyJzZXNzaW9uX2lkIjogIngifQ.c2ln"], 403),  # decodes, but not signed here
])
def test_a_socket_without_bokehs_protocol_is_refused_in_one_log_line(
        jupyter: JupyterProcess, subprotocols: list[str] | None, status: int) -> None:
    before = len(jupyter.lines)
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        connect(jupyter, subprotocols)
    assert refused.value.status_code == status
    line = jupyter.wait_for_log(REFUSED, since=before)
    assert "127.0.0.1" in line
    # the server answers on; its log since then has the one warning and no traceback
    with httpx.Client(timeout=30) as client:
        assert client.get(f"http://127.0.0.1:{jupyter.jupyter_port}/workbench/api/status",
                          headers=jupyter.headers).status_code == 200
    since = jupyter.lines[before:]
    assert sum(REFUSED in entry for entry in since) == 1, since
    assert not [entry for entry in since if "Traceback" in entry or "Uncaught exception" in entry], since
    assert not [entry for entry in since if "ProtocolError" in entry], since


def test_a_real_sessions_socket_still_opens(jupyter: JupyterProcess) -> None:
    with httpx.Client(timeout=60) as client:
        page = client.get(f"http://127.0.0.1:{jupyter.jupyter_port}/workbench/", headers=jupyter.headers)
    assert page.status_code == 200
    found = re.search(r'"token":\s*"([^"]+)"', page.text)
    assert found is not None, page.text[:500]
    token = found.group(1)
    socket = connect(jupyter, ["bokeh", token])
    try:
        header = json.loads(socket.recv())
    finally:
        socket.close()
    assert header["msgtype"] == "ACK"
