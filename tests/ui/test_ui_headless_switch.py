"""The Headless tab's switch (issue 32 part 3), driven through its buttons: on an engine whose
v2 ports this process serves, a click hands them to a headless ``workbench serve`` and the tab
shows the state, the steps and the command line it ran (with a systemd unit); a second click
takes them back. A notebook's engine serves no v2 ports: the tab says why there is no switch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from workbench import ServerOptions
from workbench.jupyter.host import RUNNING, EngineHost
from workbench.testing.reload import write_add_sub
from workbench.ui.headless.headless_view import HeadlessView
from workbench.ui.shared.store import EngineStore


async def test_the_switch_buttons_show_state_steps_and_command(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], http_address="127.0.0.1",
                            grpc_address="127.0.0.1", metrics_address="127.0.0.1", http_port=0,
                            grpc_port=0, metrics_port=0, grpc_max_connection_age_ms=2000)
    host = EngineHost(options, open_ports=True)
    await host.start()
    assert host.state == RUNNING and host.server is not None
    try:
        view = HeadlessView(EngineStore(host.server))
        assert view.switch_state.object.startswith("**in-process**")
        assert view.back_button.disabled and not view.switch_button.disabled
        view.switch_button.clicks += 1
        await asyncio.sleep(0)
        await view.store.settle()
        assert "**headless**" in view.switch_state.object, view.switch_error.object
        assert "served by the headless `workbench serve` (pid" in view.switch_state.object
        http = host.status()["ports"]["http"]
        assert f"--http-port={http} --reuse-http-port=true" in view.switch_command.object
        assert "[Service]\nExecStart=" in view.switch_command.object
        assert view.switch_button.disabled and not view.back_button.disabled
        view.back_button.clicks += 1
        await asyncio.sleep(0)
        await view.store.settle()
        assert view.switch_state.object.startswith("**in-process**"), view.switch_error.object
        assert "workbench serve drained and exited (0)" in view.switch_state.object
    finally:
        await host.stop()


def test_a_notebook_engine_has_no_switch(store: EngineStore) -> None:
    view = HeadlessView(store)
    assert view.switch is None and view.switch_button.disabled and view.back_button.disabled
    assert "needs the v2 ports served by this process" in view.switch_state.object


async def test_a_headless_child_that_dies_shows_and_the_switch_back_serves_again(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], http_address="127.0.0.1",
                            allow_grpc=False, allow_metrics=False, http_port=0)
    host = EngineHost(options, open_ports=True)
    await host.start()
    assert host.switch is not None and host.server is not None
    try:
        view = HeadlessView(EngineStore(host.server))
        await view.to_headless()
        child = host.switch.child
        assert child is not None
        child.process.kill()
        await asyncio.to_thread(child.process.wait)
        view.tick()
        assert "but `workbench serve` exited (-9)" in view.switch_state.object
        assert not view.back_button.disabled
        await view.switch_back()
        assert view.switch_state.object.startswith("**in-process**"), view.switch_error.object
        assert "workbench serve had exited (-9)" in view.switch_state.object
        port = host.status()["ports"]["http"]
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/v2/health/ready")).status_code == 200
    finally:
        await host.stop()
