"""``--model-control-mode poll``: what a rescan sees (snapshots) and what it applies (new,
removed, changed models and versions, broken changes, ensembles), on real ONNX models.

Most tests poll on demand (``repository_poll_secs=0``, ``Server.poll_repository()``), the
way the periodic poll does, so that each step is deterministic.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, ModelNotFound, Server, ServerOptions, Tensor
from workbench.engine.manager.poller import diff_snapshots
from workbench.hosts.cli import build_parser, options_from_args
from workbench.repository.repository import ModelRepository
from workbench.repository.snapshot import snapshot_repository
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.reload import (
    add_sub_config,
    add_sub_model_bytes,
    atomic_write,
    write_add_sub,
)


def poll_server(repo: Path, **options) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="poll",
                                repository_poll_secs=0, **options))


def request(name: str = "add_sub", value: float = 1.0, version: str = "") -> InferenceRequest:
    a = np.full((1, 16), value, np.float32)
    return InferenceRequest(name, [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)],
                            model_version=version)


async def index(server: Server) -> dict[str, list[tuple[str, str, str]]]:
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for row in await server.repository_index():
        rows.setdefault(row["name"], []).append(
            (row.get("version", ""), row.get("state", ""), row.get("reason", "")))
    return rows


# ------------------------------------------------------------------ snapshots
def test_snapshot_sees_content_not_touch_and_ignores_hidden_files(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    repository = ModelRepository([tmp_path])
    first = snapshot_repository(repository)
    os.utime(folder / "config.pbtxt", ns=(1, 1))  # touched: same content
    (folder / ".config.pbtxt.swp").write_text("editor swap file")
    (folder / "1" / ".partial").write_text("a temporary file")
    assert snapshot_repository(repository) == first
    assert not diff_snapshots(first, snapshot_repository(repository))

    atomic_write(folder / "1" / "model.onnx", add_sub_model_bytes(1))
    (folder / "2").mkdir()
    changes = diff_snapshots(first, snapshot_repository(repository))
    assert changes.versions == {"add_sub": frozenset()} and not changes.reload

    second = snapshot_repository(repository)
    atomic_write(folder / "config.pbtxt", add_sub_config("add_sub", 16, 1))
    write_add_sub(tmp_path, "other")
    shutil.rmtree(folder / "2")
    changes = diff_snapshots(second, snapshot_repository(repository))
    assert changes.reload == ["add_sub"] and changes.added == ["other"] and not changes.versions


def test_cli_poll_flags() -> None:
    args = build_parser().parse_args(["serve", "--model-repository=/m", "--model-control-mode=poll",
                                      "--repository-poll-secs=2.5"])
    options = options_from_args(args)
    assert options.model_control_mode == "poll" and options.repository_poll_secs == 2.5
    default = options_from_args(build_parser().parse_args(["serve", "--model-repository=/m"]))
    assert default.repository_poll_secs == 15


# ------------------------------------------------------------------ what a poll applies
async def test_poll_adds_reloads_and_removes_models(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    async with poll_server(tmp_path) as server:
        await server.poll_repository()  # nothing changed: nothing happens
        serving = server.lifecycle.models["add_sub"].latest_ready

        write_add_sub(tmp_path, "second")
        await server.poll_repository()
        assert (await index(server))["second"] == [("1", "READY", "")]
        assert (await server.infer(request("second", 2.0))).outputs[0].data[0, 0] == 4.0
        assert server.lifecycle.models["add_sub"].latest_ready is serving  # unchanged model untouched

        atomic_write(folder / "config.pbtxt", add_sub_config("add_sub", 16, 1))
        await server.poll_repository()
        config = await server.model_config("add_sub")
        assert config.max_batch_size == 16 and config.instance_group[0].count == 1

        shutil.rmtree(tmp_path / "second")
        await server.poll_repository()
        assert "second" not in await index(server)  # Triton's index lists the folders only
        # Triton keeps the deleted model without versions (issue 33 L1, L0_lifecycle
        # test_dynamic_file_delete); before: "'second' is not found"
        with pytest.raises(ModelNotFound, match="'second' has no available versions"):
            await server.infer(request("second"))
        assert not server.lifecycle.is_ready("second")
        assert all(name != "second" for name, _, _ in server.model_readiness())  # nor the metric

        write_add_sub(tmp_path, "second")  # back again: loads and serves
        await server.poll_repository()
        assert (await index(server))["second"] == [("1", "READY", "")]
        assert (await server.infer(request("second", 2.0))).outputs[0].data[0, 0] == 4.0


async def test_poll_model_copied_into_a_second_repository_unloads_as_a_duplicate(tmp_path: Path) -> None:
    """Issue 33 L2 in poll mode (L0_lifecycle test_multiple_model_repository_polling): a
    model found in two repositories is left out of the poll, as Triton's, so it unloads;
    the index lists it UNAVAILABLE "model appears in two or more repositories", and it loads
    again once only one copy is left. Before, it stayed READY (a failed reload)."""
    first, second = tmp_path / "a", tmp_path / "b"
    write_add_sub(first)
    second.mkdir()
    server = Server(ServerOptions(model_repository=[str(first), str(second)],
                                  model_control_mode="poll", repository_poll_secs=0))
    async with server:
        write_add_sub(second)
        await server.poll_repository()
        assert (await index(server))["add_sub"] == [
            ("", "UNAVAILABLE", "model appears in two or more repositories")]
        assert not server.lifecycle.is_ready("add_sub")
        with pytest.raises(ModelNotFound, match="'add_sub' has no available versions"):
            await server.infer(request())
        assert await server.repository_index(ready=True) == []

        shutil.rmtree(first / "add_sub")
        await server.poll_repository()
        assert (await index(server))["add_sub"] == [("1", "READY", "")]
        assert (await server.infer(request(value=2.0))).outputs[0].data[0, 0] == 4.0


async def test_poll_new_version_serves_and_the_old_one_unloads(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)  # no version policy: latest 1
    async with poll_server(tmp_path) as server:
        atomic_write(folder / "2" / "model.onnx", add_sub_model_bytes(2))
        await server.poll_repository()
        assert (await server.infer(request())).model_version == "2"

        async def unloaded() -> bool:
            return (await index(server))["add_sub"] == [
                ("1", "UNAVAILABLE", "unloaded"), ("2", "READY", "")]

        for _ in range(3000):
            if await unloaded():
                break
            await asyncio.sleep(0.01)
        assert await unloaded()


async def test_poll_broken_change_keeps_last_good_versions_serving(tmp_path: Path) -> None:
    folder = write_add_sub(tmp_path)
    async with poll_server(tmp_path) as server:
        serving = server.lifecycle.models["add_sub"].latest_ready
        broken = add_sub_config("add_sub", 8, 2).replace("max_batch_size: 8", "max_batch_size: -3")
        atomic_write(folder / "config.pbtxt", broken)
        await server.poll_repository()
        [(version, state, reason)] = (await index(server))["add_sub"]
        assert (version, state) == ("1", "READY")
        assert "'max_batch_size' must be non-negative" in reason
        assert (await server.infer(request())).outputs[0].data[0, 0] == 2.0
        assert server.lifecycle.models["add_sub"].latest_ready is serving
        assert server.is_ready()  # still serving: not a failed model

        atomic_write(folder / "1" / "model.onnx", b"not an onnx file")  # broken file too
        atomic_write(folder / "config.pbtxt", add_sub_config("add_sub", 4, 1))  # config fixed
        await server.poll_repository()
        [(version, state, reason)] = (await index(server))["add_sub"]
        assert state == "READY" and "version 1 is at UNAVAILABLE state" in reason
        assert (await server.model_config("add_sub")).max_batch_size == 8  # still the old one

        atomic_write(folder / "1" / "model.onnx", add_sub_model_bytes(3))  # file fixed
        await server.poll_repository()
        assert (await index(server))["add_sub"] == [("1", "READY", "")]
        assert (await server.model_config("add_sub")).max_batch_size == 4


async def test_poll_model_never_good_is_unavailable_with_reason(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    async with poll_server(tmp_path) as server:
        folder = write_add_sub(tmp_path, "late")
        atomic_write(folder / "1" / "model.onnx", b"garbage")
        await server.poll_repository()
        [(version, state, reason)] = (await index(server))["late"]
        assert (version, state) == ("1", "UNAVAILABLE") and reason
        with pytest.raises(ModelNotFound, match="'late' has no available versions"):
            await server.infer(request("late"))
        await server.poll_repository()  # unchanged: not retried, same state
        assert (await index(server))["late"] == [(version, state, reason)]
        atomic_write(folder / "1" / "model.onnx", add_sub_model_bytes(1))
        await server.poll_repository()
        assert (await index(server))["late"] == [("1", "READY", "")]


async def test_poll_loads_a_new_ensemble_after_its_new_composing_models(tmp_path: Path) -> None:
    full = build_ensemble_repository(tmp_path / "full")
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(full / "add_sub", repo / "add_sub")
    async with poll_server(repo) as server:
        for name in ("ens_chain", "identity16"):  # the ensemble and a composing model it needs
            shutil.copytree(full / name, repo / name)
        await server.poll_repository()
        rows = await index(server)
        assert rows["ens_chain"] == [("1", "READY", "")] and rows["identity16"] == [("1", "READY", "")]
        a = np.full((1, 16), 3.0, np.float32)
        ensemble = InferenceRequest("ens_chain", [Tensor("IN0", "FP32", a), Tensor("IN1", "FP32", a)])
        assert (await server.infer(ensemble)).outputs[0].data[0, 0] == 6.0

        # a changed composing model reloads under ensemble traffic; the ensemble keeps serving
        pending = [asyncio.ensure_future(server.infer(ensemble)) for _ in range(40)]
        config = (repo / "identity16" / "config.pbtxt").read_text().replace("count: 2", "count: 1")
        atomic_write(repo / "identity16" / "config.pbtxt", config)
        await server.poll_repository()
        pending += [asyncio.ensure_future(server.infer(ensemble)) for _ in range(40)]
        for response in await asyncio.gather(*pending):
            assert response.outputs[0].data[0, 0] == 6.0
        assert (await server.model_config("identity16")).instance_group[0].count == 1
        assert (await index(server))["ens_chain"] == [("1", "READY", "")]


async def test_periodic_poll_applies_changes(tmp_path: Path) -> None:
    write_add_sub(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0.05)
    async with Server(options) as server:
        write_add_sub(tmp_path, "second")
        for _ in range(3000):
            if await server.model_ready("second") if "second" in server.lifecycle.models else False:
                break
            await asyncio.sleep(0.01)
        assert await server.model_ready("second")
