"""Triton's scheduler test hooks in the sequence batchers (issue 19 item 18):
``TRITONSERVER_DELAY_SCHEDULER=N`` holds the first execution until N requests of slotted
sequences are queued, ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`` (``direct``) also until M
requests wait in the backlog. Seen on the sequence probe's executions, not on timing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.sequence_probe import PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import queued


def step(sequence_id: int, value: float, start: bool = False, end: bool = False) -> InferenceRequest:
    params = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return InferenceRequest("probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))],
                            parameters=params)


def values() -> list[list[float]]:
    return [[row.value for row in rows if row.ready] for _, rows in PROBE.executions]


async def test_direct_holds_for_slotted_and_backlog_requests(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "2")
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "1")
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    write_probe_model(tmp_path, max_batch_size=1)  # one instance, one slot
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        first = asyncio.create_task(server.infer(step(1, 1.0, start=True)))
        await queued(server, "probe", 1)  # the instance is idle, yet the request waits
        second = asyncio.create_task(server.infer(step(1, 2.0, end=True)))
        await queued(server, "probe", 2)  # two slotted requests: the backlog still has none
        assert PROBE.executions == []
        other = asyncio.create_task(server.infer(step(2, 20.0, start=True, end=True)))  # backlog
        await asyncio.gather(first, second, other)
        assert values() == [[1.0], [2.0], [20.0]]


@pytest.mark.parametrize("strategy", ["", "oldest { max_candidate_sequences: 4 }"])
async def test_delay_scheduler_holds_the_first_execution(tmp_path: Path, monkeypatch, strategy: str) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    write_probe_model(tmp_path, max_batch_size=4, strategy=strategy)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        held = [asyncio.create_task(server.infer(step(c, c, start=True, end=True))) for c in (1, 2)]
        await queued(server, "probe", 2)
        assert PROBE.executions == []
        await asyncio.gather(*held, server.infer(step(3, 3.0, start=True, end=True)))
        assert values() == [[1.0, 2.0, 3.0]]  # one execution of the three sequences
