"""Where the Live tab gets GPU utilisation and memory from: NVML, through
:class:`workbench.gpu.readings.GpuSampler` (the reader the Prometheus endpoint uses).

Without a GPU, a driver or the ``nvidia-ml-py`` package there is no GPU source and the Live
tab shows no GPU plot: it never draws made-up numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.gpu.readings import GpuReading
from workbench.gpu.readings import GpuSampler as NvmlSampler


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment.

    Attributes:
        index: the GPU's NVML index.
        utilization_pct: percent of the last sample period a kernel ran (NVML's GPU
            utilisation), 0..100.
        memory_used_bytes, memory_total_bytes: device memory, bytes.
    """

    index: int
    utilization_pct: float
    memory_used_bytes: int
    memory_total_bytes: int


#: what the Live tab calls once per tick: one sample per GPU
GpuSampler = Callable[[], list[GpuSample]]


def gpu_sampler() -> GpuSampler | None:
    """The GPU source of the Live tab, or None where there is none (no GPU, no driver, or no
    ``nvidia-ml-py``). The source reads NVML on the caller's thread (~1 ms per GPU)."""
    nvml = NvmlSampler()
    if not nvml.available:
        return None
    return lambda: [to_sample(index, reading) for index, reading in enumerate(nvml.read())]


def to_sample(index: int, reading: GpuReading) -> GpuSample:
    """One NVML reading as the Live tab plots it (utilisation 0..1 -> percent; a value NVML
    could not give is 0)."""
    return GpuSample(
        index=index,
        utilization_pct=(reading.utilization or 0.0) * 100,
        memory_used_bytes=reading.memory_used_bytes or 0,
        memory_total_bytes=reading.memory_total_bytes or 0,
    )


__all__ = ["GpuSample", "GpuSampler", "gpu_sampler", "to_sample"]
