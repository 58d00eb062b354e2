"""CUDA IPC memory for CUDA shared-memory regions, loaded only when one is registered.

Uses the CUDA runtime through ``cuda-python`` (``cuda.bindings.runtime``, the package
``tritonclient.utils.cuda_shared_memory`` itself needs). Backends here run on host memory,
so a CUDA input is copied device -> host and a CUDA output host -> device (one
``cudaMemcpy`` each), as Triton does for a CPU model.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.common.errors import InternalError, InvalidArgument
from workbench.gpu.devices import gpu_count

#: ``sizeof(cudaIpcMemHandle_t)``
HANDLE_BYTES = 64


@dataclass
class CudaPointer:
    """An opened IPC allocation: device pointer (int) on ``device_id``."""

    address: int
    device_id: int


def _runtime(name: str):
    """``cuda.bindings.runtime``, or Triton's "GPUs not supported" error (INVALID_ARG)."""
    unsupported = InvalidArgument(
        f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
    )
    if gpu_count() == 0:
        raise unsupported
    try:
        from cuda.bindings import runtime
    except ImportError:
        unsupported.message += " (the CUDA runtime bindings are missing: pip install cuda-python)"
        raise unsupported from None
    return runtime


def _check(result: tuple, what: str, error: type = InternalError) -> tuple:
    status, *values = result
    if int(status) != 0:
        raise error(f"{what}: {status!r}")
    return tuple(values)


def open_handle(name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaPointer:
    """``cudaIpcOpenMemHandle`` on ``device_id``; checks the allocation holds ``byte_size``.

    Raises:
        InvalidArgument: no GPU or runtime; a handle that is not 64 bytes ("'raw_handle' must
            be a valid base64 encoded cudaIpcMemHandle_t"); CUDA refuses the handle or the
            allocation is smaller than ``byte_size`` ("failed to register shared memory
            region 'r': invalid args").
    """
    runtime = _runtime(name)
    if len(raw_handle) != HANDLE_BYTES:
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    invalid = f"failed to register shared memory region '{name}': invalid args"
    _check(runtime.cudaSetDevice(device_id), invalid, InvalidArgument)
    handle = runtime.cudaIpcMemHandle_t()
    handle.reserved = raw_handle
    flags = runtime.cudaIpcMemLazyEnablePeerAccess
    (address,) = _check(runtime.cudaIpcOpenMemHandle(handle, flags), invalid, InvalidArgument)
    pointer = CudaPointer(int(address), device_id)
    from cuda.bindings import driver

    status, _, size = driver.cuMemGetAddressRange(pointer.address)
    if int(status) != 0 or size < byte_size:
        close(pointer)
        raise InvalidArgument(invalid)
    return pointer


def close(pointer: CudaPointer) -> None:
    """``cudaIpcCloseMemHandle``; errors are ignored (the allocation is the client's)."""
    from cuda.bindings import runtime

    runtime.cudaSetDevice(pointer.device_id)
    runtime.cudaIpcCloseMemHandle(pointer.address)


def read(pointer: CudaPointer, offset: int, size: int) -> bytearray:
    """Copy ``size`` bytes at ``offset`` from the device into host memory."""
    from cuda.bindings import runtime

    host = bytearray(size)
    source = pointer.address + offset
    kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
    _check(runtime.cudaMemcpy(host, source, size, kind), "cudaMemcpy device to host failed")
    return host


def write(pointer: CudaPointer, offset: int, data: bytes | memoryview) -> None:
    """Copy ``data`` to the device at ``offset``."""
    from cuda.bindings import runtime

    kind = runtime.cudaMemcpyKind.cudaMemcpyHostToDevice
    target = pointer.address + offset
    _check(runtime.cudaMemcpy(target, bytes(data), len(data), kind), "cudaMemcpy host to device failed")
