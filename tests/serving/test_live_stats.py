"""Live statistics (``workbench.serving.live_stats``): per-interval throughput, latency percentiles,
queue vs compute, batch sizes, on the real Server and the real add_sub model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.serving.live_stats import LiveStatistics
from workbench.testing.reload import write_add_sub


def add_sub_request(batch: int = 1) -> InferenceRequest:
    a = np.ones((batch, 16), np.float32)
    return InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)])


@pytest.fixture
async def server(tmp_path: Path):
    write_add_sub(tmp_path, max_batch_size=8, instances=1)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield server


async def test_an_interval_counts_what_happened_in_it(server: Server) -> None:
    await server.infer(add_sub_request())  # before the sampler: not counted
    live = LiveStatistics(server, history=3)
    await asyncio.gather(*(server.infer(add_sub_request(batch=2)) for _ in range(40)))
    [sample] = live.sample()
    assert (sample.model, sample.version) == ("add_sub", "1")
    assert round(sample.requests_per_s * sample.interval_s) == 40
    assert round(sample.inferences_per_s * sample.interval_s) == 80
    assert sample.failures == 0 and sample.pending == 0
    assert sample.p50_us is not None and sample.p95_us is not None and sample.p99_us is not None
    assert 0 < sample.p50_us <= sample.p95_us <= sample.p99_us
    assert sample.queue_us is not None and sample.compute_us is not None and sample.compute_us > 0
    # 40 concurrent requests of batch 2 on one instance with max_batch_size 8: batched
    assert sum(size * count for size, count in sample.batch_sizes.items()) == 80
    assert max(sample.batch_sizes) > 2 and max(sample.batch_sizes) <= 8
    quiet = live.sample()[0]
    assert quiet.requests_per_s == 0 and quiet.p99_us is None and quiet.batch_sizes == {}
    for _ in range(3):
        live.sample()
    assert len(live.history[("add_sub", "1")]) == 3  # bounded
    assert set(sample.as_dict()) >= {"p99_us", "queue_us", "compute_us", "batch_sizes"}
    live.close()


async def test_closing_detaches_from_the_engine(server: Server) -> None:
    live = LiveStatistics(server)
    live.close()
    await server.infer(add_sub_request())
    assert live._latencies == {}
    live.close()  # idempotent


async def test_stream_yields_each_interval_until_closed(server: Server) -> None:
    live = LiveStatistics(server)
    seen = []
    async for samples in live.stream(0.05):
        seen.append(samples)
        await server.infer(add_sub_request())
        if len(seen) == 3:
            live.close()
    assert len(seen) == 3 and all(s[0].model == "add_sub" for s in seen)
    assert seen[1][0].requests_per_s > 0


async def test_a_sample_carries_queue_and_compute_p99_and_the_batching_limits(server: Server) -> None:
    live = LiveStatistics(server)
    await asyncio.gather(*(server.infer(add_sub_request()) for _ in range(10)))
    [sample] = live.sample()
    assert sample.queue_p99_us is not None and sample.compute_p99_us is not None
    assert sample.p99_us is not None and 0 < sample.compute_p99_us <= sample.p99_us
    assert sample.limits.max_batch_size == 8 and sample.limits.instances == 1
    assert sample.in_process is False  # server.infer called directly, not a load generator
    live.close()


async def test_intervals_with_in_process_load_are_marked(server: Server) -> None:
    from workbench.perf import InProcessClient

    live = LiveStatistics(server)
    client = InProcessClient(server)
    request = client.prepare("add_sub", "", add_sub_request().inputs)
    await client.infer(request)
    [swept] = live.sample()
    await server.infer(add_sub_request())  # as a frontend calls it
    [network] = live.sample()
    assert (swept.in_process, network.in_process) == (True, False)
    assert swept.requests_per_s > 0 and network.requests_per_s > 0
    live.close()
