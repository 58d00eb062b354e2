"""What a model load grows the process by, while other loads run beside it.

Triton loads different models in parallel (each on its own model-load thread) and so does the
engine: a load is never made to wait for another one to be measured. The figures come from
process-wide readings (the resident set; NVML's per-device used memory), so loads that overlap
share them: :class:`GrowthLedger` reads the process at every start and end of a measured
section and splits each growth between two readings evenly among the sections open over it.
Each section's figures are its shares summed (a load alone gets the whole growth of its
window; two loads at once each get half of what grew while both ran). The figures stay
estimates: requests served meanwhile, or a framework's caches, land in them too.

Heap that earlier work freed stays resident (glibc keeps it for reuse), and a load served from
it grows the resident set by nothing: a 48 MiB model once read as 1.7 MiB. Each reading is
therefore taken after glibc's ``malloc_trim(0)`` has handed the free heap pages of every arena
back (:func:`trimmed_rss_bytes`); elsewhere (musl, macOS) the plain resident set is read.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from workbench.gpu.memory import GpuMemoryReading, gpu_memory_growth, read_gpu_memory
from workbench.stats.statistics import host_rss_bytes


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.restype, trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    return trim


def trimmed_rss_bytes() -> int | None:
    """This process's resident set in bytes, read after the C library's free heap pages were
    given back (``malloc_trim(0)``, glibc only), so that a load reusing freed heap shows as
    growth; None where the resident set cannot be read."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return host_rss_bytes()


@dataclass(slots=True, eq=False)  # open sections are told apart by identity, never by value
class Growth:
    """One measured section's share of the process's growth.

    ``cpu``: bytes of resident set (may be negative while open: memory freed meanwhile;
    None where the resident set cannot be read). ``gpu``: CUDA device ordinal -> bytes gained
    (GPU sections only; every device NVML read at both ends, 0 included).
    """

    on_gpu: bool
    cpu: int | None = 0
    gpu: dict[int, int] = field(default_factory=dict)


class GrowthLedger:
    """Splits the process's memory growth among the sections measured at the same time.

    Args:
        read_cpu: this process's resident set in bytes, or None (default:
            :func:`trimmed_rss_bytes`).
        read_gpu: used memory per CUDA device (default: NVML), read only while a GPU
            section is open or opening.
    """

    def __init__(
        self,
        read_cpu: Callable[[], int | None] = trimmed_rss_bytes,
        read_gpu: Callable[[], dict[int, GpuMemoryReading]] = read_gpu_memory,
    ) -> None:
        self._read_cpu = read_cpu
        self._read_gpu = read_gpu
        self._lock = threading.Lock()
        self._open: list[Growth] = []
        self._cpu: int | None = None
        self._gpu: dict[int, GpuMemoryReading] = {}

    @contextlib.contextmanager
    def section(self, on_gpu: bool) -> Iterator[Growth]:
        """Measure the block: the :class:`Growth` yielded holds its share once the block
        ends. Blocks of other threads run at the same time (they never wait for each other)."""
        growth = Growth(on_gpu)
        with self._lock:
            self._settle(read_gpu=on_gpu or self._any_gpu())
            self._open.append(growth)
        try:
            yield growth
        finally:
            with self._lock:
                self._settle(read_gpu=self._any_gpu())
                self._open.remove(growth)

    def _any_gpu(self) -> bool:
        return any(section.on_gpu for section in self._open)

    def _settle(self, read_gpu: bool) -> None:
        """Read the process and share what grew since the last reading among the open
        sections (under the lock)."""
        cpu = self._read_cpu()
        if self._open:
            if cpu is None or self._cpu is None:
                for section in self._open:
                    section.cpu = None
            else:
                for section, part in zip(self._open, _shares(cpu - self._cpu, len(self._open)), strict=True):
                    section.cpu = None if section.cpu is None else section.cpu + part
        self._cpu = cpu
        if not read_gpu:
            return
        gpu = self._read_gpu()
        sections = [section for section in self._open if section.on_gpu]
        if sections:
            for device, grown in gpu_memory_growth(self._gpu, gpu).items():
                for section, part in zip(sections, _shares(grown, len(sections)), strict=True):
                    section.gpu[device] = section.gpu.get(device, 0) + part
        self._gpu = gpu


def _shares(total: int, count: int) -> list[int]:
    """``total`` split into ``count`` integer parts that add up to it."""
    part, left = divmod(total, count)
    return [part + (index < left) for index in range(count)]


#: the one ledger of this process's model loads
LEDGER = GrowthLedger()

__all__ = ["LEDGER", "Growth", "GrowthLedger", "trimmed_rss_bytes"]
