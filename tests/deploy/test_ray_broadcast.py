"""Control requests made cluster-wide (workbench.ray.broadcast over workbench.ray.cluster_state)
without Ray: real engines (explicit mode, one shared repository) as the replicas, the state
class called in-process where Ray would call its actor. The same code runs on a real cluster
in tests/production/test_ray_cluster_updates.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from workbench import Server, ServerOptions
from workbench.frontends.http import create_app
from workbench.ray.broadcast import ClusterIngress, combined, follow, replay
from workbench.ray.cluster_state import ClusterState, Outcome
from workbench.testing.reload import add_sub_config, add_sub_model_bytes, atomic_write

pytestmark = pytest.mark.slow


class Remote:
    """An in-process stand-in for a Ray actor handle: ``handle.method.remote(...)`` awaits
    the method of ``target``."""

    def __init__(self, target: ClusterState) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.target, name)

        class Call:
            @staticmethod
            def remote(*args: Any) -> Any:
                return method(*args)

        return Call


class Replica:
    """One engine, its v2 app behind :class:`ClusterIngress`, following the state."""

    def __init__(self, repo: Path, state: Remote, name: str) -> None:
        self.server = Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit"))
        self.state, self.name = state, name

    async def start(self) -> None:
        await self.server.start()
        self.app = create_app(self.server)
        applied, _ = await replay(self.app, self.state, self.name)
        self.task = asyncio.create_task(follow(self.app, self.state, self.name, applied, wait_s=0.2))
        self.ingress = ClusterIngress(self.app, self.state, self.name)
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.ingress), base_url="http://r")

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.client.aclose()
        await self.server.stop()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Path, Remote, list[Replica]]]:
    config = add_sub_config("add_sub", 8, 1) + "version_policy: { all {} }\n"
    atomic_write(tmp_path / "add_sub" / "config.pbtxt", config)
    for version in (1, 2):
        atomic_write(tmp_path / "add_sub" / str(version) / "model.onnx", add_sub_model_bytes(version))
    state = Remote(ClusterState())
    replicas = [Replica(tmp_path, state, name) for name in ("r1", "r2")]
    for replica in replicas:
        await replica.start()
    try:
        yield tmp_path, state, replicas
    finally:
        for replica in replicas:
            await replica.stop()


def ready(replica: Replica) -> list[int]:
    """add_sub's READY versions on ``replica``."""
    return sorted(int(v) for name, v, up in replica.server.model_readiness() if name == "add_sub" and up)


async def rollout_of(replica: Replica) -> Any:
    return (await replica.server.rollouts.get("add_sub"))["rollout"]


async def test_load_rollout_and_unload_reach_every_replica(cluster) -> None:
    _, _, (one, two) = cluster
    response = await one.client.post("/v2/repository/models/add_sub/load")
    assert response.status_code == 200, response.text
    assert ready(one) == ready(two) == [1, 2]
    response = await two.client.post("/v2/models/add_sub/rollout", json={"weights": {"1": 50, "2": 50}})
    assert response.status_code == 200, response.text
    for replica in (one, two):
        assert (await rollout_of(replica))["weights"] == {"1": 50.0, "2": 50.0}
    assert (await one.client.delete("/v2/models/add_sub/rollout")).status_code == 200
    assert await rollout_of(one) is None and await rollout_of(two) is None
    assert (await two.client.post("/v2/repository/models/add_sub/unload")).status_code == 200
    assert ready(one) == ready(two) == []


async def test_an_error_names_each_replica(cluster) -> None:
    _, _, (one, _) = cluster
    response = await one.client.post("/v2/repository/models/no_such_model/load")
    assert response.status_code == 400
    error = response.json()["error"]
    assert "replica r1: " in error and "replica r2: " in error, error


async def test_a_new_replica_replays_the_cluster_state(cluster) -> None:
    repo, state, (one, _) = cluster
    assert (await one.client.post("/v2/repository/models/add_sub/load")).status_code == 200
    body = {"weights": {"1": 30, "2": 70}}
    assert (await one.client.post("/v2/models/add_sub/rollout", json=body)).status_code == 200
    late = Replica(repo, state, "r3")
    await late.start()
    try:
        assert ready(late) == [1, 2]
        assert (await rollout_of(late))["weights"] == {"1": 30.0, "2": 70.0}
        # and it follows what comes after
        assert (await one.client.delete("/v2/models/add_sub/rollout")).status_code == 200
        assert await rollout_of(late) is None
    finally:
        await late.stop()


async def test_promote_and_rollback_across_replicas(cluster) -> None:
    _, _, (one, two) = cluster
    assert (await one.client.post("/v2/repository/models/add_sub/load")).status_code == 200
    body = {"weights": {"1": 50, "2": 50}, "candidate": 2}
    assert (await one.client.post("/v2/models/add_sub/rollout", json=body)).status_code == 200
    promoted = await one.client.post("/v2/models/add_sub/rollout/promote", json={})
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["promoted"] == 2
    for replica in (one, two):  # both serve version 2 only, no rollout left
        assert ready(replica) == [2], replica.name
        assert await rollout_of(replica) is None
    # the rollback is sent to the other replica: the one holding the promote applies it
    rolled = await two.client.post("/v2/models/add_sub/rollout/rollback", json={})
    assert rolled.status_code == 200, rolled.text
    for replica in (one, two):
        assert ready(replica) == [1, 2], replica.name
        assert (await rollout_of(replica))["weights"] == {"1": 50.0, "2": 50.0}


def test_combined_answers() -> None:
    ok: Outcome = {"status": 200, "body": b"{}", "content_type": "application/json"}
    bad: Outcome = {"status": 400, "body": b'{"error": "no"}', "content_type": "application/json"}
    assert combined({"a": ok, "b": ok}, []) == ok
    answer = combined({"a": ok, "b": bad}, ["c"])
    assert answer["status"] == 400
    assert answer["body"] == b'{"error":"replica b: no; replica c: no answer"}'
    assert combined({}, ["c"])["status"] == 503
