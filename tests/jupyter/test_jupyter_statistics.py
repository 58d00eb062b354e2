"""Statistics through the extension: Triton's statistics JSON, and the live Server-Sent
Events stream read by a real HTTP client while the engine serves real requests."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import numpy as np
import pytest

from workbench import InferenceRequest, Server, Tensor
from workbench.jupyter.host import EngineHost


async def infer_add_sub(server: Server, count: int) -> None:
    ones = np.ones((1, 16), np.float32)
    for _ in range(count):
        await server.infer(InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", ones),
                                                        Tensor("INPUT1", "FP32", ones)]))


async def wait_for(condition, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_statistics_are_tritons_json(workbench: EngineHost, api) -> None:
    await infer_add_sub(workbench.engine(), 3)
    status, body = await api("statistics", params={"model": "add_sub"})
    assert status == 200
    [stats] = body["model_stats"]
    assert (stats["name"], stats["version"], stats["inference_count"]) == ("add_sub", "1", 3)
    assert stats["inference_stats"]["success"]["count"] == 3


def served_add_sub(event: dict) -> bool:
    return any(s["model"] == "add_sub" and s["requests_per_s"] > 0 for s in event["samples"])


def add_sub_requests(events: list[dict]) -> int:
    """The add_sub requests the events report, summed over their intervals."""
    return round(sum(s["requests_per_s"] * s["interval_s"] for e in events for s in e["samples"]
                     if s["model"] == "add_sub"))


async def test_stream_sends_samples_every_interval(workbench: EngineHost, jupyter_url: str, jp_auth_header,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    url = f"{jupyter_url}workbench/api/statistics/stream"
    events: list[dict] = []
    async with (httpx.AsyncClient(headers=jp_auth_header, timeout=20) as client,
                client.stream("GET", url, params={"interval_s": "0.25"}) as response):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert workbench.open_streams == 1
        await infer_add_sub(workbench.engine(), 12)
        async for line in response.aiter_lines():  # until two events and every request seen
            if line.startswith("data: "):
                events.append(json.loads(line.removeprefix("data: ")))
                if (len(events) >= 2 and add_sub_requests(events) >= 12) or len(events) == 40:
                    break
    active = next(event for event in events if served_add_sub(event))
    samples = {(s["model"], s["version"]): s for s in active["samples"]}
    assert set(samples) == {("add_sub", "1"), ("digits_mlp", "1"), ("digits_mlp", "2")}
    add_sub = samples[("add_sub", "1")]
    assert add_sub["failures"] == 0 and add_sub["interval_s"] > 0.2
    assert add_sub["p50_us"] > 0 and add_sub["p99_us"] >= add_sub["p50_us"]
    assert sum(add_sub["batch_sizes"].values()) >= 1
    assert samples[("digits_mlp", "1")]["requests_per_s"] == 0
    assert add_sub_requests(events) == 12  # every request counted once, in some interval
    assert events[1]["samples"][0]["time"] > events[0]["samples"][0]["time"]
    await wait_for(lambda: workbench.open_streams == 0)  # the client went away: detached
    await asyncio.sleep(0.3)  # past the next interval: nothing is left to send on the closed stream
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_stopping_the_engine_ends_open_streams(workbench: EngineHost, jupyter_url: str,
                                                     jp_auth_header) -> None:
    url = f"{jupyter_url}workbench/api/statistics/stream"
    async with (httpx.AsyncClient(headers=jp_auth_header, timeout=20) as client,
                client.stream("GET", url, params={"interval_s": "0.1"}) as response):
        assert response.status_code == 200 and workbench.open_streams == 1
        stopping = asyncio.create_task(workbench.stop())
        lines = [line async for line in response.aiter_lines()]  # ends: the server finished it
        await stopping
    assert workbench.open_streams == 0 and workbench.state == "stopped"
    assert all(line == "" or line.startswith("data: ") for line in lines)


async def test_stream_interval_is_bounded(workbench: EngineHost, api) -> None:
    for interval in ("0", "61", "soon"):
        status, body = await api("statistics", "stream", params={"interval_s": interval})
        assert status == 400 and "interval_s" in body["message"]
    assert workbench.open_streams == 0
