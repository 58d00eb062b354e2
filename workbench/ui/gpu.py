"""Where the Live tab gets GPU utilisation and memory from: the one function to wire.

The NVML reader is built elsewhere (issue 7, in parallel). Until ``workbench`` exports it, there
is no GPU source and the Live tab shows no GPU plot: it never draws made-up numbers. To wire
it, make :func:`gpu_sampler` return a callable built on the exported reader (the UI may only
import names ``workbench`` exports).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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
    """The GPU source of the Live tab, or None where there is none (no GPU, or no NVML
    reader exported yet; today always None)."""
    return None


__all__ = ["GpuSample", "GpuSampler", "gpu_sampler"]
