"""A reload that changes only the instance count adds or removes just the difference (issue 19
item 13), as Triton's ``UpdateModelConfig`` does when ``ConfigChangeRequiresReload`` is false
and the version's files are unchanged: the unchanged instances keep serving, the version stays
READY (same statistics, same sequences), a removed instance finishes what it executes and is
then unloaded. Triton's ``L0_model_update`` counts the backend's instance initialize /
finalize calls; the fake backend counts them here (the real engine runs around it).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.base import InstanceSpec, ModelInstance
from workbench.backends.registry import register_backend
from workbench.stats.statistics import MemoryUsage
from workbench.testing.fake_backend import BEHAVIOUR, FAKE_CONFIG, FakeBackend, FakeInstance, write_fake_model
from workbench.testing.reload import atomic_write
from workbench.testing.sequence_probe import PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import until


@pytest.fixture(autouse=True)
def backends():
    register_backend("fake", FakeBackend)
    register_backend("seqprobe", ProbeBackend)
    BEHAVIOUR.reset()
    PROBE.reset()
    yield
    BEHAVIOUR.reset()
    PROBE.reset()


def fake_request(value: float) -> InferenceRequest:
    return InferenceRequest("m", [Tensor("INPUT0", "FP32", np.array([[value]], np.float32))])


def fake_json(count: int, max_batch_size: int = 4) -> str:
    """The fake model's config as a load ``config`` override."""
    return json.dumps({
        "name": "m", "backend": "fake", "max_batch_size": max_batch_size,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "instance_group": [{"count": count, "kind": "KIND_CPU"}],
    })


def totals() -> tuple[int, int]:
    return sum(BEHAVIOUR.initialized.values()), sum(BEHAVIOUR.finalized.values())


def states(server: Server) -> list[str]:
    return [state.value for state in server.lifecycle.version_states("m").values()]


async def successes(server: Server, model: str = "m") -> int:
    stats = (await server.statistics(model))["model_stats"]
    return sum(s["inference_stats"]["success"]["count"] for s in stats)


async def change_count(server: Server, apply, count: int, inflight: int) -> None:
    """Hold ``inflight`` requests executing, apply the count change (``apply(count)``), check
    the version stays READY while the change waits for them, then let them finish: each one
    succeeds."""
    BEHAVIOUR.gate.clear()
    BEHAVIOUR.batches.clear()
    requests = [asyncio.ensure_future(server.infer(fake_request(float(i)))) for i in range(inflight)]
    await BEHAVIOUR.executing(inflight)
    change = asyncio.ensure_future(apply(count))
    seen: set[str] = set()
    for _ in range(50):  # READY while the change is under way
        seen.update(states(server))
        if change.done() or seen != {"READY"}:
            break
        await asyncio.sleep(0)
    BEHAVIOUR.gate.set()
    await change
    seen.update(states(server))
    assert seen == {"READY"}
    answers = await asyncio.gather(*requests)
    assert [a.outputs[0].data[0, 0] for a in answers] == [float(i) for i in range(inflight)]


async def test_explicit_count_change_adds_and_removes_only_the_difference(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=2)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["m"])
    async with Server(options) as server:
        assert totals() == (2, 0)
        model = server.lifecycle.resolve("m", "1")

        async def load(count: int) -> None:
            await server.load_model("m", config=fake_json(count))

        await change_count(server, load, 4, inflight=2)
        assert totals() == (4, 0)  # +2: the two serving instances kept
        assert BEHAVIOUR.initialized == {f"m_0_{i}": 1 for i in range(4)}
        assert (await server.model_config("m")).instance_group[0].count == 4
        BEHAVIOUR.barrier = threading.Barrier(4, timeout=5)  # 4 execute at once
        await asyncio.gather(*(server.infer(fake_request(9.0)) for _ in range(4)))
        BEHAVIOUR.barrier = None

        await change_count(server, load, 1, inflight=4)
        assert totals() == (4, 3)  # -3: once the load returns they are finalized
        assert BEHAVIOUR.finalized == {"m_0_1": 1, "m_0_2": 1, "m_0_3": 1}
        assert (await server.infer(fake_request(5.0))).outputs[0].data[0, 0] == 5.0
        assert BEHAVIOUR.executions["m_0_0"] >= 1

        await server.load_model("m", config=fake_json(1))  # nothing changed: nothing re-created
        assert totals() == (4, 3)
        assert server.lifecycle.resolve("m", "1") is model  # the same version throughout
        assert await successes(server) == 2 + 4 + 4 + 1  # statistics continued
        rows = [r for r in await server.repository_index() if r["name"] == "m"]
        assert rows == [{"name": "m", "version": "1", "state": "READY"}]
    assert totals() == (4, 4)


async def test_poll_count_change_adds_and_removes_only_the_difference(tmp_path: Path) -> None:
    folder = write_fake_model(tmp_path, "m", count=2)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="poll",
                            repository_poll_secs=0)
    async with Server(options) as server:
        assert totals() == (2, 0)
        model = server.lifecycle.resolve("m", "1")

        async def rewrite(count: int) -> None:
            atomic_write(folder / "config.pbtxt", FAKE_CONFIG.format(name="m", count=count, group=""))
            await server.poll_repository()

        await change_count(server, rewrite, 4, inflight=2)
        assert totals() == (4, 0)
        await change_count(server, rewrite, 1, inflight=4)
        await until(lambda: totals()[1] == 3, "the 3 removed instances finalized")
        assert totals() == (4, 3)
        assert server.lifecycle.resolve("m", "1") is model
        assert (await server.model_config("m")).instance_group[0].count == 1
        assert await successes(server) == 2 + 4


async def test_another_field_changed_recreates_every_instance(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=2)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["m"])
    async with Server(options) as server:
        await server.load_model("m", config=fake_json(3, max_batch_size=8))
        assert totals() == (5, 2)  # all re-created, the old ones unloaded
        assert (await server.model_config("m")).max_batch_size == 8


async def test_changed_version_files_recreate_every_instance(tmp_path: Path) -> None:
    folder = write_fake_model(tmp_path, "m", count=2)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["m"])
    async with Server(options) as server:
        (folder / "1" / "weights.bin").write_bytes(b"new weights")
        await server.load_model("m", config=fake_json(3))
        assert totals() == (5, 2)


async def test_live_sequence_keeps_its_state_across_a_count_change(
    sample_repository: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "accumulator"
    shutil.copytree(sample_repository / "accumulator", folder)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["accumulator"])

    async def send(corr: int, value: float, start: bool = False, end: bool = False) -> float:
        params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end}
        response = await server.infer(InferenceRequest(
            "accumulator", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))],
            parameters=params))
        return float(response.outputs[0].data[0, 0])

    async with Server(options) as server:
        model = server.lifecycle.resolve("accumulator", "1")
        assert await send(1, 5.0, start=True) == 5.0
        config = (folder / "config.pbtxt").read_text()
        atomic_write(folder / "config.pbtxt", config.replace("count: 1 ", "count: 3 "))
        await server.load_model("accumulator")
        assert not server.lifecycle.retiring  # nothing retires: the version was updated
        assert server.lifecycle.resolve("accumulator", "1") is model
        assert await send(1, 2.0) == 7.0
        atomic_write(folder / "config.pbtxt", config)  # back to 1
        await server.load_model("accumulator")
        assert await send(1, 3.0, end=True) == 10.0
        assert await successes(server, "accumulator") == 3


async def test_sequence_on_a_removed_instance_finishes_there(tmp_path: Path) -> None:
    """Triton's sequence batcher: the slots of a removed instance are erased as their
    sequences end; until then those sequences keep executing on it. New sequences wait for
    a slot of the instances that stay."""
    write_probe_model(tmp_path, "probe", count=2, max_batch_size=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["probe"])

    async def send(corr: int, value: float, start: bool = False, end: bool = False) -> None:
        params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end}
        await server.infer(InferenceRequest(
            "probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))], parameters=params))

    def ran(value: float) -> str:
        return next(name for name, rows in PROBE.executions if any(r.value == value for r in rows))

    async with Server(options) as server:
        await send(1, 1.0, start=True)  # slot of instance probe_0_0
        await send(2, 2.0, start=True)  # slot of instance probe_0_1
        assert (ran(1.0), ran(2.0)) == ("probe_0_0", "probe_0_1")
        config = (tmp_path / "probe" / "config.pbtxt").read_text()
        atomic_write(tmp_path / "probe" / "config.pbtxt", config.replace("count: 2 ", "count: 1 "))
        await server.load_model("probe")  # returns while sequence 2 still lives on probe_0_1
        assert not server.lifecycle.retiring
        await send(2, 3.0)
        assert ran(3.0) == "probe_0_1"  # where its state is
        await send(2, 4.0, end=True)  # its slot is erased, not handed to a new sequence
        third = asyncio.ensure_future(send(3, 5.0, start=True))
        await send(1, 6.0, end=True)
        await third
        assert ran(5.0) == "probe_0_0"
        assert await successes(server, "probe") == 6


async def test_backlogged_sequence_takes_a_slot_of_an_added_instance(tmp_path: Path) -> None:
    write_probe_model(tmp_path, "probe", count=1, max_batch_size=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["probe"])

    async def send(corr: int, value: float, start: bool = False, end: bool = False) -> None:
        params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end}
        await server.infer(InferenceRequest(
            "probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))], parameters=params))

    async with Server(options) as server:
        await send(1, 1.0, start=True)  # holds the only slot
        waiting = asyncio.ensure_future(send(2, 2.0, start=True))  # backlog
        await until(lambda: server.model_statistics()[0].pending == 1, "sequence 2 in the backlog")
        config = (tmp_path / "probe" / "config.pbtxt").read_text()
        atomic_write(tmp_path / "probe" / "config.pbtxt", config.replace("count: 1 ", "count: 2 "))
        await server.load_model("probe")
        await asyncio.wait_for(waiting, 10)  # on the new instance, sequence 1 still live
        assert [name for name, _ in PROBE.executions] == ["probe_0_0", "probe_0_1"]
        await send(1, 3.0, end=True)
        await send(2, 4.0, end=True)


async def test_an_added_instance_that_fails_keeps_the_serving_ones(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=2)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["m"])
    async with Server(options) as server:
        BEHAVIOUR.fail_instances = {"m_0_3"}
        with pytest.raises(Exception, match="fake load failure of instance m_0_3"):
            await server.load_model("m", config=fake_json(4))
        assert BEHAVIOUR.finalized == {"m_0_2": 1}  # the one created beside it, unloaded again
        assert (await server.model_config("m")).instance_group[0].count == 2
        BEHAVIOUR.barrier = threading.Barrier(2, timeout=5)  # both serving instances still run
        await asyncio.gather(*(server.infer(fake_request(1.0)) for _ in range(2)))


async def test_oldest_sequences_go_on_across_a_count_change(tmp_path: Path) -> None:
    write_probe_model(tmp_path, "probe", count=2, max_batch_size=1, strategy="oldest { }")
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["probe"])

    async def send(corr: int, value: float, start: bool = False, end: bool = False) -> None:
        params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end}
        await server.infer(InferenceRequest(
            "probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))], parameters=params))

    async with Server(options) as server:
        await send(1, 1.0, start=True)
        await send(2, 2.0, start=True)
        config = (tmp_path / "probe" / "config.pbtxt").read_text()
        atomic_write(tmp_path / "probe" / "config.pbtxt", config.replace("count: 2 ", "count: 1 "))
        await server.load_model("probe")
        await asyncio.gather(send(1, 3.0, end=True), send(2, 4.0, end=True))
        third = asyncio.ensure_future(send(3, 5.0, start=True))  # one candidate slot now
        await asyncio.wait_for(third, 10)
        # sequence 2 belongs to probe_0_1 (slot 0 of each instance first): it ended there
        assert [name for name, _ in PROBE.executions[2:]] in (
            ["probe_0_0", "probe_0_1", "probe_0_0"], ["probe_0_1", "probe_0_0", "probe_0_0"])
        await until(lambda: PROBE.unloaded == ["probe_0_1"], "probe_0_1 unloaded")
        atomic_write(tmp_path / "probe" / "config.pbtxt", config.replace("count: 2 ", "count: 3 "))
        await server.load_model("probe")
        await asyncio.gather(*(send(c, float(c), start=True) for c in (4, 5)))  # 3 slots
        assert await successes(server, "probe") == 7


async def test_oldest_removed_instance_stays_while_its_sequences_live(tmp_path: Path) -> None:
    """Triton's ``oldest`` strategy gives each instance its own candidate slots (one
    ``OldestSequenceBatch`` per instance, slot 0 of every instance first), so a sequence
    belongs to an instance: an instance update removes at once only the instances holding no
    live sequence; a removed one holding some executes them until they end, then unloads
    (L0_model_update ``test_oldest_scheduler_update_with_ongoing_sequences``)."""
    write_probe_model(tmp_path, "probe", count=3, max_batch_size=4,
                      strategy="oldest { max_candidate_sequences: 4 }")
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["probe"])

    async def send(corr: int, value: float, start: bool = False, end: bool = False) -> None:
        params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end}
        await server.infer(InferenceRequest(
            "probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))], parameters=params))

    def ran(value: float) -> str:
        return next(name for name, rows in PROBE.executions if any(r.value == value for r in rows))

    async with Server(options) as server:
        await send(1, 1.0, start=True)  # belongs to probe_0_0
        await send(2, 2.0, start=True)  # belongs to probe_0_1
        config = (tmp_path / "probe" / "config.pbtxt").read_text()
        atomic_write(tmp_path / "probe" / "config.pbtxt", config.replace("count: 3 ", "count: 1 "))
        await server.load_model("probe")  # removes probe_0_1 and probe_0_2
        await until(lambda: PROBE.unloaded == ["probe_0_2"], "the idle removed instance unloaded")
        await send(2, 3.0)
        await send(1, 4.0)
        assert (ran(3.0), ran(4.0)) == ("probe_0_1", "probe_0_0")  # each where it belongs
        await send(3, 5.0, start=True)  # a new sequence never goes to a removed instance
        assert ran(5.0) == "probe_0_0"
        await send(1, 6.0, end=True)
        assert PROBE.unloaded == ["probe_0_2"]
        await send(2, 7.0, end=True)  # the last sequence of probe_0_1: it leaves
        await until(lambda: PROBE.unloaded == ["probe_0_2", "probe_0_1"], "probe_0_1 unloaded")
        await send(3, 8.0, end=True)
        assert await successes(server, "probe") == 8


class ReportingInstance(FakeInstance):
    """A fake instance that reports its footprint: 1000 bytes of host memory (exact)."""

    def reported_memory(self) -> list[MemoryUsage]:
        return [MemoryUsage("CPU", 0, 1000)]


class ReportingBackend(FakeBackend):
    def load_instance(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> ModelInstance:
        super().load_instance(config, version_dir, spec)
        return ReportingInstance(spec)


async def test_memory_usage_follows_the_instances_after_a_count_change(tmp_path: Path) -> None:
    # Triton's statistics sum the memory of the instances the model has now
    # (TritonModel::AccumulatedInstanceMemoryUsage), so an update in place changes them
    register_backend("fake", ReportingBackend)
    write_fake_model(tmp_path, "m", count=2)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["m"])

    async def memory() -> object:
        return (await server.statistics("m"))["model_stats"][0]["memory_usage"]

    async with Server(options) as server:
        assert await memory() == [{"type": "CPU", "id": 0, "byte_size": 2000}]
        await server.load_model("m", config=fake_json(4))
        assert await memory() == [{"type": "CPU", "id": 0, "byte_size": 4000}]
        await server.load_model("m", config=fake_json(1))
        assert await memory() == [{"type": "CPU", "id": 0, "byte_size": 1000}]
        assert totals() == (4, 3)  # updated in place: no instance re-created
