"""Logging and trace extensions: /v2/logging, /v2[/models/<m>]/trace/setting on the real engine."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from workbench import Server, ServerOptions
from workbench.hosts.logging_setup import apply_log_settings, configure_logging

DEFAULT_LOG = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
               "log_verbose_level": 0, "log_format": "default"}
DEFAULT_TRACE = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                 "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}


@pytest_asyncio.fixture
async def traced(test_repository: Path, asgi_client):
    """HTTP client on a server started with a trace file, so tracing can be turned on."""
    options = ServerOptions(model_repository=[str(test_repository)], trace_file="/tmp/trace.json")
    async with Server(options) as server, asgi_client(server) as http:
        yield http


async def test_log_settings_round_trip(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v2/logging")).json() == DEFAULT_LOG
    update = {"log_info": False, "log_verbose_level": 2, "log_format": "ISO8601", "log_error": None}
    response = await client.post("/v2/logging", json=update)
    assert response.status_code == 200
    expected = {**DEFAULT_LOG, "log_info": False, "log_verbose_level": 2, "log_format": "ISO8601"}
    assert response.json() == expected
    assert (await client.get("/v2/logging")).json() == expected


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"log_file": "/tmp/x.log"}, 501, "log file location can not be updated through network protocol"),
        ({"log_info": "yes"}, 400, "attempt to access JSON non-boolean as boolean"),
        ({"log_verbose_level": -1}, 400, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        # Triton answers 503 (UNAVAILABLE); a client's mistake is 400 here (docs/api.md, Logging)
        ({"log_format": "json"}, 400, "invalid argument for --log_format, got: json"),
        ({"log_format": "%(message)s"}, 400, "invalid argument for --log_format, got: %(message)s"),
    ],
)
async def test_log_settings_errors(client: httpx.AsyncClient, body: dict, status: int, error: str) -> None:
    response = await client.post("/v2/logging", json={"log_warning": False, **body})
    assert (response.status_code, response.json()) == (status, {"error": error})
    assert (await client.get("/v2/logging")).json() == DEFAULT_LOG  # all or nothing


async def test_trace_settings_global_and_per_model(traced: httpx.AsyncClient) -> None:
    assert (await traced.get("/v2/trace/setting")).json() == {**DEFAULT_TRACE, "trace_file": "/tmp/trace.json"}
    response = await traced.post("/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"], "trace_rate": "5"})
    assert response.status_code == 200, response.text
    assert response.json()["trace_level"] == ["TIMESTAMPS"] and response.json()["trace_rate"] == "5"
    model = await traced.post("/v2/models/add_sub/trace/setting",
                              json={"trace_rate": "7", "trace_level": ["TENSORS", "TIMESTAMPS"]})
    assert model.json()["trace_rate"] == "7" and model.json()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert (await traced.get("/v2/trace/setting")).json()["trace_rate"] == "5"  # global unchanged
    await traced.post("/v2/trace/setting", json={"trace_count": "10"})
    assert (await traced.get("/v2/models/add_sub/trace/setting")).json()["trace_count"] == "10"
    cleared = await traced.post("/v2/models/add_sub/trace/setting", json={"trace_rate": None})
    assert cleared.json()["trace_rate"] == "5"  # back to the global value
    assert cleared.json()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    reset = await traced.post("/v2/trace/setting", json={"trace_rate": None, "trace_level": ["OFF"]})
    assert reset.json()["trace_rate"] == "1000" and reset.json()["trace_level"] == ["OFF"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
        ({"trace_count": "-5"}, "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"),
        ({"trace_rate": 5}, "attempt to access JSON non-string as string"),
        ({"trace_level": ["OFF", "TENSORS"]}, "Expect only one trace level 'OFF' is specified"),
        ({"trace_level": ["TIMESTAMPS"], "trace_rate": "0"},
         "Attempting to set invalid trace setting :sample rate must be non-zero"),
    ],
)
async def test_trace_settings_errors(traced: httpx.AsyncClient, body: dict, error: str) -> None:
    response = await traced.post("/v2/trace/setting", json=body)
    assert (response.status_code, response.json()) == (400, {"error": error})


async def test_trace_needs_a_file_and_a_known_model(client: httpx.AsyncClient) -> None:
    response = await client.post("/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"]})
    assert response.json() == {"error": "Attempting to set invalid trace setting :trace file name is not given"}
    response = await client.post("/v2/trace/setting", json={"trace_file": "/tmp/t.json"})
    assert response.status_code == 501
    missing = await client.get("/v2/models/nope/trace/setting")
    assert (missing.status_code, missing.json()) == (400, {"error": "Request for unknown model : nope"})


@pytest.fixture
def root_logging():
    """Restore the root logger after a test re-configures it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:], root.level = handlers, level


async def test_log_settings_take_effect_on_python_logging(tmp_path: Path, root_logging) -> None:
    log_file = tmp_path / "server.log"
    configure_logging(0)
    server = Server(ServerOptions(log_file=str(log_file), log_warning=False))
    server.settings.add_log_settings_observer(apply_log_settings)
    log = logging.getLogger("workbench.test")
    log.info("info one")
    log.warning("warning one")  # log_warning is off
    log.debug("debug one")  # not verbose
    await server.settings.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601", "log_info": False,
                                      "log_warning": True})
    log.info("info two")  # log_info is now off
    log.warning("warning two")
    lines = log_file.read_text().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["info one", "warning two"]
    assert lines[0].startswith("I") and " test_settings.py:" in lines[0]
    assert lines[1][:20].endswith("Z") and lines[1][20:23] == " W "  # 2024-01-02T15:04:05Z W
    await server.settings.update_log_settings({"log_info": True})
    log.debug("debug two")  # verbose level 1: debug lines are logged
    assert log_file.read_text().splitlines()[-1].endswith("] debug two")
