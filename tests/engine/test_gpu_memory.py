"""GPU memory per instance, the parts that run without a GPU: merging backend-reported with
measured usage (no double counting), NVML growth arithmetic, NVML's absence, the CUDA UUID
format, and the PyTorch backend's parameter bytes. The NVML readings themselves are checked
on a GPU by tests/gpu/test_nvml_metrics_gpu.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import pytest

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes, InstanceSpec, ModelInstance
from workbench.engine.models.loader import measure_load
from workbench.gpu.devices import cuda_device_uuids, format_gpu_uuid, gpu_count
from workbench.gpu.memory import GpuMemoryReading, gpu_memory_growth, read_gpu_memory
from workbench.stats.statistics import MemoryUsage, merge_memory

no_gpu = pytest.mark.skipif(gpu_count() > 0, reason="a GPU is present: tests/gpu covers it")


def test_reported_entries_replace_measured_ones_of_the_same_device() -> None:
    measured = [MemoryUsage("CPU", 0, 100), MemoryUsage("GPU", 0, 900), MemoryUsage("GPU", 1, 50)]
    reported = [MemoryUsage("GPU", 0, 300)]
    assert merge_memory(measured, reported) == [
        MemoryUsage("CPU", 0, 100), MemoryUsage("GPU", 1, 50), MemoryUsage("GPU", 0, 300)]
    assert merge_memory(measured, []) == measured
    assert merge_memory([], reported) == reported
    # a reported CPU figure wins over the RSS growth too
    assert merge_memory([MemoryUsage("CPU", 0, 100)], [MemoryUsage("CPU", 0, 7)]) == [MemoryUsage("CPU", 0, 7)]


def test_gpu_growth_compares_like_with_like() -> None:
    device_wide, mine = (lambda n: GpuMemoryReading(n, False)), (lambda n: GpuMemoryReading(n, True))
    # same source: the difference, never negative
    assert gpu_memory_growth({0: mine(100)}, {0: mine(350)}) == {0: 250}
    assert gpu_memory_growth({0: device_wide(900)}, {0: device_wide(700)}) == {0: 0}
    # NVML did not list this process before (no CUDA context yet): all of it is new
    assert gpu_memory_growth({0: device_wide(5_000)}, {0: mine(600)}) == {0: 600}
    # listed before, not after: nothing comparable; no baseline: left out
    assert gpu_memory_growth({0: mine(600)}, {0: device_wide(5_000)}) == {}
    assert gpu_memory_growth({}, {1: mine(10)}) == {}


@no_gpu
def test_no_gpu_means_no_readings_and_no_error() -> None:
    assert read_gpu_memory() == {}
    assert cuda_device_uuids() == ()


@no_gpu
def test_nvml_without_a_driver_gives_no_readings() -> None:
    """With nvidia-ml-py installed (the dev extra) and no driver, NVML fails to start and the
    loader gets nothing, not an exception. Run in a fresh process: ``load_nvml`` is cached."""
    pytest.importorskip("pynvml")
    code = ("from workbench.gpu.memory import load_nvml; import pynvml; "
            "assert load_nvml() is None; print('ok')")
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@no_gpu
def test_nvml_unavailable_is_logged_once_per_process() -> None:
    """The server's metrics, each dashboard session's Live tab and the model loader each open
    NVML: without a driver, "NVML unavailable" is said once (INFO), not once per reader (it
    was logged twice at a Jupyter start-up: new-user trial finding (e); this failed before).
    A fresh process: what was said is per process."""
    pytest.importorskip("pynvml")
    code = ("import logging; logging.basicConfig(level=logging.INFO); "
            "from workbench.gpu.readings import GpuSampler; from workbench.ui.live.gpu import gpu_sampler; "
            "from workbench.gpu.memory import load_nvml; "
            "assert not GpuSampler().available and gpu_sampler() is None and gpu_sampler() is None; "
            "assert load_nvml() is None")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("NVML unavailable") == 1, done.stderr


def test_gpu_uuid_format_is_nvmls() -> None:
    raw = bytes.fromhex("4bb617210ae29004636fe73bab9ef8e0")
    assert format_gpu_uuid(raw) == "GPU-4bb61721-0ae2-9004-636f-e73bab9ef8e0"
    with pytest.raises(ValueError, match="16 bytes"):
        format_gpu_uuid(b"\x00" * 8)


class ReportingInstance(ModelInstance):
    """An instance at the backend boundary that reports its own footprint."""

    def __init__(self, spec: InstanceSpec, reported: list[MemoryUsage]) -> None:
        super().__init__(spec)
        self._reported = reported

    def execute(self, requests: Sequence[BackendRequest], times: ExecutionTimes) -> list[BackendResponse]:
        raise NotImplementedError

    def reported_memory(self) -> list[MemoryUsage]:
        return self._reported


def test_measure_load_lets_the_backend_report_win() -> None:
    spec = InstanceSpec("m_0", "m", "KIND_CPU")
    ballast: list[bytearray] = []

    def load(reported: list[MemoryUsage]) -> ModelInstance:
        ballast.append(bytearray(b"\x01" * (32 << 20)))  # resident: the RSS grows by ~32 MiB
        return ReportingInstance(spec, reported)

    _, measured = measure_load(lambda: load([]), spec)
    if measured:  # no /proc/self/statm: no CPU entry
        ((kind, device, size),) = [(u.kind, u.id, u.byte_size) for u in measured]
        assert (kind, device) == ("CPU", 0) and size >= 16 << 20
    _, usage = measure_load(lambda: load([MemoryUsage("CPU", 0, 123), MemoryUsage("GPU", 2, 456)]), spec)
    assert usage == [MemoryUsage("CPU", 0, 123), MemoryUsage("GPU", 2, 456)]


def test_pytorch_counts_parameters_and_buffers_on_the_device() -> None:
    pytest.importorskip("torch")
    import torch

    from workbench.backends.pytorch import module_device_bytes

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(64, 32)
            self.register_buffer("scale", torch.ones(10, dtype=torch.float64))

        def forward(self, x):
            return self.linear(x)

    module = torch.jit.script(Net())
    expected = (64 * 32 + 32) * 4 + 10 * 8
    assert module_device_bytes(module, torch.device("cpu")) == expected
    assert module_device_bytes(module, torch.device("cuda", 0)) == 0
