"""The ``oldest`` sequence strategy decides batches as Triton's dynamic batcher does (Triton
runs ``oldest`` through a ``DynamicBatchScheduler`` given ``oldest``'s preferred sizes and
delay): a batch at any preferred size leaves at once, it never grows past the largest
preferred size when it can be cut earlier, and once the queue delay has run out the whole
pending batch (up to ``max_batch_size``) leaves. Seen on the sequence probe's executions;
ordered with Triton's ``TRITONSERVER_DELAY_SCHEDULER`` hook, not on sleeps."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.sequence_probe import PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import queued, until

LONG_DELAY = "max_queue_delay_microseconds: 10000000"  # 10 s: "at once" waits at most 3 s here


def step(sequence_id: int, value: float) -> InferenceRequest:
    params = {"sequence_id": sequence_id, "sequence_start": True, "sequence_end": True}
    return InferenceRequest("probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))],
                            parameters=params)


def values() -> list[list[float]]:
    return [[row.value for row in rows if row.ready] for _, rows in PROBE.executions]


def start(repo: Path, oldest: str) -> Server:
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    write_probe_model(repo, max_batch_size=8, strategy=f"oldest {{ max_candidate_sequences: 8 {oldest} }}")
    return Server(ServerOptions(model_repository=[str(repo)]))


async def test_a_smaller_preferred_size_leaves_at_once(tmp_path: Path) -> None:
    async with start(tmp_path, f"preferred_batch_size: [ 2, 6 ] {LONG_DELAY}") as server:
        await asyncio.wait_for(asyncio.gather(server.infer(step(1, 1.0)), server.infer(step(2, 2.0))), 3)
        assert values() == [[1.0, 2.0]]


async def test_cut_at_the_largest_preferred_size_the_queue_reaches(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "7")  # all seven queued before any batch
    async with start(tmp_path, f"preferred_batch_size: [ 2, 4 ] {LONG_DELAY}") as server:
        sent = [float(c) for c in range(1, 8)]
        tasks = [asyncio.create_task(server.infer(step(c, c))) for c in range(1, 8)]
        await PROBE.executing(2)  # 4 then 2 leave at once; the lone 7th waits for its delay
        assert values() == [sent[:4], sent[4:6]]
        await queued(server, "probe", 1)
    await asyncio.gather(*tasks)  # stop flushes the last one
    assert values() == [sent[:4], sent[4:6], sent[6:]]


async def test_past_the_delay_the_whole_pending_batch_leaves(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    async with start(tmp_path, "preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 50000") as server:
        held = [asyncio.create_task(server.infer(step(c, c))) for c in (1, 2)]
        await queued(server, "probe", 2)
        expired_at = time.monotonic() + 0.05
        await until(lambda: time.monotonic() > expired_at, "the queue delay of the held requests to pass")
        await asyncio.gather(*held, server.infer(step(3, 3.0)))
        assert values() == [[1.0, 2.0, 3.0]]  # 3 past the delay, not 2 (preferred) then 1
