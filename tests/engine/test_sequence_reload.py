"""Live sequences across a reload, on the real ``accumulator`` sample (sequence batcher,
implicit state: each response is the running sum of the sequence's inputs).

A reloaded version keeps serving the sequences it holds until each ends (END, or idle
release); new sequences start on the new version; no request fails and no state is lost
(:mod:`workbench.engine.models.retiring`).
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.reload import atomic_write


def copy_accumulator(sample_repository: Path, repo: Path, idle_us: int | None = None) -> Path:
    """The sample accumulator in ``repo`` (writable), optionally with another idle timeout."""
    folder = repo / "accumulator"
    shutil.copytree(sample_repository / "accumulator", folder)
    if idle_us is not None:
        config = (folder / "config.pbtxt").read_text()
        atomic_write(folder / "config.pbtxt", config.replace(
            "max_sequence_idle_microseconds: 5000000", f"max_sequence_idle_microseconds: {idle_us}"))
    return folder


def explicit(repo: Path) -> Server:
    return Server(ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                                load_model=["accumulator"]))


async def send(server: Server, corr: int, value: float, start: bool = False,
               end: bool = False) -> tuple[float, str]:
    """One request of sequence ``corr``; returns (running sum, version that answered)."""
    params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end}
    data = np.full((1, 1), value, np.float32)
    response = await server.infer(
        InferenceRequest("accumulator", [Tensor("INPUT", "FP32", data)], parameters=params))
    return float(response.outputs[0].data[0, 0]), response.model_version


def set_instances(folder: Path, count: int) -> None:
    """A new instance count and a changed version file: what the next load does is a full
    reload (a count change alone updates the serving version in place instead, with its
    sequences: tests/engine/test_instance_update.py)."""
    config = (folder / "config.pbtxt").read_text()
    atomic_write(folder / "config.pbtxt", re.sub(r"count: \d+ ", f"count: {count} ", config))
    atomic_write(folder / "1" / "notes.txt", f"{count} instances")


async def test_reload_mid_sequence_keeps_every_sequence_state(sample_repository: Path, tmp_path: Path) -> None:
    folder = copy_accumulator(sample_repository, tmp_path)
    async with explicit(tmp_path) as server:
        corrs = range(1, 7)
        for corr in corrs:  # six live sequences: sum = corr after the first request
            assert (await send(server, corr, corr, start=True))[0] == corr
        await asyncio.gather(*(send(server, corr, 1.0) for corr in corrs))  # corr + 1

        set_instances(folder, 2)
        await server.load_model("accumulator")  # returns while the sequences are live
        assert (await server.model_config("accumulator")).instance_group[0].count == 2
        fresh = (await send(server, 100, 7.0, start=True))[0]  # a new sequence: new version

        sums = await asyncio.gather(*(send(server, corr, 10.0) for corr in corrs))
        assert [s for s, _ in sums] == [corr + 11.0 for corr in corrs]
        sums = await asyncio.gather(*(send(server, corr, 100.0, end=True) for corr in corrs))
        assert [s for s, _ in sums] == [corr + 111.0 for corr in corrs]
        assert fresh == 7.0 and (await send(server, 100, 1.0, end=True))[0] == 8.0

        await asyncio.wait_for(server.lifecycle.retiring.finished(), 30)  # the old version unloaded
        stats = (await server.statistics("accumulator"))["model_stats"]
        assert len(stats) == 1 and stats[0]["inference_stats"]["success"]["count"] == 2  # only seq 100


async def test_new_version_takes_new_sequences_while_the_old_one_finishes_its_own(
    sample_repository: Path, tmp_path: Path
) -> None:
    folder = copy_accumulator(sample_repository, tmp_path, idle_us=300_000)
    async with explicit(tmp_path) as server:
        assert await send(server, 1, 5.0, start=True) == (5.0, "1")
        assert await send(server, 3, 1.0, start=True) == (1.0, "1")
        shutil.copytree(folder / "1", folder / "2")  # latest 1: version 2 replaces version 1
        await server.load_model("accumulator")
        rows = {r["version"]: r["state"] for r in await server.repository_index() if "version" in r}
        assert rows == {"1": "UNLOADING", "2": "READY"}  # version 1 still serves sequence 1

        assert await send(server, 2, 1.0, start=True) == (1.0, "2")
        assert await send(server, 1, 5.0) == (10.0, "1")
        assert await send(server, 1, 5.0, end=True) == (15.0, "1")
        assert await send(server, 1, 3.0, start=True) == (3.0, "2")  # the same ID starts afresh
        assert await send(server, 3, 2.0, start=True) == (2.0, "2")  # restarted while live on 1:
        assert await send(server, 3, 2.0) == (4.0, "2")  # version 2 holds it now
        await asyncio.wait_for(server.lifecycle.retiring.finished(), 30)
        index = {r["version"]: (r["state"], r.get("reason")) for r in await server.repository_index()
                 if "version" in r}
        assert index == {"1": ("UNAVAILABLE", "unloaded"), "2": ("READY", None)}


async def test_sequence_left_idle_on_a_reloaded_version_is_released(
    sample_repository: Path, tmp_path: Path
) -> None:
    folder = copy_accumulator(sample_repository, tmp_path, idle_us=200_000)
    async with explicit(tmp_path) as server:
        await send(server, 9, 1.0, start=True)
        set_instances(folder, 2)
        await server.load_model("accumulator")
        await asyncio.wait_for(server.lifecycle.retiring.finished(), 30)  # after max_sequence_idle
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await send(server, 9, 1.0)  # released, as Triton releases an idle sequence


async def test_unload_and_stop_do_not_wait_for_live_sequences(sample_repository: Path, tmp_path: Path) -> None:
    folder = copy_accumulator(sample_repository, tmp_path, idle_us=120_000_000)  # 2 minutes
    async with explicit(tmp_path) as server:
        await send(server, 1, 1.0, start=True)
        set_instances(folder, 2)
        await server.load_model("accumulator")
        await asyncio.wait_for(server.unload_model("accumulator"), 60)
        assert not server.lifecycle.retiring
        [row] = [r for r in await server.repository_index() if r["name"] == "accumulator"]
        assert (row["state"], row["reason"]) == ("UNAVAILABLE", "unloaded")

        await server.load_model("accumulator")
        await send(server, 2, 1.0, start=True)
        set_instances(folder, 1)
        await server.load_model("accumulator")
        assert server.lifecycle.retiring
        await asyncio.wait_for(server.stop(), 60)
        assert not server.lifecycle.retiring


async def test_sequence_through_an_ensemble_continues_across_a_reload(tmp_path: Path) -> None:
    """Ensemble steps carry the sequence flags, and are routed like client requests."""
    repo = build_ensemble_repository(tmp_path)
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=["ens_sequence"])
    async with Server(options) as server:

        async def step(value: float, start: bool = False, end: bool = False) -> float:
            params = {"sequence_id": "abc", "sequence_start": start, "sequence_end": end}
            data = np.full((1, 1), value, np.float32)
            response = await server.infer(
                InferenceRequest("ens_sequence", [Tensor("IN", "FP32", data)], parameters=params))
            return float(response.outputs[0].data[0, 0])

        assert await step(2.0, start=True) == 2.0
        set_instances(repo / "accumulator", 2)
        await server.load_model("accumulator")
        assert await step(3.0) == 5.0
        assert await step(4.0, end=True) == 9.0
        await asyncio.wait_for(server.lifecycle.retiring.finished(), 30)
        assert (await server.model_ready("ens_sequence"))


async def test_poll_reload_mid_sequence_keeps_its_state(sample_repository: Path, tmp_path: Path) -> None:
    folder = copy_accumulator(sample_repository, tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0)
    async with Server(options) as server:
        assert (await send(server, 4, 4.0, start=True))[0] == 4.0
        set_instances(folder, 2)
        await server.poll_repository()
        assert (await server.model_config("accumulator")).instance_group[0].count == 2
        assert (await send(server, 4, 4.0))[0] == 8.0
        assert (await send(server, 4, 4.0, end=True))[0] == 12.0
        await asyncio.wait_for(server.lifecycle.retiring.finished(), 30)
