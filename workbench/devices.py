"""Device discovery. GPU libraries are loaded lazily; no GPU is a normal answer."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def gpu_count() -> int:
    """Number of CUDA devices visible to this process (0 without a driver or GPU).

    Asks the CUDA driver (``libcuda.so.1``: ``cuInit`` + ``cuDeviceGetCount``) so that
    no CUDA toolkit or Python GPU package is needed to answer.
    """
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)
