"""The call link between the server and a stub: shared-memory message buffers and eventfd wake-ups.

``init`` / ``execute`` / ``finalize`` and their replies alternate, so each direction has one
message buffer: a POSIX shared-memory file (``<segment base>call`` written by the server,
``<segment base>reply`` by the stub) mapped by both, and an ``eventfd`` the writer bumps once
the message is in place (the reader blocks in ``read``, GIL released). One ``memcpy`` and one
8-byte ``write`` per hop (~3 µs CPU per round trip against ~7.5 µs over a Unix socket:
bench/RESULTS.md, "Issue 34").

A message is ``[seq u64][blob bytes u64][envelope bytes u64][reserved u64][blob][envelope]``:
the blob holds the batch's inline tensor bytes back to back (:mod:`.hop_codec`), the envelope
a pickled dict (``op``, ids, the batch's columns); ``seq`` is the call's id, carried back by
the reply so another wake-up (the reader thread waking a call after the stub died) is told
apart. A buffer grows (``ftruncate`` + ``posix_fallocate``: a full ``/dev/shm`` raises
:class:`~.transport.SharedMemoryFull` on the writer, never SIGBUS) and never shrinks; the
reader remaps when the header says the message runs past its mapping.

Stub and server death are seen on the event socket (end of stream): the server marks the stub
gone and bumps the reply eventfd; the stub exits. Imported by the stub process: the standard
library only. Docs: docs/python-backend.md, "The hop to the stub"."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import pickle
import select
import struct
from collections.abc import Sequence
from typing import Any

from workbench.backends.python.transport import SHM_DIR, SharedMemoryFull

_HEADER = struct.Struct("<QQQQ")
#: first size of each message buffer (grown on demand to the largest message, page-rounded)
INITIAL_BYTES = 256 * 1024
_PAGE = mmap.PAGESIZE


class HopBuffer:
    """One direction's message buffer: a shared-memory file mapped here.

    Args:
        name: the file's name under ``/dev/shm``.
        create: make the file (the server does, for both directions), else open it.
    """

    def __init__(self, name: str, create: bool) -> None:
        self.name = name
        path = os.path.join(SHM_DIR, name)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(path, flags, 0o600)
        try:
            if create:
                _allocate(self._fd, INITIAL_BYTES, 0)
            self._size = os.fstat(self._fd).st_size
            self._map = mmap.mmap(self._fd, self._size)
        except BaseException:
            os.close(self._fd)
            if create:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        self.view = memoryview(self._map)

    @property
    def size(self) -> int:
        return self._size

    def write(self, seq: int, blob_parts: Sequence[Any], blob_bytes: int, envelope: bytes) -> None:
        """Place one message: ``blob_parts`` (buffers of ``blob_bytes`` bytes in all) back to
        back, then ``envelope``; grows the file when it does not fit.

        Raises:
            SharedMemoryFull: the buffer could not grow (``/dev/shm`` full).
        """
        start = _HEADER.size
        total = start + blob_bytes + len(envelope)
        if total > self._size:
            self._grow(total)
        view = self.view
        position = start
        for part in blob_parts:
            end = position + part.nbytes
            view[position:end] = part
            position = end
        view[position:position + len(envelope)] = envelope
        _HEADER.pack_into(self._map, 0, seq, blob_bytes, len(envelope), 0)

    def read(self) -> tuple[int, memoryview, Any]:
        """The message in place: ``(seq, blob view, envelope)``; the blob view is valid until
        the peer writes again (copy what must outlive the call)."""
        seq, blob_bytes, envelope_bytes, _ = _HEADER.unpack_from(self._map, 0)
        total = _HEADER.size + blob_bytes + envelope_bytes
        if total > self._size:
            self._remap()
        view = self.view
        blob_end = _HEADER.size + blob_bytes
        envelope = pickle.loads(view[blob_end:blob_end + envelope_bytes])
        return seq, view[_HEADER.size:blob_end], envelope

    def seq(self) -> int:
        """The header's sequence number (the message last written)."""
        return int(_HEADER.unpack_from(self._map, 0)[0])

    def _grow(self, needed: int) -> None:
        size = max(needed, 2 * self._size)
        size = -(-size // _PAGE) * _PAGE
        try:
            _allocate(self._fd, size, self._size)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise SharedMemoryFull(size, os.strerror(errno.ENOSPC)) from None
        self._remap()

    def _remap(self) -> None:
        self.view.release()
        self._map.close()
        self._size = os.fstat(self._fd).st_size
        self._map = mmap.mmap(self._fd, self._size)
        self.view = memoryview(self._map)

    def close(self, unlink: bool = False) -> None:
        """Unmap and close (and remove the file). Idempotent."""
        if self._fd < 0:
            return
        with contextlib.suppress(BufferError):  # a view still exported: the mapping goes with the process
            self.view.release()
            self._map.close()
        os.close(self._fd)
        self._fd = -1
        if unlink:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, self.name))


def _allocate(fd: int, size: int, old_size: int) -> None:
    """Grow the file to ``size`` bytes with its pages reserved (ENOSPC now, not SIGBUS later)."""
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, old_size, size - old_size)
    except OSError:
        os.ftruncate(fd, old_size)
        raise


class HopLink:
    """One side of the call link: the buffer this side writes, the one it reads, two eventfds.

    Args:
        out_buffer / in_buffer: the buffers this side writes / reads.
        out_fd / in_fd: the eventfd bumped after writing / waited on before reading.
    """

    def __init__(self, out_buffer: HopBuffer, in_buffer: HopBuffer, out_fd: int, in_fd: int) -> None:
        self.out = out_buffer
        self.inp = in_buffer
        self.out_fd = out_fd
        self.in_fd = in_fd

    def send(self, seq: int, envelope: dict, blob_parts: Sequence[Any] = (), blob_bytes: int = 0) -> None:
        """Write one message and wake the peer.

        Raises:
            SharedMemoryFull: the buffer could not grow; nothing was sent.
        """
        self.out.write(seq, blob_parts, blob_bytes, pickle.dumps(envelope, protocol=5))
        os.eventfd_write(self.out_fd, 1)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the peer bumps this side's eventfd (True), or ``timeout_s`` passes
        (False); the count is consumed."""
        if timeout_s is not None:
            poller = select.poll()
            poller.register(self.in_fd, select.POLLIN)
            if not poller.poll(max(0.0, timeout_s) * 1000):
                return False
        os.eventfd_read(self.in_fd)
        return True

    def wake(self) -> None:
        """Bump this side's own eventfd: a waiting :meth:`wait` returns (to see that the peer died)."""
        with contextlib.suppress(OSError):
            os.eventfd_write(self.in_fd, 1)

    def receive(self) -> tuple[int, memoryview, Any]:
        """The peer's message in place (see :meth:`HopBuffer.read`)."""
        return self.inp.read()

    def close(self, unlink: bool = False) -> None:
        for fd in (self.out_fd, self.in_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.out_fd = self.in_fd = -1
        self.out.close(unlink)
        self.inp.close(unlink)


__all__ = ["INITIAL_BYTES", "HopBuffer", "HopLink"]
