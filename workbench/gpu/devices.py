"""Device discovery. GPU libraries are loaded lazily; no GPU is a normal answer."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _libcuda() -> ctypes.CDLL | None:
    """The CUDA driver library, initialized; None without a driver or when ``cuInit`` fails."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return cuda if cuda.cuInit(0) == 0 else None


@functools.cache
def gpu_count() -> int:
    """Number of CUDA devices visible to this process (0 without a driver or GPU).

    Asks the CUDA driver (``libcuda.so.1``: ``cuInit`` + ``cuDeviceGetCount``) so that
    no CUDA toolkit or Python GPU package is needed to answer.
    """
    cuda = _libcuda()
    count = ctypes.c_int(0)
    if cuda is None or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)


def format_gpu_uuid(raw: bytes) -> str:
    """A 16-byte CUDA ``CUuuid`` as NVML and ``nvidia-smi`` write it:
    ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (lower-case hex).

    Raises:
        ValueError: ``raw`` is not 16 bytes.
    """
    if len(raw) != 16:
        raise ValueError(f"a CUDA device UUID has 16 bytes, got {len(raw)}")
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


@functools.cache
def cuda_device_uuids() -> tuple[str, ...]:
    """UUID of each CUDA device, indexed by CUDA ordinal (the ``device_id`` of a KIND_GPU
    instance; ``CUDA_VISIBLE_DEVICES`` already applied); empty without a driver or GPU.

    The UUID (``cuDeviceGetUuid``, formatted by :func:`format_gpu_uuid`) is what ties a CUDA
    ordinal to an NVML device, whose indices ignore ``CUDA_VISIBLE_DEVICES`` and may be
    ordered differently; it is also Triton's ``gpu_uuid`` metric label.
    """
    cuda = _libcuda()
    uuids = []
    for ordinal in range(gpu_count()):
        device = ctypes.c_int(0)
        raw = ctypes.create_string_buffer(16)
        if cuda is None or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            return ()
        if cuda.cuDeviceGetUuid(raw, device) != 0:
            return ()
        uuids.append(format_gpu_uuid(raw.raw))
    return tuple(uuids)
