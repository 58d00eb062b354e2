"""The machine a tuning run measures on: its size (cores, memory, GPUs: what the default
search space is derived from) and a speed probe taken beside every result, as the bench does
(a noisy or throttled machine shows as a slower probe, not as a worse config).

Readings come from Linux: ``os.sched_getaffinity`` (the cores this process may use, which a
container's cpuset limits), ``/proc/meminfo`` (``MemTotal`` / ``MemAvailable``) and
``/proc/loadavg``; GPUs from NVML when ``nvidia-ml-py`` and a driver are there
(:class:`workbench.gpu.readings.GpuSampler`), none otherwise.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from workbench.gpu.readings import GpuSampler

#: the probe's work: a fixed pure-Python loop of this many iterations, one thread (the
#: engine's request path is Python: what slows it, a busy or throttled core, slows this)
PROBE_ITERATIONS = 200_000
#: the most one probe runs, **s**: on a busy machine it times the iterations done by then
PROBE_MAX_S = 0.25


@dataclass(frozen=True, slots=True)
class Machine:
    """What the run may use.

    Attributes:
        cores: CPUs this process may run on.
        memory_total_mb, memory_available_mb: host memory, **MiB** (``/proc/meminfo``).
        gpus: how many GPUs NVML sees (0 without NVML, driver or GPU).
        gpu_memory_mb: memory of each GPU, **MiB** (empty without GPUs).
    """

    cores: int
    memory_total_mb: float
    memory_available_mb: float
    gpus: int = 0
    gpu_memory_mb: tuple[float, ...] = ()

    @classmethod
    def read(cls) -> Machine:
        """This machine now."""
        info = _meminfo()
        sampler = GpuSampler()
        readings = sampler.read() if sampler.available else []
        return cls(cores=len(os.sched_getaffinity(0)),
                   memory_total_mb=info.get("MemTotal", 0) / 1024,
                   memory_available_mb=info.get("MemAvailable", 0) / 1024,
                   gpus=len(readings),
                   gpu_memory_mb=tuple((r.memory_total_bytes or 0) / 2**20 for r in readings))

    def as_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        gpus = (f", {self.gpus} GPU(s) of {', '.join(f'{m:,.0f}' for m in self.gpu_memory_mb)} MiB"
                if self.gpus else ", no GPU")
        return (f"{self.cores} cores, {self.memory_total_mb:,.0f} MiB memory "
                f"({self.memory_available_mb:,.0f} MiB available){gpus}")


@dataclass(frozen=True, slots=True)
class SpeedProbe:
    """One reading of how fast the machine runs a fixed piece of work right now.

    Attributes:
        time_utc: when, ``HH:MM:SS``.
        kloops_per_s: thousands of the probe loop's iterations per second (higher: faster;
            compare probes of one run, not across machines).
        loadavg_1m: the 1-minute load average (``/proc/loadavg``).
    """

    time_utc: str
    kloops_per_s: float
    loadavg_1m: float

    @classmethod
    def take(cls) -> SpeedProbe:
        """Time :data:`PROBE_ITERATIONS` iterations of a fixed Python loop (about 10 ms on
        an idle core, at most :data:`PROBE_MAX_S`); blocking, so the tuner takes it between
        points."""
        start = time.perf_counter()
        done, elapsed, total = 0, 0.0, 0
        while done < PROBE_ITERATIONS and elapsed < PROBE_MAX_S:
            for i in range(10_000):
                total += i * i % 7
            done += 10_000
            elapsed = time.perf_counter() - start
        return cls(time.strftime("%H:%M:%S", time.gmtime()), done / elapsed / 1000, _loadavg())

    def as_dict(self) -> dict:
        return asdict(self)


def _meminfo() -> dict[str, int]:
    """``/proc/meminfo`` fields in kB (empty where there is no /proc)."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                fields[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return fields


def _loadavg() -> float:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def process_cpu_seconds(pid: int | None = None) -> float | None:
    """User + system CPU seconds of process ``pid`` (this one when None) and its finished
    children's, from ``/proc/<pid>/stat``; None where it cannot be read (another machine's
    server)."""
    try:
        with open(f"/proc/{pid or 'self'}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = sum(int(v) for v in fields[11:13])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def process_rss_mb(pid: int | None = None) -> float | None:
    """Resident memory of process ``pid`` (this one when None), **MiB** (``VmRSS``); None
    where it cannot be read."""
    try:
        with open(f"/proc/{pid or 'self'}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


__all__ = ["Machine", "SpeedProbe", "process_cpu_seconds", "process_rss_mb"]
