"""The cached per-model text writer of ``/metrics`` writes exactly ``generate_latest``'s bytes.

The old path (prometheus_client's families through ``generate_latest``) is the oracle: every
scrape here is compared byte for byte, across changes between scrapes (the writer reuses an
unchanged version's lines, so a stale cache would show as a difference).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from workbench import InferenceRequest, ModelStatistics, Server, ServerOptions, Tensor
from workbench.frontends.metrics import MetricsFrontend, model_families, model_family_specs
from workbench.frontends.metrics_text import ModelFamiliesText


class _Old(Collector):
    def __init__(self, stats: list[ModelStatistics], counter_latencies: bool) -> None:
        self.stats, self.counter_latencies = stats, counter_latencies

    def collect(self) -> Iterator[Metric]:
        yield from model_families(self.stats, self.counter_latencies)


def oracle(stats: list[ModelStatistics], counter_latencies: bool = True) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Old(stats, counter_latencies))
    return generate_latest(registry)


def odd_versions() -> list[ModelStatistics]:
    """Names that need escaping, large and fractional values, cache on and off."""
    plain = ModelStatistics("plain", "1", load_ns=123_456_789_012)
    quoted = ModelStatistics('we"ird\\na\nme ü', "7", load_ns=5, cache_enabled=True)
    cached = ModelStatistics("cached", "2", cache_enabled=True)
    plain.record_success(123_456_789_012, 1, 2, 3_333_333, 4)
    quoted.record_failure(10, "REJECTED")
    quoted.record_cache_hit(1_000, 7)
    cached.record_cache_miss(12_345_678_901)
    plain.pending = 3
    return [plain, quoted, cached]


@pytest.mark.parametrize("counter_latencies", [True, False])
def test_same_bytes_as_generate_latest(counter_latencies: bool) -> None:
    stats = odd_versions()
    writer = ModelFamiliesText(model_family_specs(counter_latencies))
    assert writer.render(stats).encode() == oracle(stats, counter_latencies)
    assert writer.render([]).encode() == oracle([], counter_latencies)


def test_changes_between_scrapes_show_in_the_next_one() -> None:
    stats = odd_versions()
    writer = ModelFamiliesText(model_family_specs())
    assert writer.render(stats).encode() == oracle(stats)
    stats[0].record_success(5, 1, 1, 1, 1)
    stats[1].record_failure(3, "OTHER")
    stats[2].pending = 9
    second = writer.render(stats).encode()
    assert second == oracle(stats)
    assert b'nv_inference_request_success{model="plain",version="1"} 2.0\n' in second
    assert writer.render(stats).encode() == second  # nothing changed: the cached lines
    fewer = [stats[0], ModelStatistics("new", "1")]  # one unloaded, one loaded
    assert writer.render(fewer).encode() == oracle(fewer)  # no cache family left


async def test_frontend_scrape_equals_its_registry(test_repository: Path) -> None:
    """A real engine with traffic, histogram and summaries on: ``render()`` (the fast path
    ``GET /metrics`` serves) gives the bytes of ``generate_latest`` over the registry."""
    options = ServerOptions(model_repository=[str(test_repository)], allow_cpu_metrics=False,
                            metrics_config={"histogram_latencies": "true", "summary_latencies": "true"})
    ones = np.ones((1, 16), np.float32)
    request = InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", ones), Tensor("INPUT1", "FP32", ones)])
    async with Server(options) as server:
        frontend = MetricsFrontend(server, options)
        assert frontend.render() == generate_latest(frontend.registry)
        for _ in range(3):
            await server.infer(request)
            assert frontend.render() == generate_latest(frontend.registry)
