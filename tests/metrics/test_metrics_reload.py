"""Prometheus counters across a model's reload and unload, as Triton keeps them.

Triton's per-model counters live in a ``MetricModelReporter`` shared by every loaded copy
of one (model, version) (core ``MetricModelReporter::Create`` reuses the reporter while a
copy holding it is alive): a same-version reload loads the new copy beside the old one,
so the new copy continues the old copy's counters, histograms and summaries. An unload
destroys the last copy and its destructor removes the series from their families; a later
load starts a new reporter at 0. The statistics API resets on both (it is per copy).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from workbench import InferenceRequest, Server, ServerOptions, Tensor, WorkbenchError
from workbench.frontends.metrics import MetricsFrontend

LABELS = (("model", "add_sub"), ("version", "1"))
COUNTERS = ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count")
DURATIONS = (
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


def add_sub(batch: int = 1) -> InferenceRequest:
    ones = np.ones((batch, 16), np.float32)
    return InferenceRequest("add_sub", [Tensor("INPUT0", "FP32", ones), Tensor("INPUT1", "FP32", ones)])


def invalid() -> InferenceRequest:
    """Wrong datatype: refused by validation, Triton's failure reason OTHER."""
    return InferenceRequest("add_sub", [Tensor("INPUT0", "INT32", np.ones((1, 16), np.int32)),
                                        Tensor("INPUT1", "FP32", np.ones((1, 16), np.float32))])


def add_sub_samples(frontend: MetricsFrontend) -> dict[str, float]:
    """``{sample name (+ reason/le/quantile): value}`` of add_sub version 1 in one scrape."""
    found = {}
    for family in text_string_to_metric_families(frontend.render().decode()):
        for sample in family.samples:
            labels = dict(sample.labels)
            if (labels.pop("model", None), labels.pop("version", None)) != ("add_sub", "1"):
                continue
            suffix = "".join(f"[{v}]" for v in labels.values())
            found[sample.name + suffix] = sample.value
    return found


async def success_count(server: Server) -> int:
    stats = (await server.statistics("add_sub"))["model_stats"][0]
    return stats["inference_stats"]["success"]["count"]


def explicit(repository: Path, **options) -> ServerOptions:
    return ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                         load_model=["add_sub"], **options)


async def test_counters_continue_across_a_same_version_reload(test_repository: Path, tmp_path: Path) -> None:
    shutil.copytree(test_repository / "add_sub", tmp_path / "add_sub")
    async with Server(explicit(tmp_path)) as server:
        frontend = MetricsFrontend(server, server.options)
        for _ in range(3):
            await server.infer(add_sub(batch=2))
        with pytest.raises(WorkbenchError):
            await server.infer(invalid())
        before = add_sub_samples(frontend)
        assert before["nv_inference_request_success"] == 3

        # a version file changed: a new copy of the same version replaces the old (unchanged
        # files and config would update the serving copy in place, statistics and all)
        (tmp_path / "add_sub" / "1" / "notes.txt").write_text("changed")
        await server.load_model("add_sub")
        assert await success_count(server) == 0  # the statistics API resets, as Triton's
        await server.infer(add_sub(batch=1))
        after = add_sub_samples(frontend)

    assert after["nv_inference_request_success"] == 4
    assert after["nv_inference_count"] == 3 * 2 + 1
    assert after["nv_inference_exec_count"] == before["nv_inference_exec_count"] + 1
    assert after["nv_inference_request_failure[OTHER]"] == 1
    for name in DURATIONS:
        assert after[name] >= before[name]
    assert after["nv_inference_request_duration_us"] > before["nv_inference_request_duration_us"]
    assert after["nv_inference_compute_infer_duration_us"] > before["nv_inference_compute_infer_duration_us"]


async def test_requests_finishing_on_the_old_copy_still_count(test_repository: Path) -> None:
    async with Server(explicit(test_repository)) as server:
        frontend = MetricsFrontend(server, server.options)
        add_sub_samples(frontend)  # a scrape before the reload
        requests = [asyncio.ensure_future(server.infer(add_sub())) for _ in range(16)]
        await asyncio.sleep(0)  # all queued on the old copy
        await server.load_model("add_sub")  # returns once the old copy has drained
        await asyncio.gather(*requests)
        samples = add_sub_samples(frontend)
    assert samples["nv_inference_request_success"] == 16
    assert samples["nv_inference_count"] == 16


async def test_unload_removes_the_series_and_a_new_load_starts_at_zero(test_repository: Path) -> None:
    async with Server(explicit(test_repository)) as server:
        frontend = MetricsFrontend(server, server.options)
        for _ in range(3):
            await server.infer(add_sub())
        await server.unload_model("add_sub")
        # Triton's reporter destructor removes them; the readiness (beyond Triton) stays, at 0
        assert add_sub_samples(frontend) == {"workbench_model_ready": 0.0}

        await server.load_model("add_sub")
        samples = add_sub_samples(frontend)
        assert samples["nv_inference_request_success"] == 0
        await server.infer(add_sub())
        await server.load_model("add_sub")
        await server.infer(add_sub())
        assert add_sub_samples(frontend)["nv_inference_request_success"] == 2


async def test_histogram_and_summaries_continue_across_a_reload(test_repository: Path) -> None:
    options = explicit(test_repository, metrics_config={
        "histogram_latencies": "true", "summary_latencies": "true"})
    async with Server(options) as server:
        frontend = MetricsFrontend(server, options)
        for _ in range(3):
            await server.infer(add_sub())
        await server.load_model("add_sub")
        await server.infer(add_sub())
        samples = add_sub_samples(frontend)
    histogram = "nv_inference_first_response_histogram_ms"
    assert samples[histogram + "_count"] == 4
    assert samples[histogram + "_bucket[+Inf]"] == 4
    assert samples[histogram + "_bucket[5000]"] == 4  # each add_sub takes well under 5 s
    for summary in ("nv_inference_request_summary_us", "nv_inference_compute_infer_summary_us"):
        assert samples[summary + "_count"] == 4
        assert samples[summary + "_sum"] > 0
