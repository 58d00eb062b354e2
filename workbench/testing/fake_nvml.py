"""A stand-in ``pynvml`` module for tests of the NVML readers on machines without a GPU: the
hardware boundary, where the project's rules allow a fake."""

from __future__ import annotations

import types


def fake_nvml() -> types.ModuleType:
    """A stand-in ``pynvml`` with one GPU (NVML units: percent, bytes, milliwatts, mJ)."""
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetCount = lambda: 1
    nvml.nvmlDeviceGetHandleByIndex = lambda index: f"handle{index}"
    nvml.nvmlDeviceGetUUID = lambda handle: "GPU-1234"
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=37, memory=5)
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=8 << 30, used=1 << 30)
    nvml.nvmlDeviceGetPowerUsage = lambda handle: 71_500
    nvml.nvmlDeviceGetPowerManagementLimit = lambda handle: 300_000

    def not_supported(handle: object) -> int:
        raise RuntimeError("NVMLError_NotSupported")

    nvml.nvmlDeviceGetTotalEnergyConsumption = not_supported
    return nvml
