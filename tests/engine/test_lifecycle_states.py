"""Model states through a load and a version removal (Triton's LOADING / UNLOADING), loads
off the event loop (a slow load never blocks health checks or other models), and start-up
with failing models (``exit_on_error``).

The slow load and the slow executions are gates of the fake backend (the real engine and
schedulers run around it): no test depends on timing.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Literal

import pytest

from workbench import (
    ModelLoadError,
    ModelNotReady,
    ModelReadyState,
    Server,
    ServerOptions,
    Unavailable,
)
from workbench.common.results import RepositoryIndexRow
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, fake_request, write_fake_model
from workbench.testing.reload import atomic_write, write_add_sub

ControlMode = Literal["none", "poll", "explicit"]  # ServerOptions.model_control_mode


pytestmark = pytest.mark.usefixtures("fake_backend")



async def rows(server: Server, name: str) -> list[RepositoryIndexRow]:
    return [r for r in await server.repository_index() if r["name"] == name]


async def until(predicate, what: str, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = predicate()
        if await result if asyncio.iscoroutine(result) else result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def wait_loading() -> None:
    """Until a fake instance load waits on the closed load gate (on a model-load thread)."""
    assert await asyncio.to_thread(BEHAVIOUR.loading.wait, 30), "no load started"


async def assert_serving_while_loading(server: Server, http) -> None:
    """Health, metadata and another model's inference answer while a load is blocked."""
    assert (await http.get("/v2/health/live")).status_code == 200
    assert (await http.get("/v2/health/ready")).status_code == 200
    response = await server.infer(fake_request("fast", 3.0))
    assert response.outputs[0].data[0, 0] == 3.0
    reply = await http.post("/v2/models/fast/infer", json={
        "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [4.0]}]})
    assert reply.status_code == 200 and reply.json()["outputs"][0]["data"] == [4.0]
    assert (await http.get("/v2/models/slow/ready")).status_code != 200


async def test_slow_explicit_load_blocks_nothing_and_shows_loading(tmp_path: Path, asgi_client) -> None:
    write_fake_model(tmp_path, "fast", count=1)
    write_fake_model(tmp_path, "slow", count=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["fast"])
    async with Server(options) as server, asgi_client(server) as http:
        BEHAVIOUR.load_gate.clear()
        load = asyncio.ensure_future(server.load_model("slow"))
        await wait_loading()
        await until(lambda: rows(server, "slow"), "the index row")

        async def loading_row() -> bool:
            return await rows(server, "slow") == [{"name": "slow", "version": "1", "state": "LOADING"}]

        await until(loading_row, "slow version 1 LOADING")
        reply = await http.post("/v2/repository/index")
        assert {"name": "slow", "version": "1", "state": "LOADING"} in reply.json()
        await assert_serving_while_loading(server, http)
        assert not load.done()
        BEHAVIOUR.load_gate.set()
        await load
        assert await rows(server, "slow") == [{"name": "slow", "version": "1", "state": "READY"}]
        assert (await server.infer(fake_request("slow", 5.0))).outputs[0].data[0, 0] == 5.0


async def test_slow_load_in_poll_mode_blocks_nothing(tmp_path: Path, asgi_client) -> None:
    write_fake_model(tmp_path, "fast", count=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0.05)
    async with Server(options) as server, asgi_client(server) as http:
        BEHAVIOUR.load_gate.clear()
        write_fake_model(tmp_path, "slow", count=1)  # the next poll finds it and loads it
        await wait_loading()

        async def loading_row() -> bool:
            return await rows(server, "slow") == [{"name": "slow", "version": "1", "state": "LOADING"}]

        await until(loading_row, "slow version 1 LOADING")
        await assert_serving_while_loading(server, http)
        BEHAVIOUR.load_gate.set()

        async def ready() -> bool:
            return await rows(server, "slow") == [{"name": "slow", "version": "1", "state": "READY"}]

        await until(ready, "slow READY")


def versioned_fake(repo: Path, policy: str = "all {}") -> Path:
    """Fake model ``versioned``, versions 1 and 2, one instance each, no batching queue
    delay, version policy ``policy``."""
    folder = write_fake_model(repo, "versioned", count=1, extra=f"version_policy: {{ {policy} }}\n")
    (folder / "2").mkdir()
    return folder


async def pinned_requests_queue_on_version_1(server: Server) -> list[asyncio.Future]:
    """Three requests pinned to version 1 while executions are blocked: one executes, two
    wait in its queue."""
    BEHAVIOUR.gate.clear()
    pending: list[asyncio.Future] = [asyncio.ensure_future(server.infer(fake_request("versioned", float(i), "1")))
               for i in (10, 11, 12)]
    await until(lambda: BEHAVIOUR.executions, "an execution")
    return pending


async def drains_then_unloaded(server: Server, pending: list[asyncio.Future]) -> None:
    """Version 1 is UNLOADING (no new request reaches it) until its requests finish, then
    UNAVAILABLE "unloaded"; every request already queued on it succeeds."""
    assert await rows(server, "versioned") == [
        {"name": "versioned", "version": "1", "state": "UNLOADING"},
        {"name": "versioned", "version": "2", "state": "READY"},
    ]
    with pytest.raises(ModelNotReady, match=r"^Request for unknown model: 'versioned' version 1 "
                                            r"is not at ready state$"):
        await server.infer(fake_request("versioned", 1.0, "1"))
    assert not any(p.done() for p in pending)
    BEHAVIOUR.gate.set()
    responses = await asyncio.gather(*pending)
    assert [(r.model_version, float(r.outputs[0].data[0, 0])) for r in responses] == [
        ("1", 10.0), ("1", 11.0), ("1", 12.0)]

    async def unloaded() -> bool:
        return (await rows(server, "versioned"))[0] == {
            "name": "versioned", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}

    await until(unloaded, "version 1 unloaded")
    assert (await server.infer(fake_request("versioned", 2.0))).model_version == "2"


async def test_poll_removed_version_drains_its_queued_requests(tmp_path: Path) -> None:
    folder = versioned_fake(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0)  # polls only when the test asks
    async with Server(options) as server:
        version_2 = server.lifecycle.models["versioned"].versions[2].model
        pending = await pinned_requests_queue_on_version_1(server)
        shutil.rmtree(folder / "1")
        await server.poll_repository()
        await drains_then_unloaded(server, pending)
        assert server.lifecycle.models["versioned"].versions[2].model is version_2  # untouched


async def test_explicit_reload_with_a_new_version_policy_drains_the_old_version(tmp_path: Path) -> None:
    folder = versioned_fake(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["versioned"])
    async with Server(options) as server:
        pending = await pinned_requests_queue_on_version_1(server)
        config = FAKE_CONFIG.format(name="versioned", count=1, group="")
        atomic_write(folder / "config.pbtxt", config + "version_policy: { specific { versions: [2] } }\n")
        load = asyncio.ensure_future(server.load_model("versioned"))  # returns once 1 drained

        async def switched() -> bool:
            return [r["state"] for r in await rows(server, "versioned")] == ["UNLOADING", "READY"]

        await until(switched, "version 2 serving")
        assert not load.done()
        await drains_then_unloaded(server, pending)
        await load


async def test_unload_shows_unloading_while_draining(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "fast", count=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["fast"])
    async with Server(options) as server:
        BEHAVIOUR.gate.clear()
        request = asyncio.ensure_future(server.infer(fake_request("fast", 7.0)))
        await until(lambda: BEHAVIOUR.executions, "an execution")
        unload = asyncio.ensure_future(server.unload_model("fast"))

        async def unloading() -> bool:
            return await rows(server, "fast") == [{"name": "fast", "version": "1", "state": "UNLOADING"}]

        await until(unloading, "UNLOADING")
        BEHAVIOUR.gate.set()
        assert (await request).outputs[0].data[0, 0] == 7.0
        await unload
        assert await rows(server, "fast") == [
            {"name": "fast", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]


# ------------------------------------------------------------------ start-up failures
def broken_next_to_good(repo: Path) -> Path:
    write_add_sub(repo)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('name: "broken"\nbackend: "onnxruntime"\nmax_batch_size: [\n')
    return repo


def test_exit_on_error_defaults_are_tritonservers() -> None:
    options = ServerOptions()
    assert options.exit_on_error is True  # tritonserver --exit-on-error default
    assert options.repository_poll_secs == 15  # tritonserver --repository-poll-secs default


@pytest.mark.parametrize("mode", ["none", "poll", "explicit"])
async def test_startup_failure_exits_with_exit_on_error(tmp_path: Path, mode: ControlMode) -> None:
    broken_next_to_good(tmp_path)
    server = Server(ServerOptions(model_repository=[str(tmp_path)], model_control_mode=mode,
                                  load_model=["*"]))
    with pytest.raises(ModelLoadError, match=r"^failed to load all models: 'broken': "):
        await server.start()
    assert not server.is_live()


@pytest.mark.parametrize("mode", ["none", "poll"])
async def test_startup_failure_serves_the_others_without_exit_on_error(tmp_path: Path, mode: ControlMode) -> None:
    broken_next_to_good(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode=mode,
                            exit_on_error=False)
    async with Server(options) as server:
        assert server.is_live()
        broken = await rows(server, "broken")
        assert broken[0]["state"] == "UNAVAILABLE" and "config.pbtxt" in broken[0]["reason"]
        assert (await rows(server, "add_sub"))[0]["state"] == "READY"


async def test_poll_only_in_poll_mode(server: Server) -> None:
    with pytest.raises(Unavailable, match=r"^polling is disabled$"):
        await server.poll_repository()


async def test_the_lifecycle_read_api_follows_load_and_unload(tmp_path: Path) -> None:
    """``server.lifecycle``'s read API (what tests and tools read instead of private state)
    reports each version's state, the entry and readiness through a load and an unload."""
    write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        lifecycle = server.lifecycle
        assert lifecycle.entry("add_sub") is None and lifecycle.version_states("add_sub") == {}
        assert not lifecycle.is_ready("add_sub")
        await server.load_model("add_sub")
        assert lifecycle.version_states("add_sub") == {1: ModelReadyState.READY}
        entry = lifecycle.entry("add_sub")
        assert entry is not None and lifecycle.models["add_sub"] is entry
        assert lifecycle.resolve("add_sub", "1") is entry.latest_ready
        assert lifecycle.is_ready("add_sub", "1") and not lifecycle.is_ready("add_sub", "2")
        assert lifecycle.dependencies["add_sub"] == () and not lifecycle.retiring
        await server.unload_model("add_sub")
        assert lifecycle.version_states("add_sub") == {1: ModelReadyState.UNAVAILABLE}
        assert not lifecycle.is_ready("add_sub") and not lifecycle.any_failed()
    assert lifecycle.stopping
