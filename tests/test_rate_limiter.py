"""Rate limiter: two models sharing one resource pool never execute at the same time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.scheduling.rate_limiter import parse_resource
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
    assert parse_resource("Res:4") == (("res", None), 4)
    assert parse_resource("gpu_mem:2:1") == (("gpu_mem", 1), 2)
