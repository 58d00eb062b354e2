"""Is ``/dev/shm`` large enough for the Python-backend stubs? One warning per process if not.

Each stub's :class:`~workbench.backends.python.transport.SegmentPool` keeps up to
:data:`~workbench.backends.python.transport.IDLE_LIMIT_BYTES` (64 MiB) of idle segments for
reuse, one pool per direction, besides the tensors in flight: ``n`` stubs may hold
``2 × 64 MiB × n``. A container's ``/dev/shm`` is 64 MiB unless the runtime is told otherwise
(``docker run --shm-size``, a memory ``emptyDir`` in Kubernetes); once it is full, tensors over
128 KiB fail with ENOSPC. Triton's Python backend has the same need (its guide asks for
``--shm-size``); the start-up warning is this server's own.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from workbench.backends.python.transport import IDLE_LIMIT_BYTES, SHM_DIR

log = logging.getLogger(__name__)

#: shared memory one stub may keep (its two pools' idle limits), bytes
BYTES_PER_STUB = 2 * IDLE_LIMIT_BYTES


def shm_size_bytes(folder: str = SHM_DIR) -> int | None:
    """The size of the file system at ``folder`` (bytes), None if it cannot be read."""
    try:
        stats = os.statvfs(folder)
    except OSError:
        return None
    return stats.f_blocks * stats.f_frsize


def small_shm_warning(stubs: int, size: int | None) -> str | None:
    """The warning for ``stubs`` live stubs and a ``/dev/shm`` of ``size`` bytes, or None when
    it is large enough (or its size is unknown)."""
    needed = stubs * BYTES_PER_STUB
    if size is None or size >= needed:
        return None
    mib = 2**20
    return (f"{SHM_DIR} is {size // mib} MiB, smaller than the {needed // mib} MiB that {stubs} "
            f"Python-backend model instance(s) may keep ({BYTES_PER_STUB // mib} MiB each, plus "
            "the tensors in flight): tensors over 128 KiB fail with 'No space left on device' "
            f"once it is full; give the container a larger {SHM_DIR} (docker/podman run "
            "--shm-size, Kubernetes: a memory emptyDir mounted there)")


class ShmBudget:
    """Counts the live stubs of this process and logs :func:`small_shm_warning` once, the
    first time their need exceeds ``/dev/shm`` (thread-safe). ``size_of(folder)`` reads the
    size (bytes; :func:`shm_size_bytes`)."""

    def __init__(self, folder: str = SHM_DIR,
                 size_of: Callable[[str], int | None] = shm_size_bytes) -> None:
        self._folder = folder
        self._size_of = size_of
        self._lock = threading.Lock()
        self._stubs = 0
        self._warned = False

    def started(self) -> str | None:
        """A stub started; returns the warning when this one logged it."""
        with self._lock:
            self._stubs += 1
            if self._warned:
                return None
            warning = small_shm_warning(self._stubs, self._size_of(self._folder))
            self._warned = warning is not None
        if warning is not None:
            log.warning("%s", warning)
        return warning

    def stopped(self) -> None:
        """A stub went away."""
        with self._lock:
            self._stubs = max(0, self._stubs - 1)


#: the process's budget, kept by :class:`~workbench.backends.python.process.StubProcess`
BUDGET = ShmBudget()

__all__ = ["BUDGET", "BYTES_PER_STUB", "ShmBudget", "shm_size_bytes", "small_shm_warning"]
