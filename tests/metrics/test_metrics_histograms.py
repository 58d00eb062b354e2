"""The histograms beyond Triton (``--metrics-config workbench_histograms=true``) over a real
engine: duration buckets and the formed batch sizes, with their fill ratio and preferred hits."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tests.metrics.test_metrics import add_sub, scrape, series, value
from workbench import Server, ServerOptions
from workbench.frontends.metrics import MetricsFrontend
from workbench.stats.statistics import DURATION_BUCKETS_US, BatchingLimits
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

#: add_sub batching dynamically: a batch of 4 leaves at once (preferred), else after 10 s
BATCHING = ADD_SUB_CONFIG.replace("instance_group [ { count: 2 kind: KIND_CPU } ]", (
    "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 }"))
LABELS = {"model": "add_sub", "version": "1"}


@pytest.fixture
def batching_repository(tmp_path: Path) -> Path:
    write_model(tmp_path, "add_sub", BATCHING, add_sub_graph())
    return tmp_path


async def test_off_by_default_so_the_scrape_stays_triton_s(server: Server) -> None:
    await server.infer(add_sub("add_sub", np.ones((1, 16), np.float32), np.ones((1, 16), np.float32)))
    _samples, types_ = scrape(MetricsFrontend(server, server.options))
    assert not [name for name in types_ if name.startswith("workbench_") and name != "workbench_model_ready"]


async def test_histograms_count_requests_and_formed_batches(batching_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(batching_repository)],
                            metrics_config={"workbench_histograms": "true"})
    async with Server(options) as server:
        frontend = MetricsFrontend(server, options)
        ones = np.ones((1, 16), np.float32)
        # four requests of batch 1 form one batch of 4 (the preferred size: it leaves at once)
        await asyncio.gather(*(server.infer(add_sub("add_sub", ones, ones)) for _ in range(4)))
        samples, types_ = scrape(frontend)
        stats = server.model_statistics()[0]
    assert stats.batching == BatchingLimits(8, (4,), 10_000_000, 1)
    for family, key in (("workbench_request_duration_us", "success"),
                        ("workbench_queue_duration_us", "queue")):
        assert types_[family] == "histogram"
        buckets = series(samples, family + "_bucket")
        assert len(buckets) == len(DURATION_BUCKETS_US) + 1
        assert value(samples, family + "_bucket", le="+Inf", **LABELS) == 4
        assert value(samples, family + "_count", **LABELS) == 4
        assert value(samples, family + "_sum", **LABELS) == pytest.approx(stats.stats[key].ns / 1e3)
    compute_ns = sum(stats.stats[k].ns for k in ("compute_input", "compute_infer", "compute_output"))
    assert value(samples, "workbench_compute_duration_us_sum", **LABELS) == pytest.approx(compute_ns / 1e3)
    # the batch: one execution of 4, half of max_batch_size 8, a preferred size
    assert value(samples, "workbench_batch_size_bucket", le="2.0", **LABELS) == 0
    assert value(samples, "workbench_batch_size_bucket", le="4.0", **LABELS) == 1
    assert value(samples, "workbench_batch_size_count", **LABELS) == 1
    assert value(samples, "workbench_batch_size_sum", **LABELS) == 4
    assert value(samples, "workbench_batch_fill_ratio_bucket", le="0.25", **LABELS) == 0
    assert value(samples, "workbench_batch_fill_ratio_bucket", le="0.5", **LABELS) == 1
    assert value(samples, "workbench_batch_fill_ratio_sum", **LABELS) == 0.5
    assert value(samples, "workbench_batch_preferred_executions_total", **LABELS) == 1


async def test_duration_buckets_are_cumulative_and_bounded(server: Server) -> None:
    ones = np.ones((1, 16), np.float32)
    for _ in range(3):
        await server.infer(add_sub("add_sub", ones, ones))
    stats = next(s for s in server.model_statistics() if s.name == "add_sub")
    # a request lands in exactly one bucket of each histogram
    assert {name: sum(counts) for name, counts in stats.metrics.histograms.items()} == {
        "request": 3, "queue": 3, "compute": 3}
    options = server.options.model_copy(update={"metrics_config": {"workbench_histograms": "true"}})
    samples, _types = scrape(MetricsFrontend(server, options))
    buckets = [v for (name, labels), v in samples.items()
               if name == "workbench_request_duration_us_bucket" and ("model", "add_sub") in labels]
    assert buckets == sorted(buckets) and max(buckets) == 3


def test_the_key_takes_true_or_false() -> None:
    with pytest.raises(ValidationError, match="workbench_histograms must be true or false"):
        ServerOptions(metrics_config={"workbench_histograms": "yes"})
    assert ServerOptions(metrics_config={"workbench_histograms": "TRUE"}).metrics_config


async def test_histograms_continue_across_a_reload_and_follow_the_new_limits(
        test_repository: Path, tmp_path: Path) -> None:
    shutil.copytree(test_repository / "add_sub", tmp_path / "add_sub")
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["add_sub"], metrics_config={"workbench_histograms": "true"})
    twos, one = np.ones((2, 16), np.float32), np.ones((1, 16), np.float32)
    async with Server(options) as server:
        frontend = MetricsFrontend(server, options)
        for _ in range(2):
            await server.infer(add_sub("add_sub", twos, twos))
        config = tmp_path / "add_sub" / "config.pbtxt"
        config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
        await server.load_model("add_sub")
        await server.infer(add_sub("add_sub", one, one))
        samples, _types = scrape(frontend)
        [stats] = server.model_statistics()
    assert stats.batching.max_batch_size == 4 and stats.metrics.batch_sizes == {2: 2, 1: 1}
    assert value(samples, "workbench_request_duration_us_count", **LABELS) == 3
    assert value(samples, "workbench_batch_size_sum", **LABELS) == 5
    # the fill against the served max_batch_size (4): 2 x 2/4 + 1/4
    assert value(samples, "workbench_batch_fill_ratio_sum", **LABELS) == 1.25
    assert value(samples, "workbench_batch_preferred_executions_total", **LABELS) == 0
