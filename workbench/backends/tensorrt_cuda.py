"""The CUDA runtime calls the tensorrt backend makes: device, stream, device buffers, copies.

Uses ``cuda-python`` (``cuda.bindings.runtime``; ``cuda.cudart`` before cuda-python 12.6),
imported when a plan loads, not torch: it is the small package the engine already uses for
CUDA shared memory (:mod:`workbench.engine.shm.cuda_ipc`), it talks to the same CUDA runtime
TensorRT uses, and a TensorRT deployment should not need a multi-GB torch build. Every
pointer is a plain ``int`` device address; host arrays are numpy arrays passed by address.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.common.errors import InternalError, ModelLoadError
from workbench.common.frameworks import import_framework

#: device buffers grow to a multiple of this many bytes
_ALIGN = 256


def import_runtime(model: str) -> Any:
    """``cuda.bindings.runtime`` (or the older ``cuda.cudart``).

    Raises:
        ModelLoadError: cuda-python is not installed (what to install).
    """
    try:
        runtime = import_framework("cuda.bindings.runtime")
    except ImportError:
        try:
            runtime = import_framework("cuda.cudart")  # cuda-python < 12.6
        except ImportError:
            raise ModelLoadError(
                f"unable to load model '{model}': the tensorrt backend needs the 'cuda-python' "
                "package for device memory and streams (pip install 'workbench[tensorrt]')"
            ) from None
    return runtime


def check(result: Any, what: str) -> tuple:
    """Unpack a cuda-python ``(cudaError_t, *values)`` result.

    Raises:
        InternalError: the call failed ("<what>: cudaErrorMemoryAllocation").
    """
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise InternalError(f"{what}: {getattr(status, 'name', status)}")
    return tuple(values)


class CudaDevice:
    """One GPU as the CUDA runtime sees it (``cudaSetDevice`` is per host thread)."""

    def __init__(self, runtime: Any, device_id: int) -> None:
        self.runtime = runtime
        self.device_id = device_id

    def activate(self) -> None:
        """Make this the calling thread's current device (before any other call on it)."""
        check(self.runtime.cudaSetDevice(self.device_id), f"cudaSetDevice({self.device_id})")

    def capability(self) -> str:
        """Compute capability, ``"9.0"``."""
        attrs = self.runtime.cudaDeviceAttr
        major, = check(self.runtime.cudaDeviceGetAttribute(
            attrs.cudaDevAttrComputeCapabilityMajor, self.device_id), "cudaDeviceGetAttribute")
        minor, = check(self.runtime.cudaDeviceGetAttribute(
            attrs.cudaDevAttrComputeCapabilityMinor, self.device_id), "cudaDeviceGetAttribute")
        return f"{major}.{minor}"


class CudaStream:
    """A non-blocking CUDA stream (one per model instance)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.stream, = check(runtime.cudaStreamCreateWithFlags(runtime.cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags")

    @property
    def handle(self) -> int:
        """The ``cudaStream_t`` as an integer (what TensorRT's ``stream_handle`` takes)."""
        return int(self.stream)

    def synchronize(self) -> None:
        check(self.runtime.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")

    def destroy(self) -> None:
        if self.stream is not None:
            self.runtime.cudaStreamDestroy(self.stream)
            self.stream = None


class DeviceBuffer:
    """Device memory that grows on demand (``cudaMalloc``); never shrinks until freed."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.address = 0
        self.capacity = 0

    def ensure(self, nbytes: int) -> int:
        """At least ``nbytes`` (>= 1) allocated; returns the address. Only call while no queued
        work uses the buffer (the stream is synchronized between executions).

        Raises:
            InternalError: ``cudaMalloc`` failed (out of device memory).
        """
        if nbytes > self.capacity or self.address == 0:
            self.free()
            size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
            self.address, = check(self.runtime.cudaMalloc(size), f"cudaMalloc({size})")
            self.capacity = size
        return self.address

    def free(self) -> None:
        if self.address:
            self.runtime.cudaFree(self.address)
            self.address, self.capacity = 0, 0


def copy_to_device(runtime: Any, address: int, array: np.ndarray, stream: CudaStream) -> None:
    """Queue a host -> device copy of a C-contiguous ``array`` on ``stream``. Pageable host
    memory: the call returns once CUDA has staged the bytes, so ``array`` may be dropped then."""
    if array.nbytes:
        kind = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
        check(runtime.cudaMemcpyAsync(address, array.ctypes.data, array.nbytes, kind, stream.stream),
              "cudaMemcpyAsync host to device")


def copy_to_host(runtime: Any, array: np.ndarray, address: int, stream: CudaStream) -> None:
    """Queue a device -> host copy into the C-contiguous ``array``; valid after a stream sync."""
    if array.nbytes:
        kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check(runtime.cudaMemcpyAsync(array.ctypes.data, address, array.nbytes, kind, stream.stream),
              "cudaMemcpyAsync device to host")


__all__ = ["CudaDevice", "CudaStream", "DeviceBuffer", "check", "copy_to_device", "copy_to_host",
           "import_runtime"]
