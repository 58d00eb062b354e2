"""A stand-in ``pynvml`` module for tests of the NVML readers on machines without a GPU: the
hardware boundary, where the project's rules allow a fake."""

from __future__ import annotations

import types


class NVMLError(Exception):
    """pynvml's base error class (``NVMLError_NotSupported`` and friends subclass it)."""


def fake_nvml() -> types.ModuleType:
    """A stand-in ``pynvml`` with one GPU (NVML units: percent, bytes, milliwatts, mJ)."""
    nvml = types.ModuleType("pynvml")

    def not_supported(handle: object) -> int:
        raise NVMLError("NVMLError_NotSupported")

    vars(nvml).update(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: f"handle{index}",
        nvmlDeviceGetUUID=lambda handle: "GPU-1234",
        nvmlDeviceGetUtilizationRates=lambda handle: types.SimpleNamespace(gpu=37, memory=5),
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=8 << 30, used=1 << 30),
        nvmlDeviceGetPowerUsage=lambda handle: 71_500,
        nvmlDeviceGetPowerManagementLimit=lambda handle: 300_000,
        nvmlDeviceGetTotalEnergyConsumption=not_supported,
    )
    return nvml
