"""Loads and unloads of one model that overlap, and the load API's config override, as
Triton's ``ModelRepositoryManager`` handles them (issue 19 item 14): a load that arrives
while the model unloads waits for the unload, then loads; an unload that arrives while a
load finishes waits for it: both succeed, in their order; a ``config`` override whose
``instance_group`` is one object (where the proto field is repeated) is accepted, as
Triton's JSON reader (protobuf's) takes a single value for a repeated field.

The fake backend's gates order the events (the real engine runs around it).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from workbench import InvalidArgument, ModelReadyState, Server, ServerOptions
from workbench.config.model_config import model_config_from_json
from workbench.testing.ensembles import ensemble_config, write_ensemble
from workbench.testing.fake_backend import BEHAVIOUR, fake_request, write_fake_model

pytestmark = pytest.mark.usefixtures("fake_backend")



async def until(predicate, what: str, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def explicit(repo: Path) -> ServerOptions:
    return ServerOptions(model_repository=[str(repo)], model_control_mode="explicit", load_model=["m"])


async def test_a_load_during_an_unload_waits_for_it_then_loads(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=1)
    async with Server(explicit(tmp_path)) as server:
        BEHAVIOUR.gate.clear()
        inflight = asyncio.ensure_future(server.infer(fake_request("m", 7.0)))
        await BEHAVIOUR.executing(1)
        unload = asyncio.ensure_future(server.unload_model("m"))
        await until(lambda: server.lifecycle.version_states("m") == {1: ModelReadyState.UNLOADING},
                    "version 1 UNLOADING")
        load = asyncio.ensure_future(server.load_model("m"))
        for _ in range(20):  # let the load get as far as it can while the unload drains
            await asyncio.sleep(0)
        assert not load.done()
        BEHAVIOUR.gate.set()
        assert (await inflight).outputs[0].data[0, 0] == 7.0
        await unload
        await load  # no "version 1 is at UNLOADING state"
        assert server.lifecycle.is_ready("m")
        assert (await server.infer(fake_request("m", 8.0))).outputs[0].data[0, 0] == 8.0


async def test_an_unload_during_a_reload_waits_for_it_and_both_succeed(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=1)
    async with Server(explicit(tmp_path)) as server:
        old = server.lifecycle.entry("m")
        BEHAVIOUR.gate.clear()  # the old version drains after the switch: a request holds it
        inflight = asyncio.ensure_future(server.infer(fake_request("m", 7.0)))
        await BEHAVIOUR.executing(1)
        load = asyncio.ensure_future(server.load_model("m"))
        await until(lambda: server.lifecycle.entry("m") is not old, "the reload's switch")
        unload = asyncio.ensure_future(server.unload_model("m"))
        await until(lambda: server.lifecycle.version_states("m") != {1: ModelReadyState.READY},
                    "the unload to begin")
        BEHAVIOUR.gate.set()
        assert (await inflight).outputs[0].data[0, 0] == 7.0
        await load  # the load had succeeded: an unload after it does not make it fail
        await unload
        assert not server.lifecycle.is_ready("m")


async def test_an_unload_during_a_load_waits_for_it_and_both_succeed(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        BEHAVIOUR.load_gate.clear()
        load = asyncio.ensure_future(server.load_model("m"))
        assert await asyncio.to_thread(BEHAVIOUR.loading.wait, 30), "no load started"
        unload = asyncio.ensure_future(server.unload_model("m"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not unload.done()  # it waits for the load (Triton's test_concurrent_model_load_unload)
        BEHAVIOUR.load_gate.set()
        await load  # no "version 1 is at UNLOADING state"
        await unload
        assert not server.lifecycle.is_ready("m")


def test_a_single_object_for_a_repeated_field_is_one_element() -> None:
    config = model_config_from_json({
        "instance_group": {"kind": "KIND_CPU", "count": 3},
        "input": {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]},
        "sequence_batching": {"control_input": {"name": "START", "control": {"kind": "CONTROL_SEQUENCE_START",
                                                                              "int32_false_true": [0, 1]}}},
    })
    assert [(g.kind, g.count) for g in config.instance_group] == [(2, 3)]  # KIND_CPU
    assert [i.name for i in config.input] == ["INPUT0"]
    batching = model_config_from_json({"dynamic_batching": {"preferredBatchSize": 2}})
    assert list(batching.dynamic_batching.preferred_batch_size) == [2]
    control = config.sequence_batching.control_input[0]
    assert control.name == "START" and list(control.control[0].int32_false_true) == [0, 1]


async def test_a_load_override_with_one_instance_group_object_loads(tmp_path: Path) -> None:
    write_fake_model(tmp_path, "m", count=1)
    async with Server(explicit(tmp_path)) as server:
        override = {
            "backend": "fake", "max_batch_size": 4,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
            "output": {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]},
            "instance_group": {"kind": "KIND_CPU", "count": 3},
        }
        await server.load_model("m", config=json.dumps(override))
        assert server.lifecycle.is_ready("m")
        assert server.lifecycle.resolve("m", "").config.instance_group[0].count == 3


async def test_loads_of_different_models_run_at_the_same_time(tmp_path: Path) -> None:
    """Issue 33 L6: Triton loads different models in parallel (two 10 s initializes take
    ~10 s). Each instance load waits at a barrier only both loads can pass together: loads
    made one after the other break it (the first waits alone until the barrier's timeout)."""
    for name in ("a", "b"):
        write_fake_model(tmp_path, name, count=1)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        BEHAVIOUR.load_barrier = threading.Barrier(2, timeout=10)
        await asyncio.gather(server.load_model("a"), server.load_model("b"))
        assert server.lifecycle.is_ready("a") and server.lifecycle.is_ready("b")


async def test_a_load_without_config_keeps_the_override_while_the_folder_is_unchanged(
    tmp_path: Path,
) -> None:
    """Issue 33 L3 (L0_lifecycle test_config_override): Triton keeps a config override
    across a load without ``config`` while the model's files are unchanged, and reads
    config.pbtxt again once it changed; an unload forgets the override."""
    folder = write_fake_model(tmp_path, "m", count=1)
    (folder / "2").mkdir()
    override = json.dumps({"backend": "fake", "max_batch_size": 4,
                           "version_policy": {"specific": {"versions": [1]}},
                           "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
                           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}]})
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        await server.load_model("m", config=override)
        assert server.lifecycle.version_states("m") == {1: ModelReadyState.READY}
        await server.load_model("m")  # config.pbtxt (latest: version 2) is unchanged
        assert server.lifecycle.version_states("m") == {1: ModelReadyState.READY}
        (folder / "config.pbtxt").write_text((folder / "config.pbtxt").read_text() + "\n# edited\n")
        await server.load_model("m")
        assert server.lifecycle.is_ready("m", "2") and not server.lifecycle.is_ready("m", "1")
        await server.load_model("m", config=override)
        await server.unload_model("m")
        await server.load_model("m")
        assert server.lifecycle.is_ready("m", "2") and not server.lifecycle.is_ready("m", "1")


async def test_unloading_a_composing_model_while_its_ensemble_loads_waits_for_the_load(
    tmp_path: Path,
) -> None:
    """Issue 33 L7 (L0_lifecycle test_concurrent_model_load_unload): an unload of a composing
    model that arrives while its ensemble loads waits until that load is over; both succeed,
    then the ensemble no longer serves (its model is gone)."""
    write_fake_model(tmp_path, "c", count=1)
    write_ensemble(tmp_path, "e", ensemble_config(
        "e", [("IN", "TYPE_FP32", [1])], [("OUT", "TYPE_FP32", [1])],
        [("c", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})], max_batch_size=4))
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit")
    async with Server(options) as server:
        BEHAVIOUR.load_gate.clear()
        load = asyncio.ensure_future(server.load_model("e"))
        await asyncio.to_thread(BEHAVIOUR.loading.wait, 10)  # c's instance is loading
        unload = asyncio.ensure_future(server.unload_model("c"))
        for _ in range(20):  # let the unload get as far as it can while c loads
            await asyncio.sleep(0)
        BEHAVIOUR.load_gate.set()
        await load  # before: "ensemble 'e' depends on 'c' which has no loaded version"
        await unload
        assert not server.lifecycle.is_ready("c") and not server.lifecycle.is_ready("e")


async def test_loading_a_model_found_in_two_repositories_fails_with_tritons_text(tmp_path: Path) -> None:
    """Issue 33 L2 (L0_lifecycle test_multiple_model_repository_control): a model copied into
    a second repository while loaded fails to load with Triton's poll failure; the loaded
    versions keep serving (explicit mode)."""
    first, second = tmp_path / "a", tmp_path / "b"
    write_fake_model(first, "m", count=1)
    second.mkdir()
    options = ServerOptions(model_repository=[str(first), str(second)],
                            model_control_mode="explicit", load_model=["m"])
    async with Server(options) as server:
        write_fake_model(second, "m", count=1)
        with pytest.raises(InvalidArgument) as raised:
            await server.load_model("m")
        assert raised.value.message == "failed to load 'm', failed to poll from model repository"
        assert server.lifecycle.is_ready("m")
