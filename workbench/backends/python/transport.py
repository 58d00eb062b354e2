"""Messages and tensors between the server and a Python model's stub process (both sides).

Control messages are pickled dicts/tuples framed by an 8-byte little-endian length over a
connected ``AF_UNIX`` stream socket (:class:`Channel`; sends serialized by a lock). Tensor
data is never pickled as an array: up to :data:`INLINE_MAX_BYTES` (128 KiB) it travels inline
as raw bytes; a larger tensor is copied once into a POSIX shared-memory segment
(``/dev/shm/<prefix><n>``) of the sender's :class:`SegmentPool`, which the receiver maps
(:class:`SegmentReader`, no copy) and releases (``"released"`` on its next message) for reuse.

Segment names: Triton's reserved ``triton_python_backend_shm_region_`` then
``wb<server pid>_<stub id>_<side><n>`` (``workbench.engine.shm.shared_memory`` refuses client
regions with that prefix); the server removes a dead stub's segments (:func:`remove_segments`)
and a dead server's (:func:`remove_stale_segments`). A full ``/dev/shm`` raises
:class:`SharedMemoryFull`. Why 128 KiB (measured) and the user's view: docs/python-backend.md,
"The hop to the stub". Imported by the stub process: numpy and the standard library only."""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import mmap
import os
import pickle
import queue
import socket
import struct
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np

from workbench.common.bytes_codec import decode_bytes, encode_bytes

#: Triton's prefix for the Python backend's own shared memory (``kTritonSharedMemoryRegionPrefix``)
SHM_PREFIX = "triton_python_backend_shm_region_"
#: where POSIX shared memory lives (``shm_open`` names are files here on Linux)
SHM_DIR = "/dev/shm"
#: tensors of at most this many bytes travel inside the control message
INLINE_MAX_BYTES = 128 * 1024
#: idle shared memory a pool keeps for reuse (per stub and direction)
IDLE_LIMIT_BYTES = 64 * 2**20
_GRAIN = 2**20

_HEADER = struct.Struct("<Q")
_READ_BUFFER_BYTES = 256 * 1024
_CONCAT_MAX_BYTES = 1 << 20


class SharedMemoryFull(OSError):
    """No shared-memory segment could be had for a tensor: ``/dev/shm`` is full (ENOSPC).

    Its text is Triton's (python_backend's ``SharedMemoryManager::GrowIfNeeded``): "Failed to
    increase the shared memory pool size to <bytes> bytes. If you are running Triton inside
    docker, use '--shm-size' flag to control the shared memory region size. Error: <reason>";
    ``<bytes>`` is what this side's pool would have held with the new segment (busy and idle
    segments, bytes). A request that meets it fails with that text (INTERNAL); the model
    serves on.
    """

    def __init__(self, pool_bytes: int, reason: str) -> None:
        super().__init__(errno.ENOSPC, reason)
        self.message = (
            f"Failed to increase the shared memory pool size to {pool_bytes} bytes. If you are "
            "running Triton inside docker, use '--shm-size' flag to control the shared memory "
            f"region size. Error: {reason}")

    def __str__(self) -> str:
        return self.message


class ChannelClosed(Exception):
    """The other end of a :class:`Channel` went away (process exit, crash, close)."""


class Channel:
    """Framed, pickled messages over one connected stream socket.

    ``send`` may be called from any thread; ``recv`` from one reader thread only.

    Args:
        sock: a connected ``AF_UNIX`` ``SOCK_STREAM`` socket; the channel owns it.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._reader = sock.makefile("rb", buffering=_READ_BUFFER_BYTES)
        self._send_lock = threading.Lock()
        self._closed = False

    def send(self, message: Any) -> None:
        """Send one message (a picklable value holding no numpy arrays).

        Raises:
            ChannelClosed: the peer is gone or the channel was closed.
        """
        payload = pickle.dumps(message, protocol=5)
        header = _HEADER.pack(len(payload))
        with self._send_lock:
            try:
                if len(payload) <= _CONCAT_MAX_BYTES:
                    self._sock.sendall(header + payload)
                else:
                    self._sock.sendall(header)
                    self._sock.sendall(payload)
            except (OSError, ValueError) as exc:
                raise ChannelClosed(f"channel closed: {exc}") from None

    def recv(self) -> Any:
        """The next message, blocking.

        Raises:
            ChannelClosed: end of stream (the peer exited or the channel was closed).
        """
        header = self._read_exactly(_HEADER.size)
        (size,) = _HEADER.unpack(header)
        return pickle.loads(self._read_exactly(size))

    def _read_exactly(self, size: int) -> bytes:
        try:
            data = self._reader.read(size)
        except (OSError, ValueError) as exc:
            raise ChannelClosed(f"channel closed: {exc}") from None
        if data is None or len(data) != size:
            raise ChannelClosed("end of stream")
        return data

    def fileno(self) -> int:
        """The socket's file descriptor (-1 once closed)."""
        return self._sock.fileno()

    def shutdown(self) -> None:
        """Wake a blocked ``recv`` with end of stream; sends fail from now on. Idempotent."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Shut down and release the socket. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.shutdown()
        self._reader.close()
        self._sock.close()


# ---------------------------------------------------------------------------- segments
class _Segment:
    """One shared-memory file this side writes into, mapped read-write."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, capacity)  # ENOSPC now, never SIGBUS on a later write
            self._mapping = mmap.mmap(fd, capacity)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.array = np.frombuffer(self._mapping, dtype=np.uint8)

    def destroy(self) -> None:
        del self.array
        self._mapping.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHM_DIR, self.name))


class SegmentPool:
    """Shared-memory segments this side writes tensors into, reused once the peer releases them.

    A tensor is copied once into a segment (``<prefix><n>``) that is *busy* until the peer
    reports (:meth:`release`) that every array over it is gone; it then becomes *idle* and
    is reused for a later tensor of up to its size (no new pages: a copy costs a memcpy, not
    tmpfs page allocation, which is ~5x slower). Idle segments beyond
    ``idle_limit_bytes`` are removed. Thread-safe.

    Args:
        prefix: the name prefix of this pool (unique per stub generation and side).
        idle_limit_bytes: how much idle shared memory to keep for reuse.
    """

    def __init__(self, prefix: str, idle_limit_bytes: int = IDLE_LIMIT_BYTES) -> None:
        self.prefix = prefix
        self._idle_limit = idle_limit_bytes
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._busy: dict[str, _Segment] = {}
        self._idle: list[_Segment] = []
        self._closed = False

    def write(self, data: memoryview) -> tuple[str, int]:
        """Copy ``data`` (C-order bytes) into a free segment; returns ``(name, capacity)``.

        Raises:
            SharedMemoryFull: /dev/shm is full (ENOSPC).
            OSError: the pool is closed.
        """
        size = data.nbytes
        with self._lock:
            segment = self._take_idle(size)
        if segment is None:
            segment = self._new_segment(_capacity(size))
        np.copyto(segment.array[:size], np.frombuffer(data, dtype=np.uint8))
        with self._lock:
            if not self._closed:
                self._busy[segment.name] = segment
                return segment.name, segment.capacity
        segment.destroy()
        raise OSError("shared-memory pool closed")

    def _new_segment(self, capacity: int) -> _Segment:
        try:
            return _Segment(f"{self.prefix}{next(self._ids)}", capacity)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            with self._lock:
                held = sum(s.capacity for s in (*self._busy.values(), *self._idle))
            raise SharedMemoryFull(held + capacity, os.strerror(errno.ENOSPC)) from None

    def _take_idle(self, size: int) -> _Segment | None:
        if self._closed:
            raise OSError("shared-memory pool closed")
        fitting = [s for s in self._idle if size <= s.capacity <= 2 * max(size, _GRAIN)]
        if not fitting:
            return None
        segment = min(fitting, key=lambda s: s.capacity)
        self._idle.remove(segment)
        return segment

    def idle_bytes(self) -> int:
        """Bytes of the idle segments, kept for reuse (``c_python_backend_utils``'s
        ``shared_memory.free_memory()``)."""
        with self._lock:
            return sum(s.capacity for s in self._idle)

    def release(self, names: list[str]) -> None:
        """The peer dropped its arrays over ``names``: make them reusable (or remove them)."""
        doomed = []
        with self._lock:
            for name in names:
                segment = self._busy.pop(name, None)
                if segment is not None:
                    self._idle.append(segment)
            self._idle.sort(key=lambda s: s.capacity)
            while self._idle and sum(s.capacity for s in self._idle) > self._idle_limit:
                doomed.append(self._idle.pop())
        for segment in doomed:
            segment.destroy()

    def close(self) -> None:
        """Unmap and remove every segment (the peer is gone). Idempotent."""
        with self._lock:
            self._closed = True
            segments = [*self._busy.values(), *self._idle]
            self._busy, self._idle = {}, []
        for segment in segments:
            segment.destroy()


def _capacity(size: int) -> int:
    """Segment size for ``size`` bytes: rounded up to 1 MiB (so close sizes share segments)."""
    return max(_GRAIN, -(-size // _GRAIN) * _GRAIN)


class SegmentReader:
    """Maps the peer's segments, one mapping per tensor, and records when they are dropped.

    The name of a segment goes on the :meth:`released` list once the last array over its
    mapping is garbage (a ``weakref.finalize`` on the mapping); the owner sends that list
    to the peer with its next message so the peer can reuse the segment.

    Args:
        prefix: every segment from this peer must start with it (others are refused).
        writable: map read-write (the stub: models may change their inputs in place, as in
            Triton) or read-only (the server).
    """

    def __init__(self, prefix: str, writable: bool) -> None:
        self.prefix = prefix
        self._writable = writable
        self._released: queue.SimpleQueue = queue.SimpleQueue()

    def map(self, name: str, capacity: int) -> mmap.mmap:
        """A new mapping of segment ``name`` (``capacity`` bytes).

        Raises:
            ValueError: a name outside this peer's prefix.
            OSError: the segment does not exist.
        """
        if not name.startswith(self.prefix) or "/" in name:
            raise ValueError(f"shared-memory segment '{name}' is not this stub's")
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR if self._writable else os.O_RDONLY)
        try:
            access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
            mapping = mmap.mmap(fd, capacity, access=access)
        finally:
            os.close(fd)
        weakref.finalize(mapping, self._released.put, name)
        return mapping

    def put_back(self, names: list[str]) -> None:
        """Names taken by :meth:`released` for a message that was not sent: reported again
        with the next one."""
        for name in names:
            self._released.put(name)

    def released(self) -> list[str]:
        """Names whose arrays are all gone since the last call (never blocks)."""
        names = []
        while True:
            try:
                names.append(self._released.get_nowait())
            except queue.Empty:
                return names


def remove_segments(prefix: str) -> int:
    """Unlink every segment whose name starts with ``prefix``; returns how many."""
    removed = 0
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed += 1
            except OSError:
                pass
    return removed


def remove_stale_segments() -> int:
    """Unlink the segments left by server processes that no longer exist (killed servers)."""
    removed = 0
    start = SHM_PREFIX + "wb"
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(start):
            continue
        pid_text = name[len(start) :].split("_", 1)[0]
        if pid_text.isdigit() and not _process_exists(int(pid_text)):
            removed += remove_segments(name)
    return removed


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------- tensors
#: one tensor on the wire: (name, dtype, shape, payload); dtype is numpy's ``dtype.str``
#: (``"<f4"``), ``"bfloat16"`` (BF16: its ``str`` is a plain ``"<V2"``) or ``"BYTES"``;
#: payload is ``bytes`` (inline), an ``int`` offset into a call-link message's blob
#: (:class:`Blob`) or ``(segment, capacity, nbytes)``.
WireTensor = tuple[str, str, tuple[int, ...], Any]
_BF16 = np.dtype(ml_dtypes.bfloat16)  # importing ml_dtypes also lets np.dtype("bfloat16") find it


class Blob:
    """The inline tensors of one call-link message (:mod:`.hop`), gathered to be copied back to
    back into its shared-memory buffer: a tensor's payload is then the ``int`` offset of its
    bytes in the blob (its size follows from shape and dtype; no per-tensor ``bytes`` object,
    one copy into the mapping). BYTES tensors stay inline ``bytes`` (their size does not
    follow from the shape)."""

    __slots__ = ("nbytes", "parts")

    def __init__(self) -> None:
        self.parts: list[memoryview] = []
        self.nbytes = 0

    def add(self, raw: memoryview) -> int:
        """Append ``raw`` (flat bytes); returns its offset in the blob."""
        start = self.nbytes
        self.nbytes = start + raw.nbytes
        self.parts.append(raw)
        return start


def encode_tensor(name: str, array: np.ndarray, pool: SegmentPool, blob: Blob | None = None) -> WireTensor:
    """One tensor for a message: inline when small (into ``blob`` when given, else as
    ``bytes``), else copied once into a pool segment.

    BYTES tensors (numpy ``object`` / ``bytes_`` arrays) use Triton's length-prefixed
    encoding (4-byte little-endian length + bytes per element; ``str`` elements as UTF-8).

    Raises:
        OSError: no segment could be had (/dev/shm full).
    """
    dtype = _WIRE_DTYPES.get(array.dtype)
    if dtype is None:
        dtype = _wire_dtype(array.dtype)
    if dtype == "BYTES":
        raw = memoryview(encode_bytes(array))
    else:
        # flat uint8 first: memoryview.cast refuses a view with a zero in its shape ([1,0])
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
    if raw.nbytes <= INLINE_MAX_BYTES:
        if blob is None or dtype == "BYTES":
            return name, dtype, tuple(array.shape), raw.tobytes()
        return name, dtype, tuple(array.shape), blob.add(raw)
    segment, capacity = pool.write(raw)
    return name, dtype, tuple(array.shape), (segment, capacity, raw.nbytes)


def encode_tensors(tensors: Iterable[tuple[str, np.ndarray]], pool: SegmentPool,
                   blob: Blob | None = None) -> list[WireTensor]:
    """:func:`encode_tensor` for each ``(name, array)``; when one fails, the segments the
    others took go back to ``pool`` before the error is raised (no segment stays busy for a
    message that is never sent).

    Raises:
        SharedMemoryFull / OSError: as :func:`encode_tensor`.
    """
    encoded: list[WireTensor] = []
    try:
        for name, array in tensors:
            encoded.append(encode_tensor(name, array, pool, blob))
    except BaseException:
        pool.release([wire[3][0] for wire in encoded if isinstance(wire[3], tuple)])
        raise
    return encoded


def decode_tensor(wire: WireTensor, reader: SegmentReader, blob: Any = None) -> tuple[str, np.ndarray]:
    """``(name, array)`` from :func:`encode_tensor`'s tuple; a segment is mapped, not copied
    (BYTES are copied out into ``bytes`` objects and the mapping dropped at once); a blob
    tensor is a view of ``blob`` (the message's blob, copied out of the call link once per
    message: ``bytes`` on the server, a writable ``bytearray`` in the stub).

    Raises:
        ValueError: a segment name outside the reader's prefix.
        OSError: the segment is missing.
    """
    name, dtype, shape, payload = wire
    if type(payload) is int:  # an offset into the message's blob (never BYTES)
        return name, np.frombuffer(blob, _dtype(dtype), math.prod(shape), payload).reshape(shape)
    if isinstance(payload, bytes):
        if dtype == "BYTES":
            return name, decode_bytes(payload).reshape(shape)
        buffer: Any = bytearray(payload) if reader._writable else payload
        return name, np.frombuffer(buffer, dtype=np.dtype(dtype)).reshape(shape)
    segment, capacity, nbytes = payload
    mapping = reader.map(segment, capacity)
    if dtype == "BYTES":
        with memoryview(mapping) as view:
            return name, decode_bytes(view[:nbytes]).reshape(shape)
    numpy_dtype = np.dtype(dtype)
    array = np.frombuffer(mapping, dtype=numpy_dtype, count=nbytes // numpy_dtype.itemsize)
    return name, array.reshape(shape)


_DTYPES: dict[str, np.dtype] = {}
_WIRE_DTYPES: dict[np.dtype, str] = {}


def _wire_dtype(dtype: np.dtype) -> str:
    """The wire name of a numpy dtype (see :data:`WireTensor`), remembered."""
    name = "BYTES" if dtype.kind in ("O", "S") else "bfloat16" if dtype == _BF16 else dtype.str
    _WIRE_DTYPES[dtype] = name
    return name


def _dtype(text: str) -> np.dtype:
    dtype = _DTYPES.get(text)
    if dtype is None:
        dtype = _DTYPES[text] = np.dtype(text)
    return dtype


__all__ = [
    "INLINE_MAX_BYTES",
    "SHM_DIR",
    "SHM_PREFIX",
    "Blob",
    "Channel",
    "ChannelClosed",
    "SegmentPool",
    "SegmentReader",
    "SharedMemoryFull",
    "WireTensor",
    "decode_tensor",
    "encode_tensor",
    "encode_tensors",
    "remove_segments",
    "remove_stale_segments",
]
