"""Prometheus metrics over a real engine: every value equals the statistics API's numbers."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from workbench import InferenceRequest, Server, ServerOptions, Tensor, WorkbenchError
from workbench.frontends.latency_metrics import nearest_rank, parse_quantiles
from workbench.frontends.metrics import CONTENT_TYPE, MetricsFrontend
from workbench.frontends.system_metrics import CpuSampler, read_cpu_jiffies, read_memory_bytes
from workbench.testing.fake_nvml import fake_nvml
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

#: statistics key of each cumulative µs family
DURATIONS = {
    "nv_inference_request_duration_us": "success",
    "nv_inference_queue_duration_us": "queue",
    "nv_inference_compute_input_duration_us": "compute_input",
    "nv_inference_compute_infer_duration_us": "compute_infer",
    "nv_inference_compute_output_duration_us": "compute_output",
}
REASONS = {"REJECTED", "CANCELED", "BACKEND", "OTHER"}


def add_sub(model: str, a: np.ndarray, b: np.ndarray, version: str = "") -> InferenceRequest:
    return InferenceRequest(model, [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)],
                            model_version=version)


def scrape(frontend: MetricsFrontend) -> tuple[dict, dict]:
    """Render and parse one scrape: ``({(sample name, labels): value}, {family: type})``."""
    text = frontend.render().decode()
    samples, types_ = {}, {}
    for family in text_string_to_metric_families(text):
        types_[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types_


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def series(samples: dict, name: str) -> dict:
    return {labels: v for (n, labels), v in samples.items() if n == name}


async def run_traffic(server: Server) -> None:
    """Successes on two models, one backend failure, one invalid request."""
    ones = np.ones((2, 16), np.float32)
    for _ in range(3):
        await server.infer(add_sub("add_sub", ones, ones))
    await server.infer(add_sub("versioned", ones[:1], ones[:1], version="2"))
    with pytest.raises(WorkbenchError):  # unequal widths fail inside onnxruntime: BACKEND
        await server.infer(add_sub("add_sub_any", np.ones((1, 3), np.float32),
                                   np.ones((1, 4), np.float32)))
    with pytest.raises(WorkbenchError):  # wrong datatype, refused by validation: OTHER
        await server.infer(InferenceRequest("add_sub", [
            Tensor("INPUT0", "INT32", np.ones((1, 16), np.int32)),
            Tensor("INPUT1", "FP32", ones[:1]),
        ]))


async def test_scrape_equals_the_statistics_api(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    await run_traffic(server)
    samples, _ = scrape(frontend)
    stats = (await server.statistics())["model_stats"]
    assert len(stats) == len(series(samples, "nv_inference_request_success")) == 7
    for model in stats:
        labels = {"model": model["name"], "version": model["version"]}
        inference: dict[str, Any] = dict(model["inference_stats"])  # read by each family's key
        assert value(samples, "nv_inference_request_success", **labels) == inference["success"]["count"]
        assert value(samples, "nv_inference_count", **labels) == model["inference_count"]
        assert value(samples, "nv_inference_exec_count", **labels) == model["execution_count"]
        for family, key in DURATIONS.items():
            exported_us = value(samples, family, **labels)
            assert exported_us == pytest.approx(inference[key]["ns"] / 1000, abs=1e-3)
        failures = sum(value(samples, "nv_inference_request_failure", reason=r, **labels)
                       for r in REASONS)
        assert failures == inference["fail"]["count"]
    assert value(samples, "nv_inference_request_success", model="add_sub", version="1") == 3
    assert value(samples, "nv_inference_count", model="add_sub", version="1") == 6  # batch 2 x 3
    assert value(samples, "nv_inference_request_success", model="versioned", version="2") == 1
    assert value(samples, "nv_inference_request_duration_us", model="add_sub", version="1") > 0


async def test_failures_by_reason_with_every_reason_precreated(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    samples, _ = scrape(frontend)
    failures = series(samples, "nv_inference_request_failure")
    assert len(failures) == 7 * 4 and set(failures.values()) == {0}
    assert {dict(labels)["reason"] for labels in failures} == REASONS
    await run_traffic(server)
    samples, _ = scrape(frontend)
    assert value(samples, "nv_inference_request_failure",
                 model="add_sub_any", version="1", reason="BACKEND") == 1
    assert value(samples, "nv_inference_request_failure",
                 model="add_sub", version="1", reason="OTHER") == 1
    assert value(samples, "nv_inference_request_failure",
                 model="add_sub", version="1", reason="BACKEND") == 0


async def test_exact_triton_names_and_types(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    ones = np.ones((1, 16), np.float32)
    for _ in range(3):
        await server.infer(add_sub("add_sub", ones, ones))
    text = frontend.render().decode()
    assert 'nv_inference_request_success{model="add_sub",version="1"} 3.0\n' in text
    assert re.search(r"^\w+_total[{ ]", text, re.MULTILINE) is None  # no prometheus_client suffix
    _, types_ = scrape(frontend)
    counters = ["nv_inference_request_success", "nv_inference_request_failure",
                "nv_inference_count", "nv_inference_exec_count", *DURATIONS]
    assert {name: types_[name] for name in counters} == dict.fromkeys(counters, "unknown")
    assert types_["nv_inference_pending_request_count"] == "gauge"
    assert types_["nv_model_load_duration_secs"] == "gauge"
    assert not any(name.startswith("nv_cache") for name in types_)  # no model has the cache on


async def test_model_load_duration_is_recorded(server: Server) -> None:
    samples, _ = scrape(MetricsFrontend(server, server.options))
    loads = series(samples, "nv_model_load_duration_secs")
    assert len(loads) == 7 and all(0 < seconds < 600 for seconds in loads.values())
    by_engine = {(s.name, s.version): s.load_ns / 1e9 for s in server.model_statistics()}
    assert {(dict(k)["model"], dict(k)["version"]): v for k, v in loads.items()} == by_engine


async def test_pending_gauge_counts_queued_requests(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    ones = np.ones((1, 16), np.float32)
    tasks = [asyncio.create_task(server.infer(add_sub("add_sub", ones, ones))) for _ in range(12)]
    await asyncio.sleep(0)  # every task has queued; no completion can be handled before the scrape
    samples, _ = scrape(frontend)
    queued = next(s.pending for s in server.model_statistics() if s.name == "add_sub")
    assert queued > 0  # 2 instances take 2 requests, the rest wait in the queue
    assert value(samples, "nv_inference_pending_request_count", model="add_sub", version="1") == queued
    await asyncio.gather(*tasks)
    samples, _ = scrape(frontend)
    assert value(samples, "nv_inference_pending_request_count", model="add_sub", version="1") == 0
    assert value(samples, "nv_inference_request_success", model="add_sub", version="1") == 12


async def test_cpu_families_present_and_in_range(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    for _ in range(2):  # the first reading averages since boot, the second is a delta
        frontend.collector.system.sample()
        samples, types_ = scrape(frontend)
        assert 0.0 <= value(samples, "nv_cpu_utilization") <= 1.0
        total = value(samples, "nv_cpu_memory_total_bytes")
        assert 0 < value(samples, "nv_cpu_memory_used_bytes") <= total
    assert {types_[n] for n in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes")} == {"gauge"}


async def test_sampler_runs_in_the_background(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    assert frontend.collector.system.latest is None
    async with frontend:
        while frontend.collector.system.latest is None:
            await asyncio.sleep(0.01)
    assert frontend.collector.system.latest.cpu is not None


async def test_cpu_metrics_can_be_turned_off(server: Server, test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], allow_cpu_metrics=False,
                            allow_gpu_metrics=False)
    _, types_ = scrape(MetricsFrontend(server, options))
    assert not any(name.startswith(("nv_cpu", "nv_gpu")) for name in types_)


async def test_no_gpu_families_without_nvml(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    _, types_ = scrape(MetricsFrontend(server, server.options))
    assert not any(name.startswith("nv_gpu") for name in types_)
    assert "nv_cpu_utilization" in types_


async def test_gpu_families_from_nvml(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    samples, types_ = scrape(MetricsFrontend(server, server.options))
    gpu = {"gpu_uuid": "GPU-1234"}
    assert value(samples, "nv_gpu_utilization", **gpu) == pytest.approx(0.37)
    assert value(samples, "nv_gpu_memory_total_bytes", **gpu) == 8 << 30
    assert value(samples, "nv_gpu_memory_used_bytes", **gpu) == 1 << 30
    assert value(samples, "nv_gpu_power_usage", **gpu) == pytest.approx(71.5)
    assert value(samples, "nv_gpu_power_limit", **gpu) == pytest.approx(300.0)
    assert series(samples, "nv_energy_consumption") == {}  # not supported: no sample, no error
    assert types_["nv_gpu_utilization"] == "gauge"
    options = ServerOptions(model_repository=server.options.model_repository, allow_gpu_metrics=False)
    _, types_ = scrape(MetricsFrontend(server, options))
    assert not any(name.startswith("nv_gpu") for name in types_)


async def test_cache_families_only_for_cache_enabled_models(tmp_path: Path) -> None:
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG, add_sub_graph())
    cached = ADD_SUB_CONFIG.replace('"add_sub"', '"cached"') + "response_cache { enable: true }\n"
    write_model(tmp_path, "cached", cached, add_sub_graph())
    async with Server(ServerOptions(model_repository=[str(tmp_path)], response_cache_byte_size=1 << 20)) as server:
        samples, types_ = scrape(MetricsFrontend(server, server.options))
    for family in ("nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model"):
        assert series(samples, family) == {(("model", "cached"), ("version", "1")): 0}
        assert types_[family] == "unknown"


async def test_counter_latencies_can_be_turned_off(server: Server, test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)],
                            metrics_config={"counter_latencies": "false"})
    _, types_ = scrape(MetricsFrontend(server, options))
    assert not set(DURATIONS) & set(types_)
    assert "nv_inference_request_success" in types_


async def test_histogram_and_summaries_read_the_same_counts(test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], metrics_config={
        "histogram_latencies": "true", "summary_latencies": "true",
        "summary_quantiles": "0.5:0.05,0.99:0.001"})
    async with Server(options) as server:
        frontend = MetricsFrontend(server, options)
        ones = np.ones((1, 16), np.float32)
        for _ in range(5):
            await server.infer(add_sub("add_sub", ones, ones))
        samples, types_ = scrape(frontend)
        stats = next(s for s in server.model_statistics() if s.name == "add_sub")
    labels = {"model": "add_sub", "version": "1"}
    histogram = "nv_inference_first_response_histogram_ms"
    assert types_[histogram] == "histogram"
    buckets = [value(samples, histogram + "_bucket", le=le, **labels)
               for le in ("100", "500", "2000", "5000", "+Inf")]
    assert buckets == sorted(buckets) and buckets[-1] == 5
    assert value(samples, histogram + "_count", **labels) == 5
    assert value(samples, histogram + "_sum", **labels) == pytest.approx(stats.stats["success"].ns / 1e6)
    for family, key in (("nv_inference_request_summary_us", "success"),
                        ("nv_inference_compute_infer_summary_us", "compute_infer")):
        assert types_[family] == "summary"
        assert value(samples, family + "_count", **labels) == 5
        assert value(samples, family + "_sum", **labels) == pytest.approx(stats.stats[key].ns / 1e3)
        median = value(samples, family, quantile="0.5", **labels)
        assert 0 < median <= value(samples, family, quantile="0.99", **labels)
        assert median <= stats.stats[key].ns / 1e3


async def test_metrics_app_serves_the_text_format(server: Server) -> None:
    frontend = MetricsFrontend(server, server.options)
    transport = httpx.ASGITransport(app=frontend.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://metrics") as http:
        response = await http.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"] == CONTENT_TYPE
        assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
        assert 'nv_inference_request_success{model="add_sub",version="1"} 0.0' in response.text
        assert (await http.get("/v2/health/ready")).status_code == 404


def test_proc_parsing() -> None:
    stat = "cpu  100 5 50 800 20 3 2 1 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n"
    assert read_cpu_jiffies(stat) == (161, 981)  # idle = idle + iowait
    meminfo = "MemTotal:       16000 kB\nMemFree:         2000 kB\nMemAvailable:    6000 kB\n"
    assert read_memory_bytes(meminfo) == (16000 * 1024, 10000 * 1024)


def test_cpu_utilization_is_the_delta_between_readings(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable: 40 kB\n")
    sampler = CpuSampler(tmp_path)
    (tmp_path / "stat").write_text("cpu  100 0 0 100 0 0 0 0\n")
    assert sampler.read().utilization == pytest.approx(0.5)  # since boot
    (tmp_path / "stat").write_text("cpu  130 0 0 110 0 0 0 0\n")
    reading = sampler.read()
    assert reading.utilization == pytest.approx(30 / 40)
    assert (reading.memory_total_bytes, reading.memory_used_bytes) == (102400, 61440)


def test_quantile_helpers() -> None:
    assert parse_quantiles("0.5:0.05, 0.9:0.01") == {0.5: 0.05, 0.9: 0.01}
    with pytest.raises(ValueError):
        parse_quantiles("1.5:0.1")
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 0.5) == 50 and nearest_rank(values, 0.99) == 99


def test_cli_metrics_flags() -> None:
    from workbench.hosts.cli import build_parser, options_from_args

    def options(*flags: str) -> ServerOptions:
        return options_from_args(build_parser().parse_args(["serve", "--model-repository=r", *flags]))

    defaults = options()
    assert (defaults.allow_metrics, defaults.metrics_port) == (True, 8002)
    assert defaults.metrics_address == "0.0.0.0"
    assert (defaults.allow_cpu_metrics, defaults.allow_gpu_metrics) == (True, True)
    assert (defaults.metrics_interval_ms, defaults.metrics_config) == (2000, {})
    chosen = options("--allow-metrics=false", "--allow-gpu-metrics=false", "--metrics-port=0",
                     "--metrics-address=127.0.0.1", "--metrics-interval-ms=500",
                     "--metrics-config=histogram_latencies=true", "--metrics-config",
                     "summary_latencies=true")
    assert (chosen.allow_metrics, chosen.allow_gpu_metrics, chosen.metrics_port) == (False, False, 0)
    assert (chosen.metrics_address, chosen.metrics_interval_ms) == ("127.0.0.1", 500)
    assert chosen.metrics_config == {"histogram_latencies": "true", "summary_latencies": "true"}
    with pytest.raises(ValueError, match="unknown --metrics-config key 'nope'"):
        options("--metrics-config=nope=1")
