"""NVML on a real GPU: Triton's ``nv_gpu_*`` families on the metrics endpoint, labelled with
the GPU's UUID, and the GPU bytes a KIND_GPU ONNX Runtime instance holds in ``memory_usage``
(measured by the loader from NVML, since ONNX Runtime does not report them).

Needs a GPU and ``pynvml`` (nvidia-ml-py) with a working NVML; the memory test also needs
onnxruntime-gpu.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gpu.gpu_support import assert_ready, copy_sample, kind_gpu, require_gpu

require_gpu("pynvml")

from workbench import Server, ServerOptions  # noqa: E402
from workbench.frontends.metrics import MetricsFrontend  # noqa: E402
from workbench.gpu.devices import cuda_device_uuids  # noqa: E402
from workbench.gpu.memory import load_nvml, read_gpu_memory  # noqa: E402

if load_nvml() is None:
    pytest.skip("NVML did not start (pynvml imports, nvmlInit failed: see the log)", allow_module_level=True)

GPU_FAMILIES = ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption")


def scrape(frontend: MetricsFrontend) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """(family -> {gpu_uuid: value}, family -> TYPE) for the GPU families of one scrape."""
    families: dict[str, dict[str, float]] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(frontend.render().decode()):
        if family.name in GPU_FAMILIES:
            families[family.name] = {s.labels["gpu_uuid"]: s.value for s in family.samples}
            types[family.name] = family.type
    return families, types


async def test_gpu_families_carry_the_gpus_uuid(tmp_path: Path) -> None:
    uuids = cuda_device_uuids()
    assert uuids and all(u.startswith("GPU-") for u in uuids), uuids
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        families, types = scrape(MetricsFrontend(server, server.options))
        off = ServerOptions(model_repository=[str(tmp_path)], allow_gpu_metrics=False)
        assert scrape(MetricsFrontend(server, off)) == ({}, {})
    for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"):
        assert types[name] == "gauge", name
        assert set(uuids) <= set(families[name]), (name, families[name])
    gpu = uuids[0]
    assert 0.0 <= families["nv_gpu_utilization"][gpu] <= 1.0
    total = families["nv_gpu_memory_total_bytes"][gpu]
    assert total >= 1 << 30
    assert 0 < families["nv_gpu_memory_used_bytes"][gpu] <= total
    if gpu in families.get("nv_gpu_power_limit", {}):  # NotSupported on some boards / vGPUs
        assert families["nv_gpu_power_limit"][gpu] > 0


def test_memory_readings_cover_every_cuda_device() -> None:
    readings = read_gpu_memory()
    assert sorted(readings) == list(range(len(cuda_device_uuids())))
    assert all(r.byte_size > 0 for r in readings.values()), readings


async def test_kind_gpu_onnxruntime_instance_reports_gpu_bytes(
        sample_repository: Path, tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider: install onnxruntime-gpu")
    copy_sample(sample_repository, tmp_path, "minilm_encoder", "minilm_gpu", kind_gpu)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["minilm_gpu"])
    async with Server(options) as server:
        await assert_ready(server, "minilm_gpu")
        (row,) = (await server.statistics("minilm_gpu"))["model_stats"]
    gpu = [m for m in row["memory_usage"] if m["type"] == "GPU"]
    assert [m["id"] for m in gpu] == [0], row["memory_usage"]
    assert gpu[0]["byte_size"] > 0, row["memory_usage"]
