"""CPU and GPU readings for the Prometheus endpoint (Triton's ``nv_cpu_*`` and ``nv_gpu_*``).

Follows Triton's sources of truth: CPU utilization from ``/proc/stat`` (busy share of
the jiffies elapsed between two readings, 0..1), memory from ``/proc/meminfo``
(used = ``MemTotal - MemAvailable``, bytes); GPU readings from NVML (Triton uses DCGM,
which reads NVML). NVML is the ``pynvml`` module of the optional ``nvidia-ml-py``
package, imported lazily: without it, without a driver or without a GPU the GPU
readings are simply empty. Reading is blocking but cheap (microseconds for /proc,
about a millisecond per GPU for NVML); the metrics frontend runs it off the event loop
every ``--metrics-interval-ms``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.gpu.readings import GpuReading, GpuSampler

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CpuReading:
    """One CPU sample: ``utilization`` 0..1 since the previous sample, memory in bytes."""

    utilization: float
    memory_total_bytes: int
    memory_used_bytes: int


def read_cpu_jiffies(stat: str) -> tuple[int, int]:
    """``(busy, total)`` jiffies from the aggregate ``cpu`` line of ``/proc/stat`` text.

    Like Triton: total = user + nice + system + idle + iowait + irq + softirq + steal
    (guest time is already inside user); idle time = idle + iowait.
    """
    for line in stat.splitlines():
        if line.startswith("cpu "):
            fields = [int(v) for v in line.split()[1:9]]
            fields += [0] * (8 - len(fields))
            total = sum(fields)
            idle = fields[3] + fields[4]
            return total - idle, total
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def read_memory_bytes(meminfo: str) -> tuple[int, int]:
    """``(total, used)`` bytes from ``/proc/meminfo`` text: used = MemTotal - MemAvailable."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable", "MemFree"):
            values[key] = int(rest.split()[0]) * 1024  # the file says kB; it means KiB
    total = values["MemTotal"]
    available = values.get("MemAvailable", values.get("MemFree", total))
    return total, total - available


class CpuSampler:
    """Successive CPU readings; utilization is computed from the jiffies between two calls
    (the first call reports the average since boot).

    Args:
        proc: the procfs root (tests point it at a fake one).
    """

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._last: tuple[int, int] = (0, 0)

    def read(self) -> CpuReading:
        """Take one reading. Raises OSError / ValueError when procfs is missing or odd."""
        busy, total = read_cpu_jiffies((self._proc / "stat").read_text())
        last_busy, last_total = self._last
        self._last = (busy, total)
        elapsed = total - last_total
        utilization = (busy - last_busy) / elapsed if elapsed > 0 else 0.0
        memory_total, memory_used = read_memory_bytes((self._proc / "meminfo").read_text())
        return CpuReading(min(max(utilization, 0.0), 1.0), memory_total, memory_used)


@dataclass(frozen=True, slots=True)
class SystemReading:
    """The latest CPU (None when disabled or unreadable) and GPU readings, and when."""

    cpu: CpuReading | None
    gpus: tuple[GpuReading, ...]
    monotonic_s: float


class SystemSampler:
    """CPU and/or GPU readings, taken by :meth:`sample` and kept as one immutable snapshot
    (:attr:`latest`), so a scrape on the event loop never waits for /proc or NVML.

    Args:
        cpu: read ``/proc`` (``--allow-cpu-metrics``).
        gpu: read NVML when it can be imported (``--allow-gpu-metrics``).
    """

    def __init__(self, cpu: bool = True, gpu: bool = True) -> None:
        self._cpu = CpuSampler() if cpu else None
        self._gpu = GpuSampler() if gpu else None
        self.latest: SystemReading | None = None

    def sample(self) -> SystemReading:
        """Take one reading (blocking, cheap) and make it :attr:`latest`."""
        cpu = None
        if self._cpu is not None:
            try:
                cpu = self._cpu.read()
            except (OSError, ValueError, KeyError) as exc:  # no procfs (not Linux)
                log.debug("CPU metrics unavailable: %s", exc)
        gpus = tuple(self._gpu.read()) if self._gpu is not None else ()
        self.latest = SystemReading(cpu, gpus, time.monotonic())
        return self.latest
