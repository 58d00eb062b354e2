"""Rate limiter: two models sharing one resource pool never execute at the same time; pools
too small for one instance, or a resource both global and per-device, are refused as Triton
refuses them; with plenty of resources two models progress evenly."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InvalidArgument, ModelLoadError, Server, ServerOptions, Tensor
from workbench.backends.base import InstanceSpec
from workbench.backends.registry import register_backend
from workbench.scheduling.rate_limiter import RateLimiter, explicit_count, parse_resource
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.waits import queued


def write(repo: Path, name: str, count: int = 1, priority: int = 1) -> None:
    limiter = f'rate_limiter {{ resources [ {{ name: "R" global: true count: {count} }} ] priority: {priority} }}'
    write_fake_model(repo, name, count=1, group=limiter)


def request(model: str, value: float) -> InferenceRequest:
    return InferenceRequest(model, [Tensor("INPUT0", "FP32", np.full((1, 1), value, np.float32))])


async def start(repo: Path, **options) -> Server:
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    server = Server(ServerOptions(model_repository=[str(repo)], **options))
    await server.start()
    return server


async def test_shared_resource_makes_models_take_turns(tmp_path: Path) -> None:
    write(tmp_path, "model_a")
    write(tmp_path, "model_b")
    server = await start(tmp_path, rate_limit="execution_count")
    try:
        BEHAVIOUR.gate.clear()
        a = asyncio.create_task(server.infer(request("model_a", 1)))
        await BEHAVIOUR.executing(1)
        b = asyncio.create_task(server.infer(request("model_b", 2)))
        await queued(server, "model_b", 1)  # model_b's idle instance waits for R
        assert list(BEHAVIOUR.executions) == ["model_a_0_0"]
        BEHAVIOUR.gate.set()
        await asyncio.gather(a, b)
        assert sorted(BEHAVIOUR.executions) == ["model_a_0_0", "model_b_0_0"]
    finally:
        BEHAVIOUR.gate.set()
        await server.stop()


@pytest.mark.parametrize(
    "options",
    [{}, {"rate_limit": "execution_count", "rate_limit_resource": ["R:2"]}],
    ids=["rate-limit-off", "explicit-pool-of-2"],
)
async def test_both_models_run_at_once_when_resources_allow(tmp_path: Path, options: dict) -> None:
    write(tmp_path, "model_a")
    write(tmp_path, "model_b")
    server = await start(tmp_path, **options)
    try:
        BEHAVIOUR.gate.clear()
        tasks = [asyncio.create_task(server.infer(request(m, 1))) for m in ("model_a", "model_b")]
        await BEHAVIOUR.executing(2)  # times out unless both execute while the gate is shut
        assert sorted(BEHAVIOUR.executions) == ["model_a_0_0", "model_b_0_0"]
        BEHAVIOUR.gate.set()
        await asyncio.gather(*tasks)
    finally:
        BEHAVIOUR.gate.set()
        await server.stop()


async def test_bad_resource_flag(tmp_path: Path) -> None:
    write(tmp_path, "model_a")
    server = Server(ServerOptions(model_repository=[str(tmp_path)], rate_limit="execution_count",
                                  rate_limit_resource=["R"]))
    with pytest.raises(InvalidArgument, match="expected NAME:COUNT"):
        await server.start()


def test_parse_resource() -> None:
    assert parse_resource("Res:4") == (("Res", None), 4)  # Triton keeps the name's case
    assert parse_resource("gpu_mem:2:1") == (("gpu_mem", 1), 2)


def write_devices(repo: Path, name: str, resources: str, priority: int = 1) -> None:
    """A one-instance fake model whose ``rate_limiter`` holds ``resources`` (pbtxt list items)."""
    write_fake_model(repo, name, count=1, group=f"rate_limiter {{ resources [ {resources} ] priority: {priority} }}")


@pytest.mark.parametrize(
    ("pools", "limited_to"),
    [(["resource1:1"], 1), (["resource1:3", "resource2:2"], 3), (["resource1:10:10", "resource2:2"], 0)],
    ids=["pool-of-1", "pool-of-3", "pool-on-another-device"],
)
async def test_pool_smaller_than_one_instance_is_refused_at_start(
    tmp_path: Path, pools: list[str], limited_to: int
) -> None:
    """As L0_rate_limiter's failing cases: a pool that cannot hold one instance's resources
    fails the model (and the start-up) with Triton's text; a resource absent from the explicit
    pools counts as 0."""
    write_devices(tmp_path, "model_a", '{ name: "resource1" count: 4 }')
    write_devices(tmp_path, "model_b", '{ name: "resource1" count: 2 }, { name: "resource2" global: true count: 2 }', 2)
    with pytest.raises(ModelLoadError) as raised:
        await start(tmp_path, rate_limit="execution_count", rate_limit_resource=pools)
    assert (f'Resource count for "resource1" is limited to {limited_to} which will prevent scheduling of one '
            "or more model instances, the minimum required count is 4") in str(raised.value)


async def test_resource_both_global_and_per_device_is_refused(tmp_path: Path) -> None:
    write_devices(tmp_path, "model_a", '{ name: "resource2" global: true count: 2 }, '
                                       '{ name: "resource2" global: false count: 2 }')
    with pytest.raises(ModelLoadError) as raised:
        await start(tmp_path, rate_limit="execution_count")
    assert ('Resource "resource2" is present as both global and device-specific resource in the model '
            "configuration.") in str(raised.value)


async def test_plenty_of_resources_share_fairly(tmp_path: Path) -> None:
    """L0_rate_limiter's plenty-resource case: ``resource1:6`` is a per-device pool (no device
    named: every device has 6), enough for both models (4 + 2) at once, so under equal load
    they progress evenly. Every execution meets one of the other model at a barrier: the
    counts stay in step, and an execution that waits alone for resources breaks it."""
    write_devices(tmp_path, "model_a", '{ name: "resource1" count: 4 }')
    write_devices(tmp_path, "model_b", '{ name: "resource1" count: 2 }, { name: "resource2" global: true count: 2 }', 2)
    server = await start(tmp_path, rate_limit="execution_count", rate_limit_resource=["resource1:6", "resource2:2"])
    try:
        BEHAVIOUR.barrier = threading.Barrier(2, timeout=5)
        loads = {m: asyncio.gather(*(server.infer(request(m, 1)) for _ in range(20))) for m in ("model_a", "model_b")}
        await asyncio.gather(*loads.values())
        assert BEHAVIOUR.executions == {"model_a_0_0": 20, "model_b_0_0": 20}
    finally:
        BEHAVIOUR.barrier = None
        await server.stop()


def test_explicit_pools_per_device_and_global() -> None:
    """Triton's lookup: ``NAME:COUNT`` is each device's pool; a global resource takes the
    largest explicit count of its name, whatever the device."""
    assert explicit_count({("r", None): 6}, ("r", 0)) == 6
    assert explicit_count({("r", 1): 3, ("r", None): 2}, ("r", 1)) == 3
    assert explicit_count({("r", 1): 3}, ("r", 0)) == 0
    assert explicit_count({("g", 3): 5, ("g", None): 2}, ("g", None)) == 5


async def test_resource_global_in_one_model_and_per_device_in_another_is_refused(tmp_path: Path) -> None:
    """Triton validates each added instance against the resources of every instance the rate
    limiter holds: "R" global in model_a and per-device in model_b cannot both load; once
    model_a is unloaded (its instance leaves the rate limiter) model_b can."""
    write_devices(tmp_path, "model_a", '{ name: "R" global: true count: 1 }')
    write_devices(tmp_path, "model_b", '{ name: "R" count: 1 }')
    server = await start(tmp_path, rate_limit="execution_count", model_control_mode="explicit")
    try:
        await server.load_model("model_a")
        with pytest.raises(InvalidArgument) as raised:
            await server.load_model("model_b")
        assert ('Resource "R" is present as both global and device-specific resource in the model '
                "configuration.") in str(raised.value)
        assert (await server.infer(request("model_a", 1))).outputs[0].data[0, 0] == 1
        await server.unload_model("model_a")
        await server.load_model("model_b")
        assert (await server.infer(request("model_b", 2))).outputs[0].data[0, 0] == 2
    finally:
        await server.stop()


async def test_resource_names_keep_their_case(tmp_path: Path) -> None:
    """Triton compares resource names as given: "Res" and "res" are two pools, so one
    instance of each model executes at once."""
    write_devices(tmp_path, "model_a", '{ name: "Res" global: true count: 1 }')
    write_devices(tmp_path, "model_b", '{ name: "res" global: true count: 1 }')
    server = await start(tmp_path, rate_limit="execution_count")
    try:
        BEHAVIOUR.gate.clear()
        tasks = [asyncio.create_task(server.infer(request(m, 1))) for m in ("model_a", "model_b")]
        await BEHAVIOUR.executing(2)  # times out if they shared one pool of 1
        BEHAVIOUR.gate.set()
        await asyncio.gather(*tasks)
    finally:
        BEHAVIOUR.gate.set()
        await server.stop()


async def test_explicit_pool_names_keep_their_case(tmp_path: Path) -> None:
    write_devices(tmp_path, "model_a", '{ name: "res" count: 1 }')
    with pytest.raises(ModelLoadError, match='Resource count for "res" is limited to 0'):
        await start(tmp_path, rate_limit="execution_count", rate_limit_resource=["RES:4"])


def test_pools_are_logged_as_tritons_max_resource_map(caplog: pytest.LogCaptureFixture) -> None:
    """Triton logs the pools at verbose level 1 each time they are sized again (an instance
    registered or removed), as its escaped one-line ``Max Resource Map``; L0_model_update
    ``test_instance_resource_decrease`` greps ``Resource: R1\\t Count: 3`` there after an
    instance update lowers R1 from 4 to 3, and never finds it with ``--rate-limit-resource=R1:10``."""
    old = InstanceSpec("m_0", "m", "KIND_CPU", resources=(("R1", False, 4),))
    new = InstanceSpec("m_0", "m", "KIND_CPU", resources=(("R1", False, 3), ("G", True, 2)))
    caplog.set_level(logging.DEBUG, logger="workbench.scheduling.rate_limiter")
    limiter = RateLimiter()
    limiter.register([old])
    limiter.register([new])  # an update adds the new instance before it removes the old one
    assert caplog.messages[-1] == (
        r'"\nMax Resource Map===>\n\tDevice: GLOBAL\n\t\tResource: G\t Count: 2\n'
        r'\tDevice: 0\n\t\tResource: R1\t Count: 4\n"')
    limiter.unregister([old])
    assert caplog.messages[-1] == (
        r'"\nMax Resource Map===>\n\tDevice: GLOBAL\n\t\tResource: G\t Count: 2\n'
        r'\tDevice: 0\n\t\tResource: R1\t Count: 3\n"')
    limiter.unregister([new])
    assert caplog.messages[-1] == r'"\nMax Resource Map===>\n"'
    caplog.clear()
    explicit = RateLimiter({("R1", None): 10, ("G", None): 2})
    explicit.register([old])
    explicit.register([new])
    explicit.unregister([old])
    assert all(r"Resource: R1\t Count: 10\n" in m for m in caplog.messages)
    assert not any("Count: 3" in m for m in caplog.messages)
