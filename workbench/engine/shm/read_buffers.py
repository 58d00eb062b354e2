"""Reusable destination buffers for large shared-memory input reads.

A 64 MiB input read into a fresh ``np.empty`` buffer pays for the buffer's page faults (the kernel
zero-fills every page on first touch): 10–40 ms on the measuring VM, more than the copy itself
(bench/RESULTS.md, "Issue 20: large tensors over shared memory without faults"). :func:`take` hands
out a buffer that an earlier read already touched, when nothing refers to it any more.

"Nothing refers to it" is Python's reference count: every tensor made from a buffer (numpy views,
``memoryview``s, arrays reshaped from them) holds a reference to it, directly or through its
``base``, so a buffer whose only reference is this pool's is no longer in use by any request, model
or response. A consumer that keeps only a raw address (no Python object) past the call that got it
would see the bytes change: no backend here does (ONNX Runtime, PyTorch and OpenVINO hold the
array while they run; the Python backend copies into its own segment).

Only reads of :data:`MIN_POOLED_BYTES` or more are pooled; the pool holds at most
:data:`POOL_BYTES` bytes (free buffers of other sizes are dropped to make room; beyond that a read
gets a fresh buffer as before). Thread-safe.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

#: reads smaller than this get a fresh buffer (few page faults to save)
MIN_POOLED_BYTES = 8 << 20
#: the most bytes the pool keeps allocated, in use or free
POOL_BYTES = 256 << 20

_buffers: list[np.ndarray] = []
_lock = threading.Lock()


def take(byte_size: int) -> memoryview:
    """A writable buffer of ``byte_size`` bytes (contents undefined): a free pooled one of that
    size when there is one, else a new one (pooled when it fits in :data:`POOL_BYTES`)."""
    if byte_size < MIN_POOLED_BYTES:
        return np.empty(byte_size, np.uint8).data
    with _lock:
        for index in range(len(_buffers)):
            if _buffers[index].nbytes == byte_size and _free(index):
                return _buffers[index].data  # the view's reference marks it taken
        _make_room(byte_size)
        buffer = np.empty(byte_size, np.uint8)
        if sum(b.nbytes for b in _buffers) + byte_size <= POOL_BYTES:
            _buffers.append(buffer)
        return buffer.data


def pooled_bytes() -> int:
    """Bytes the pool holds now (in use or free)."""
    with _lock:
        return sum(b.nbytes for b in _buffers)


def clear() -> None:
    """Drop every pooled buffer (those still in use live on with their users)."""
    with _lock:
        _buffers.clear()


def _count_of_unused(probe: list[object]) -> int:
    """What :func:`_free` reads for an object that only a list holds (the interpreter's count,
    measured: it includes the call's own argument on most versions)."""
    return sys.getrefcount(probe[0])


_UNUSED = _count_of_unused([object()])


def _free(index: int) -> bool:
    """True when the pool's list holds the only reference to buffer ``index``."""
    return sys.getrefcount(_buffers[index]) == _UNUSED


def _make_room(byte_size: int) -> None:
    """Drop free buffers (oldest first) until ``byte_size`` more would fit."""
    index = 0
    while index < len(_buffers) and sum(b.nbytes for b in _buffers) + byte_size > POOL_BYTES:
        if _free(index):
            del _buffers[index]
        else:
            index += 1


__all__ = ["MIN_POOLED_BYTES", "POOL_BYTES", "clear", "pooled_bytes", "take"]
