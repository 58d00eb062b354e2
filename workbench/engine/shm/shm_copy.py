"""Copies between the server's memory and a client's system shared-memory object that never fault.

A client may shrink (``ftruncate``) its object at any time. A plain copy through a mapping of it would
then touch a page past the object's end and the kernel would kill the whole server with SIGBUS, so a
mapping is never read or written by the CPU directly here. Two paths move the bytes instead:

1. **process_vm** (Linux, when ``process_vm_readv`` / ``process_vm_writev`` are allowed): the object's
   bytes of the region are mapped once (``MAP_SHARED``, lazily on the first copy, unmapped when the
   region is closed) and the bytes move with ``process_vm_readv`` / ``process_vm_writev`` of the process
   on itself, between the server's buffer and that mapping (ctypes on libc; the GIL is released during
   the call). The kernel walks the mapping itself: a page past the end of a truncated object makes the
   call stop short or fail with ``EFAULT``, which becomes the same client error the descriptor path
   gives. No page cache lock per call (unlike ``pwrite`` on tmpfs), so large copies split over two
   threads run in parallel, writes included (bench/RESULTS.md, "Issue 20: large tensors over shared
   memory without faults").
2. **descriptor** (``preadv`` / ``pwrite`` on the object's descriptor, the path before): used when the
   platform has no ``process_vm_readv`` (not Linux, or a libc without it); for the rest of the process
   once a call fails with ``EPERM`` / ``ENOSYS`` (a seccomp profile in a container may refuse it); for a
   region whose mapping fails (``mmap`` error: that region only); and always when
   :data:`USE_PROCESS_VM` is False. Reads are split over two threads too (page faults of the new buffer
   on two cores); ``pwrite`` halves gain nothing (tmpfs serialises writes to one object) but do no harm.

Copies of :data:`SPLIT_BYTES` or more run their second half on one helper thread. A
:class:`ShmObject` is thread-safe: any number of copies may run at once, and :meth:`ShmObject.close`
while a copy runs only marks it; the last running copy unmaps the region and closes the descriptor (a
mapping is never removed, nor a descriptor number freed for reuse, under a running copy).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

#: False forces the descriptor path (pread / pwrite) for every copy; set False by the first copy
#: the kernel refuses (EPERM / ENOSYS)
USE_PROCESS_VM = True
#: copies this large run their second half on a helper thread
SPLIT_BYTES = 8 << 20
_PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value
_UNAVAILABLE = (errno.EPERM, errno.ENOSYS)


class ObjectEnded(OSError):
    """The object ended before the bytes of a copy (the client truncated it); ``object_size`` is
    its size in bytes after the failed copy (-1: unknown)."""

    object_size = -1


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _Libc:
    """The libc calls of the process_vm path (``None`` from :func:`bound_libc` where there are none):
    ``readv``, ``writev``, ``mmap``, ``munmap`` (the backend boundary tests may replace)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        vm_args: list[Any] = [  # ctypes argument types (typeshed names them privately)
            ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
            ctypes.c_ulong, ctypes.c_ulong]
        self.readv, self.writev = lib.process_vm_readv, lib.process_vm_writev
        for call in (self.readv, self.writev):
            call.argtypes, call.restype = vm_args, ctypes.c_ssize_t
        self.mmap, self.munmap = lib.mmap, lib.munmap
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        self.mmap.restype = ctypes.c_void_p
        self.munmap.argtypes, self.munmap.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int


_bound: list[_Libc | None] = []
_state_lock = threading.Lock()
_helper: list[ThreadPoolExecutor] = []


def bound_libc() -> _Libc | None:
    """libc's process_vm calls, bound on first use; None where they are missing or were refused."""
    with _state_lock:
        if not _bound:
            try:
                _bound.append(_Libc(ctypes.CDLL(None, use_errno=True))
                              if sys.platform.startswith("linux") else None)
            except (OSError, AttributeError):
                _bound.append(None)
        return _bound[0]


def _disable() -> None:
    """The kernel refused process_vm (EPERM / ENOSYS): the descriptor path from now on."""
    global USE_PROCESS_VM
    USE_PROCESS_VM = False


def process_vm_in_use() -> bool:
    """True when copies take the process_vm path (on regions whose mapping succeeded)."""
    return USE_PROCESS_VM and bound_libc() is not None


def _split_helper() -> ThreadPoolExecutor:
    """The one thread that copies second halves, started on first use."""
    with _state_lock:
        if not _helper:
            _helper.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="shm-copy"))
        return _helper[0]


def _address(view: memoryview) -> int:
    """The address of a contiguous byte buffer (read-only ones too). A writable one through
    ``ctypes.c_char.from_buffer`` (0.7 µs, measured), where numpy's ``.ctypes`` costs 3 µs: this
    runs once per copy, on the infer path."""
    if not len(view):
        return 0
    if not view.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(view))
    return np.frombuffer(view, np.uint8).ctypes.data


class ShmObject:
    """``byte_size`` bytes from ``offset`` of an open shm object ``fd`` (owned: closed by
    :meth:`close`), copied in and out without ever faulting (see the module docstring for which path
    is used when). Offsets of :meth:`read_into` / :meth:`write_from` count from ``offset``."""

    def __init__(self, fd: int, offset: int, byte_size: int) -> None:
        self.fd = fd
        self.offset = offset
        self.byte_size = byte_size
        self._lock = threading.Lock()
        self._copies = 0
        self._closed = False
        self._map: tuple[int, int, _Libc] | None = None  # address, length, the libc that mapped it
        self._map_failed = False

    # ----------------------------------------------------------------- public
    def read_into(self, view: memoryview, offset: int) -> None:
        """Fill ``view`` (writable, contiguous bytes) from ``offset`` of the region.

        Raises:
            ValueError: the bytes are not all inside the region (a caller's bug).
            ObjectEnded: the object ends before ``offset + len(view)`` of the region.
            OSError: the object can no longer be read (e.g. closed).
        """
        self._run(view, offset, write=False)

    def write_from(self, view: memoryview, offset: int) -> None:
        """Copy ``view`` (contiguous bytes) to ``offset`` of the region.

        Raises:
            ValueError: the bytes are not all inside the region (a caller's bug).
            ObjectEnded: the object ends before ``offset + len(view)`` of the region (process_vm
                path; ``pwrite`` would grow the object instead: callers check its size first).
            OSError: the object can no longer be written.
        """
        self._run(view, offset, write=True)

    def size(self) -> int:
        """The object's size in bytes now (``fstat``).

        Raises:
            OSError: the object is closed, or ``fstat`` failed.
        """
        self._enter(map_it=False)
        try:
            return os.fstat(self.fd).st_size
        finally:
            self._exit()

    def mapped(self) -> bool:
        """True while the region is mapped (process_vm path in use for it)."""
        with self._lock:
            return self._map is not None

    def close(self) -> None:
        """Unmap and close the descriptor now, or, while copies run, when the last one ends."""
        with self._lock:
            self._closed = True
            if self._copies == 0:
                self._release()

    # ----------------------------------------------------------------- copies
    def _run(self, view: memoryview, offset: int, write: bool) -> None:
        if offset < 0 or offset + len(view) > self.byte_size:  # never past the mapping's end
            raise ValueError(f"bytes {offset} to {offset + len(view)} are outside the region's "
                             f"{self.byte_size}")
        base = self._enter()
        try:
            size = len(view)
            if size < SPLIT_BYTES:
                self._chunk(view, offset, base, write)
                return
            half = size // 2
            second = _split_helper().submit(self._chunk, view[half:], offset + half, base, write)
            try:
                self._chunk(view[:half], offset, base, write)
            finally:
                second.result()  # its error, if any, when the first half succeeded
        except ObjectEnded as ended:
            ended.object_size = _size(self.fd)  # while the descriptor is surely still open
            raise
        finally:
            self._exit()

    def _chunk(self, view: memoryview, offset: int, base: int | None, write: bool) -> None:
        if base is not None and process_vm_in_use():
            lib = bound_libc()
            if lib is not None:
                done = process_vm_copy(lib.writev if write else lib.readv, view, base + offset)
                if done == len(view):
                    return
                view, offset = view[done:], offset + done  # refused: the rest by descriptor
        if write:
            pwrite_from(self.fd, view, self.offset + offset)
        else:
            pread_into(self.fd, view, self.offset + offset)

    # ----------------------------------------------------------------- lifetime
    def _enter(self, map_it: bool = True) -> int | None:
        """Count a running copy; the address of region byte 0 in the mapping (mapped now if need
        be and ``map_it``), or None for the descriptor path."""
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, os.strerror(errno.EBADF))
            self._copies += 1
            if map_it and self._map is None and not self._map_failed and process_vm_in_use():
                self._map_region()
            if self._map is None:
                return None
            return self._map[0] + self.offset % _PAGE

    def _exit(self) -> None:
        with self._lock:
            self._copies -= 1
            if self._closed and self._copies == 0:
                self._release()

    def _map_region(self) -> None:
        lib = bound_libc()
        assert lib is not None, "mapped only on the process_vm path"
        start = self.offset - self.offset % _PAGE
        length = self.offset + self.byte_size - start
        address = lib.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED,
                           self.fd, start)
        if address is None or address == _MAP_FAILED:
            self._map_failed = True  # this region stays on the descriptor path
        else:
            self._map = (address, length, lib)

    def _release(self) -> None:
        if self._map is not None:
            address, length, lib = self._map
            lib.munmap(address, length)
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def process_vm_copy(call, view: memoryview, remote: int) -> int:
    """Copy ``view`` to / from address ``remote`` of this process with ``call`` (process_vm_readv
    or process_vm_writev); the bytes done, fewer than ``len(view)`` when the kernel refused the
    call (EPERM / ENOSYS: the process_vm path is then switched off).

    Raises:
        ObjectEnded: the mapping ends (EFAULT, or no progress): the object was truncated.
        OSError: another error of the call.
    """
    local, size, done, pid = _address(view), len(view), 0, os.getpid()
    while done < size:
        lv, rv = _IoVec(local + done, size - done), _IoVec(remote + done, size - done)
        count = call(pid, ctypes.byref(lv), 1, ctypes.byref(rv), 1, 0)
        if count < 0:
            code = ctypes.get_errno()
            if code in _UNAVAILABLE:
                _disable()
                return done
            if code == errno.EFAULT:
                raise ObjectEnded(code, os.strerror(code))
            raise OSError(code, os.strerror(code))
        if count == 0:
            raise ObjectEnded(errno.EFAULT, os.strerror(errno.EFAULT))
        done += count
    return done


def _size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return -1


def pread_into(fd: int, view: memoryview, position: int) -> None:
    """Fill ``view`` from byte ``position`` of ``fd`` with ``preadv`` (the descriptor path).

    Raises:
        ObjectEnded: the file ends first.
        OSError: the read failed.
    """
    done, size = 0, len(view)
    while done < size:
        count = os.preadv(fd, [view[done:]], position + done)
        if count == 0:
            raise ObjectEnded(errno.EFAULT, "the object ends before the bytes read")
        done += count


def pwrite_from(fd: int, view: memoryview, position: int) -> None:
    """Write ``view`` at byte ``position`` of ``fd`` with ``pwrite`` (the descriptor path; a file
    shorter than that grows).

    Raises:
        OSError: the write failed.
    """
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], position + done)


__all__ = ["SPLIT_BYTES", "USE_PROCESS_VM", "ObjectEnded", "ShmObject", "bound_libc", "pread_into",
           "process_vm_copy", "process_vm_in_use", "pwrite_from"]
