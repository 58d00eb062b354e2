"""This process's GPU memory per CUDA device, read through NVML.

NVML is the ``pynvml`` module of the optional ``nvidia-ml-py`` package (``pip install
workbench[gpu]``), imported only when a GPU exists. Without the package, without a driver or
without a GPU there are no readings: an empty answer, never an error. The model loader reads
this around each KIND_GPU instance load to report the instance's GPU bytes in the statistics'
``memory_usage`` (Triton's ``MemoryUsage``: type ``GPU``, id = device, ``byte_size``).

Which number: NVML's per-process figure (``nvmlDeviceGetComputeRunningProcesses`` entries of
this PID) when NVML lists this process on the device; otherwise the device's whole used
memory (``nvmlDeviceGetMemoryInfo``), which includes other processes. NVML does not list a
process that has no CUDA context on the device yet, and cannot match PIDs across a container's
PID namespace; the reading says which of the two numbers it is.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

from workbench.gpu.devices import cuda_device_uuids, gpu_count

log = logging.getLogger(__name__)
#: the NVML start-up failures already logged at INFO (:func:`open_nvml` logs each once)
_TOLD: set[str] = set()


@dataclass(frozen=True, slots=True)
class GpuMemoryReading:
    """Used memory of one CUDA device, in bytes.

    Attributes:
        byte_size: bytes in use.
        per_process: True when ``byte_size`` is this process's own usage (NVML lists this
            PID on the device); False when it is the whole device's used memory.
    """

    byte_size: int
    per_process: bool


def open_nvml() -> Any | None:
    """The initialized ``pynvml`` module, or None: not installed, or no driver / no GPU
    (``nvmlInit`` fails: logged at INFO once per process and reason, at DEBUG after).
    Initializes NVML on every call (cheap once initialized; NVML counts the calls);
    :func:`load_nvml` is the once-per-process form."""
    try:
        import pynvml  # optional: pip install nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound / _DriverNotLoaded and friends
        # each reader (metrics, the dashboard, model loads) opens NVML: said once per process
        level = logging.DEBUG if str(exc) in _TOLD else logging.INFO
        _TOLD.add(str(exc))
        log.log(level, "NVML unavailable, no GPU readings: %s", exc)
        return None
    return pynvml



@functools.cache
def load_nvml() -> Any | None:
    """:func:`open_nvml`, once per process (never shut down): what the GPU memory readings
    around model loads use."""
    return open_nvml()


def read_gpu_memory() -> dict[int, GpuMemoryReading]:
    """Used memory per CUDA device ordinal (blocking, about a millisecond per GPU).

    Returns ``{}`` without a GPU, without ``pynvml`` or when NVML cannot start; a device
    NVML cannot read is left out.
    """
    if gpu_count() == 0:
        return {}
    nvml = load_nvml()
    if nvml is None:
        return {}
    uuids = cuda_device_uuids()
    readings = {}
    for ordinal in range(gpu_count()):
        reading = _read_device(nvml, ordinal, uuids[ordinal] if ordinal < len(uuids) else None)
        if reading is not None:
            readings[ordinal] = reading
    return readings


def _read_device(nvml: Any, ordinal: int, uuid: str | None) -> GpuMemoryReading | None:
    try:
        # without the CUDA UUID, NVML's index equals the CUDA ordinal only when no
        # CUDA_VISIBLE_DEVICES remaps them: the best guess left
        handle = (nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid is not None
                  else nvml.nvmlDeviceGetHandleByIndex(ordinal))
        used = _process_bytes(nvml, handle)
        if used is not None:
            return GpuMemoryReading(used, per_process=True)
        return GpuMemoryReading(int(nvml.nvmlDeviceGetMemoryInfo(handle).used), per_process=False)
    except nvml.NVMLError as exc:  # NVMLError_NotSupported, NoPermission, GpuIsLost, ...
        log.debug("no NVML memory reading for CUDA device %d: %s", ordinal, exc)
        return None


def _process_bytes(nvml: Any, handle: Any) -> int | None:
    """This PID's bytes on the device, or None when NVML does not list it with a number."""
    try:
        processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError:  # NotSupported (some vGPU / container setups): use the device figure
        return None
    pid = os.getpid()
    mine = [p.usedGpuMemory for p in processes if p.pid == pid and p.usedGpuMemory is not None]
    return sum(int(b) for b in mine) if mine else None


def gpu_memory_growth(
    before: dict[int, GpuMemoryReading], after: dict[int, GpuMemoryReading]
) -> dict[int, int]:
    """Bytes each device gained between two :func:`read_gpu_memory` readings, never negative.

    A device present only in ``after`` is left out (no baseline). When ``before`` was the
    device-wide figure and ``after`` is per process, NVML did not list this process before,
    so it held nothing there: the growth is the whole per-process figure (typically the CUDA
    context plus the weights of a first instance on that device). The opposite change gives
    no comparable numbers and the device is left out.
    """
    growth = {}
    for device, now in after.items():
        then = before.get(device)
        if then is None:
            continue
        if now.per_process == then.per_process:
            growth[device] = max(0, now.byte_size - then.byte_size)
        elif now.per_process:
            growth[device] = now.byte_size
        # listed before but not after (the context went away): no comparable numbers
    return growth
