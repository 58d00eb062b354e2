"""The switch to headless under load: a ``workbench serve`` child takes the v2 ports of an
engine hosted in this process (as the Jupyter server hosts it) and gives them back, while
HTTP (fresh and keep-alive connections) and gRPC (one channel, fresh channels) clients send
infer requests without pause: not one request fails and not one connection is refused,
and the child really served while headless."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import httpx
import pytest

from workbench import ServerOptions
from workbench.jupyter.host import FAILED, RUNNING, EngineHost
from workbench.serving.sockets import bind_socket
from workbench.serving.switch import HEADLESS, IN_PROCESS, SwitchError, serve_command, switch_for, systemd_unit
from workbench.testing.log_records import watching
from workbench.testing.reload import write_add_sub
from workbench.testing.switch_load import SwitchLoad

#: the Jupyter extension's default: the v2 ports' repository API needs its key
KEY = "model-repository:x-ports-key=s3cret"


@pytest.fixture
async def host(tmp_path: Path, request: pytest.FixtureRequest):
    write_add_sub(tmp_path)
    restricted = [KEY] if getattr(request, "param", False) else []
    options = ServerOptions(model_repository=[str(tmp_path)], http_address="127.0.0.1",
                            grpc_address="127.0.0.1", metrics_address="127.0.0.1", http_port=0,
                            grpc_port=0, metrics_port=0, exit_timeout_secs=10,
                            grpc_max_connection_age_ms=2000, http_restricted_api=restricted,
                            grpc_restricted_protocol=restricted)
    host = EngineHost(options, open_ports=True)
    await host.start()
    assert host.state == RUNNING, host.error
    yield host
    await host.stop()


def successes(host: EngineHost) -> int:
    assert host.server is not None
    return sum(stats.inference_count for stats in host.server.model_statistics())


async def until(condition, timeout_s: float = 60.0) -> None:
    """Wait (polling the load's counters, which live in other threads) for ``condition``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_switch_to_headless_and_back_under_load_loses_nothing(host: EngineHost) -> None:
    switch = host.switch
    assert switch is not None and host.server is not None and switch_for(host.server) is switch
    ports = host.status()["ports"]
    load = SwitchLoad(ports["http"], ports["grpc"]).start()
    try:
        await until(lambda: all(c.requests >= 20 for c in load.counts.values()) and len(load.counts) == 4)
        await switch.to_headless()
        assert switch.state == HEADLESS and switch.child is not None and switch.child.running
        # the command line it ran serves the same ports, ready for a service file
        command = shlex.join(switch.command)
        assert f"--http-port={ports['http']}" in command and f"--grpc-port={ports['grpc']}" in command
        assert f"ExecStart={command}" in systemd_unit(switch.command, 10)
        # the child serves now: requests go on, the in-process engine gets none of them
        engine_before, sent_before = successes(host), load.requests()
        await until(lambda: load.requests() > sent_before + 200)
        assert successes(host) == engine_before
        assert host.status()["ports"] == ports

        status = await switch.back()
        assert status == 0 and switch.state == IN_PROCESS and switch.child is None
        engine_back, sent_back = successes(host), load.requests()
        await until(lambda: load.requests() > sent_back + 200)
        assert successes(host) > engine_back
    finally:
        total = await asyncio.to_thread(load.stop)
    assert (total.failed, total.refused) == (0, 0), total.errors
    assert all(counts.requests > 0 for counts in load.counts.values())


async def test_a_switch_that_cannot_start_keeps_the_engine_serving(host: EngineHost) -> None:
    switch = host.switch
    assert switch is not None
    switch.options = switch.options.model_copy(update={"model_repository": ["/nonexistent/repository"]})
    with pytest.raises(SwitchError, match="exited"):
        await switch.to_headless()
    assert switch.state == IN_PROCESS and switch.ports is not None and switch.child is None
    with pytest.raises(SwitchError, match="cannot switch back"):
        await switch.back()


@pytest.mark.parametrize("host", [True], indirect=True)
async def test_the_headless_child_keeps_the_ports_key_off_its_command_line(host: EngineHost) -> None:
    switch = host.switch
    assert switch is not None
    await switch.to_headless()  # refused before: the Jupyter extension's default restricts the ports
    try:
        assert "s3cret" not in shlex.join(switch.command)
        assert "EnvironmentFile=" in systemd_unit(switch.command, 10, key_file=True)
        index = f"http://127.0.0.1:{host.status()['ports']['http']}/v2/repository/index"
        async with httpx.AsyncClient() as client:
            assert (await client.post(index, json={})).status_code == 403
            assert (await client.post(index, json={}, headers={"x-ports-key": "s3cret"})).status_code == 200
    finally:
        assert await switch.back() == 0


async def test_a_port_held_by_another_shared_listener_still_fails_the_host(tmp_path: Path) -> None:
    """The engine binds with SO_REUSEPORT so that the switch can share its ports later, but a
    port another server already holds, even one that shares, fails as tritonserver's does."""
    write_add_sub(tmp_path)
    other = bind_socket("127.0.0.1", 0, reuse_port=True)
    with other:
        options = ServerOptions(model_repository=[str(tmp_path)], http_address="127.0.0.1",
                                http_port=other.getsockname()[1], allow_grpc=False, allow_metrics=False)
        with watching("workbench", "failed to start HTTP service") as records:
            host = EngineHost(options, open_ports=True)
            await host.start()
    assert host.state == FAILED and host.switch is None
    assert (f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{options.http_port}' "
            "already in use") in records.messages


def test_the_command_line_runs_from_any_folder_and_loads_each_model_once(tmp_path: Path, monkeypatch) -> None:
    """The line the page offers for a service file: a relative repository became absolute
    (systemd starts in /), a model with two versions is loaded once (it was repeated, and the
    unit's relative path found nothing: new-user trial)."""
    monkeypatch.chdir(tmp_path)
    options = ServerOptions(model_repository=["models", "s3://bucket/repo"], model_control_mode="explicit")
    command = serve_command(options, ["digits_mlp", "digits_mlp", "add_sub"])
    assert f"--model-repository={tmp_path / 'models'}" in command
    assert "--model-repository=s3://bucket/repo" in command
    assert [c for c in command if c.startswith("--load-model")] == ["--load-model=digits_mlp", "--load-model=add_sub"]
    assert "ports-key.env (mode 0600) holds" in systemd_unit(command, 10, key_file=True)
