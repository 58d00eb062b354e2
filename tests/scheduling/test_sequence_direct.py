"""Sequence batcher, ``direct`` strategy: slot pinning, null requests, slot utilization.

The slot layout is observed through the seqprobe backend (a fake at the backend
boundary that records each execution's rows and the instance that ran it); running
sums through the real ONNX accumulator.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest_asyncio

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import register_backend
from workbench.testing.models import ACCUMULATOR_CONFIG, accumulator_graph, write_model
from workbench.testing.sequence_probe import PROBE, ProbeBackend, Row, write_probe_model

NULL = Row(ready=False, start=False, corrid=0, value=0.0)


@pytest_asyncio.fixture
async def probe_repo(tmp_path: Path):
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    yield tmp_path
    PROBE.gate.set()


def step(model: str, sequence_id, value: float, start: bool = False, end: bool = False) -> InferenceRequest:
    params = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    data = np.full((1, 1), value, np.float32)
    return InferenceRequest(model, [Tensor("INPUT", "FP32", data)], parameters=params)


async def run(server: Server, model: str, sequence_id, values: list[float]) -> list[float]:
    out = []
    for i, value in enumerate(values):
        response = await server.infer(step(model, sequence_id, value, i == 0, i == len(values) - 1))
        out.append(float(response.outputs[0].data[0, 0]))
    return out


def accumulator_server(tmp_path: Path, config: str = ACCUMULATOR_CONFIG) -> Server:
    write_model(tmp_path, "accumulator", config, accumulator_graph())
    return Server(ServerOptions(model_repository=[str(tmp_path)]))


async def batch_sizes(server: Server, model: str) -> dict[int, int]:
    stats = (await server.statistics(model))["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


async def test_each_sequence_keeps_one_instance_and_slot(probe_repo: Path) -> None:
    write_probe_model(probe_repo, count=2, max_batch_size=4)  # 8 slots; 12 sequences use the backlog
    rng = random.Random(3)
    plans = {corr: [float(rng.randint(1, 9)) for _ in range(rng.randint(2, 8))] for corr in range(1, 13)}
    async with Server(ServerOptions(model_repository=[str(probe_repo)])) as server:
        results = await asyncio.gather(*(run(server, "probe", c, v) for c, v in plans.items()))
    assert results == list(plans.values())
    placements: dict[int, set] = {}
    for instance, rows in PROBE.executions:
        assert rows[-1].ready  # the batch ends at the highest ready slot
        for index, row in enumerate(rows):
            if row.ready:
                placements.setdefault(row.corrid, set()).add((instance, index))
            else:
                assert row == NULL
    assert sorted(placements) == list(plans)
    assert {c: len(p) for c, p in placements.items()} == {c: 1 for c in plans}  # pinned
    assert {next(iter(p))[0] for p in placements.values()} == {"probe_0_0", "probe_0_1"}
    assert sum(len(v) for v in plans.values()) == sum(r.ready for _, rows in PROBE.executions for r in rows)


async def test_null_requests_fill_the_gaps_below_the_highest_ready_slot(probe_repo: Path) -> None:
    write_probe_model(probe_repo, count=1, max_batch_size=4)
    async with Server(ServerOptions(model_repository=[str(probe_repo)])) as server:
        for corr in (1, 2, 3):  # slots 0, 1, 2 of the one instance
            await server.infer(step("probe", corr, corr * 10.0, start=True))
        await server.infer(step("probe", 3, 31.0))
        await server.infer(step("probe", 1, 11.0, end=True))
        sizes = await batch_sizes(server, "probe")
        stats = (await server.statistics("probe"))["model_stats"][0]
        pending = server.model_statistics()[0].pending
    assert pending == 0  # null rows never counted as queued requests
    assert [rows for _, rows in PROBE.executions] == [
        [Row(True, True, 1, 10.0)],
        [NULL, Row(True, True, 2, 20.0)],
        [NULL, NULL, Row(True, True, 3, 30.0)],
        [NULL, NULL, Row(True, False, 3, 31.0)],
        [Row(True, False, 1, 11.0)],
    ]
    # Triton's statistics: the batch size counts the null rows the backend got (L0_sequence_batcher
    # test_backlog_fill_no_end: {4: 3, 3: 2}), inference_count only the real requests
    assert sizes == {1: 2, 2: 1, 3: 2}
    assert (stats["inference_count"], stats["execution_count"]) == (5, 5)


async def test_null_rows_leave_the_state_of_their_slot_alone(tmp_path: Path) -> None:
    async with accumulator_server(tmp_path) as server:
        for corr in (1, 2, 3):
            await server.infer(step("accumulator", corr, float(corr), start=True))
        sums = [float((await server.infer(step("accumulator", 3, 3.0))).outputs[0].data[0, 0])
                for _ in range(2)]  # slots 0 and 1 ride along as null rows
        one = await server.infer(step("accumulator", 1, 1.0, end=True))
        two = await server.infer(step("accumulator", 2, 2.0, end=True))
    assert sums == [6.0, 9.0]
    assert float(one.outputs[0].data[0, 0]) == 2.0 and float(two.outputs[0].data[0, 0]) == 4.0


def with_direct(direct: str, max_batch_size: int = 4, instances: int = 1) -> str:
    return (ACCUMULATOR_CONFIG.replace("max_batch_size: 8", f"max_batch_size: {max_batch_size}")
            .replace("count: 1 kind", f"count: {instances} kind")
            .replace("sequence_batching {", "sequence_batching {\n  direct { " + direct + " }"))


async def test_minimum_slot_utilization_waits_for_full_batches(tmp_path: Path) -> None:
    config = with_direct("max_queue_delay_microseconds: 30000000 minimum_slot_utilization: 1.0")
    plans = {corr: [float(corr), 1.0, 2.0] for corr in (11, 12, 13, 14)}
    async with accumulator_server(tmp_path, config) as server:
        results = await asyncio.gather(*(run(server, "accumulator", c, v) for c, v in plans.items()))
        sizes = await batch_sizes(server, "accumulator")
    assert results == [list(np.cumsum(v)) for v in plans.values()]
    assert sizes == {4: 3}  # without the delay the first START would have run alone


async def test_queue_delay_expires_and_runs_the_partly_filled_batch(tmp_path: Path) -> None:
    config = with_direct("max_queue_delay_microseconds: 100000 minimum_slot_utilization: 1.0")
    plans = {corr: [1.0, 2.0] for corr in (21, 22, 23)}  # 3 of 4 slots: never full
    async with accumulator_server(tmp_path, config) as server:
        runs = asyncio.gather(*(run(server, "accumulator", c, v) for c, v in plans.items()))
        results = await asyncio.wait_for(runs, 60)  # fails, not hangs, if the delay never expires
        sizes = await batch_sizes(server, "accumulator")
    assert results == [[1.0, 3.0]] * 3
    assert sizes == {3: 2}


async def test_interleaved_sequences_on_two_instances(tmp_path: Path) -> None:
    rng = random.Random(7)
    plans = {corr: [float(rng.randint(1, 9)) for _ in range(rng.randint(2, 12))]
             for corr in [*range(1, 19), "alpha", "beta"]}  # 20 sequences, 16 slots
    async with accumulator_server(tmp_path, with_direct("", 8, 2)) as server:
        results = await asyncio.gather(*(run(server, "accumulator", c, v) for c, v in plans.items()))
        sizes = await batch_sizes(server, "accumulator")
        stats = (await server.statistics("accumulator"))["model_stats"][0]
    for (corr, values), sums in zip(plans.items(), results, strict=True):
        assert sums == list(np.cumsum(values)), corr
    requests = sum(len(v) for v in plans.values())
    assert stats["inference_count"] == requests  # null rows are not inferences
    assert sum(size * count for size, count in sizes.items()) >= requests  # but are in batch sizes
    assert max(sizes) <= 8
