"""GPU utilisation, memory and power of every visible GPU, read through NVML.

NVML is the ``pynvml`` module of the optional ``nvidia-ml-py`` package (``pip install
workbench[gpu]``), imported lazily: without it, without a driver or without a GPU there are
no readings (an empty list, never an error). Readings are blocking but cheap (about a
millisecond per GPU). Two readers share this: the Prometheus endpoint (Triton's ``nv_gpu_*``
families, Triton reads the same numbers through DCGM) and the dashboard's Live tab.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from workbench.gpu.memory import open_nvml


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU sample (units as Triton exports them); ``None`` where NVML has no value.

    ``utilization`` is 0..1, memory in bytes, power in watts, ``energy_joules`` counted
    from the first sample (Triton: "since the server started").
    """

    uuid: str
    utilization: float | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    power_usage_watts: float | None
    power_limit_watts: float | None
    energy_joules: float | None


def _visible(index: int, uuid: str) -> bool:
    """Whether ``CUDA_VISIBLE_DEVICES`` (indices or UUID prefixes) lets this process see it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return True
    for item in (v.strip() for v in visible.split(",")):
        if item.isdigit() and int(item) == index:
            return True
        if item.startswith("GPU-") and uuid.startswith(item):
            return True
    return False


def _nvml_value(nvml: Any, call: Any, *args: Any) -> Any | None:
    """``call(*args)``, or None where NVML raises (``nvml.NVMLError``: NotSupported and the
    like): that reading is left out."""
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


class GpuSampler:
    """NVML readings of every visible GPU; empty when NVML is not available."""

    def __init__(self) -> None:
        self._nvml = open_nvml()
        self._energy_start: dict[str, float] = {}

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def read(self) -> list[GpuReading]:
        """One reading per visible GPU (blocking NVML calls)."""
        nvml = self._nvml
        if nvml is None:
            return []
        readings = []
        for index in range(_nvml_value(nvml, nvml.nvmlDeviceGetCount) or 0):
            handle = _nvml_value(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
            uuid = _nvml_value(nvml, nvml.nvmlDeviceGetUUID, handle) if handle is not None else None
            if uuid is None:
                continue
            uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            if _visible(index, uuid):
                readings.append(self._read_one(nvml, handle, uuid))
        return readings

    def _read_one(self, nvml: Any, handle: Any, uuid: str) -> GpuReading:
        rates = _nvml_value(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _nvml_value(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = _nvml_value(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = _nvml_value(nvml, nvml.nvmlDeviceGetPowerManagementLimit, handle)
        energy_mj = _nvml_value(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        energy = None
        if energy_mj is not None:
            start = self._energy_start.setdefault(uuid, energy_mj / 1000)
            energy = energy_mj / 1000 - start
        return GpuReading(
            uuid=uuid,
            utilization=rates.gpu / 100 if rates is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            power_usage_watts=power_mw / 1000 if power_mw is not None else None,
            power_limit_watts=limit_mw / 1000 if limit_mw is not None else None,
            energy_joules=energy,
        )


__all__ = ["GpuReading", "GpuSampler"]
