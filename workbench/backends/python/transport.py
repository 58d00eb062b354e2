"""Messages and tensors between the server and a Python model's stub process (both sides).

Control messages are pickled Python dicts/tuples framed by an 8-byte little-endian length,
sent over a connected ``AF_UNIX`` stream socket (:class:`Channel`; sends from several
threads are serialized by a lock). Tensor *data* is never pickled as an array:

* a tensor of at most :data:`INLINE_MAX_BYTES` travels inline as raw bytes inside the
  control message (one copy into the message, one out of it);
* a larger tensor is written once into its own POSIX shared-memory segment
  (``/dev/shm/<prefix><n>``) and the message carries only the segment's name. The
  receiver maps the segment (zero copy: numpy views the mapping) and unlinks the name at
  once, so the memory is freed when the last array over it is dropped.

Why 64 KiB: a segment costs about 45 µs of fixed work (open, write, mmap, unlink, page
faults) while 64 KiB through the socket costs about 10-20 µs (measured on this project's
2-core box; ``bench/python_backend_overhead.py``); above that size the single copy of
shared memory wins.

Segment names start with Triton's reserved prefix ``triton_python_backend_shm_region_``
(``workbench.engine.shared_memory`` refuses client regions whose key starts with it, as
Triton does), then ``wb<server pid>_<instance>_<generation>_<side><n>``: no client region
can collide with them, and the server can remove every segment of a stub that crashed
(:func:`remove_segments`) or of a server process that died (:func:`remove_stale_segments`).

This module is imported by the stub process: numpy and the standard library only.
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import socket
import struct
import threading
from typing import Any

import numpy as np

#: Triton's prefix for the Python backend's own shared memory (``kTritonSharedMemoryRegionPrefix``)
SHM_PREFIX = "triton_python_backend_shm_region_"
#: where POSIX shared memory lives (``shm_open`` names are files here on Linux)
SHM_DIR = "/dev/shm"
#: tensors of at most this many bytes travel inside the control message
INLINE_MAX_BYTES = 64 * 1024

_HEADER = struct.Struct("<Q")
_LENGTH = struct.Struct("<I")
_READ_BUFFER_BYTES = 256 * 1024
_CONCAT_MAX_BYTES = 1 << 20


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

    def shutdown(self) -> None:
        """Wake a blocked ``recv`` with end of stream; sends fail from now on. Idempotent."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Shut down and release the socket. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.shutdown()
        self._reader.close()
        self._sock.close()


# ---------------------------------------------------------------------------- segments
class SegmentWriter:
    """Creates shared-memory segments named ``<prefix><n>`` (n = 0, 1, ...), one per tensor.

    Args:
        prefix: the name prefix of this writer (unique per stub generation and side).
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._ids = itertools.count()

    def write(self, data: memoryview) -> str:
        """Copy ``data`` (bytes, C order) into a new segment; returns the segment name.

        Raises:
            OSError: /dev/shm is full or not writable (the segment is removed).
        """
        name = f"{self.prefix}{next(self._ids)}"
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            written, size = 0, len(data)
            while written < size:
                written += os.write(fd, data[written:])
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return name


def map_segment(name: str, size: int, writable: bool) -> mmap.mmap:
    """Map segment ``name`` (``size`` bytes) and unlink its name; the mapping keeps the memory.

    ``writable`` gives a private copy-on-write mapping (the model may change its input arrays
    in place, as with Triton); otherwise the mapping is read-only.

    Raises:
        OSError: the segment does not exist or is shorter than ``size``.
    """
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_RDONLY)
    try:
        access = mmap.ACCESS_COPY if writable else mmap.ACCESS_READ
        return mmap.mmap(fd, size, access=access)
    finally:
        os.close(fd)
        os.unlink(path)


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
#: (``"<f4"``) or ``"BYTES"``; payload is ``bytes`` (inline) or ``(segment name, byte size)``.
WireTensor = tuple[str, str, tuple[int, ...], Any]


def encode_tensor(name: str, array: np.ndarray, writer: SegmentWriter) -> WireTensor:
    """One tensor for a message: inline when small, else in a new shared-memory segment.

    BYTES tensors (numpy ``object`` / ``bytes_`` arrays) use Triton's length-prefixed
    encoding (4-byte little-endian length + bytes per element; ``str`` elements as UTF-8).

    Raises:
        OSError: the segment could not be created (/dev/shm full).
    """
    if array.dtype.kind in ("O", "S"):
        dtype, raw = "BYTES", memoryview(serialize_bytes(array))
    else:
        dtype = array.dtype.str
        raw = memoryview(np.ascontiguousarray(array)).cast("B")
    if raw.nbytes <= INLINE_MAX_BYTES:
        return name, dtype, tuple(array.shape), raw.tobytes()
    return name, dtype, tuple(array.shape), (writer.write(raw), raw.nbytes)


def decode_tensor(wire: WireTensor, *, writable: bool, segment_prefix: str) -> tuple[str, np.ndarray]:
    """``(name, array)`` from :func:`encode_tensor`'s tuple; maps (and unlinks) its segment.

    Args:
        writable: give the receiver writable arrays (a copy for inline data, a private
            mapping for segments).
        segment_prefix: the prefix every segment name from this peer must start with.

    Raises:
        ValueError: a segment name outside ``segment_prefix`` (never unlinked).
        OSError: the segment is missing.
    """
    name, dtype, shape, payload = wire
    if isinstance(payload, bytes):
        buffer: Any = bytearray(payload) if writable else payload
    else:
        segment, size = payload
        if not segment.startswith(segment_prefix) or "/" in segment:
            raise ValueError(f"shared-memory segment '{segment}' is not this stub's")
        buffer = map_segment(segment, size, writable)
    if dtype == "BYTES":
        return name, deserialize_bytes(buffer).reshape(shape)
    array = np.frombuffer(buffer, dtype=np.dtype(dtype))
    return name, array.reshape(shape)


def release_payload(wire: WireTensor, segment_prefix: str) -> None:
    """Unlink a tensor's segment that will never be decoded (its request is gone)."""
    payload = wire[3]
    if not isinstance(payload, bytes):
        segment = payload[0]
        if segment.startswith(segment_prefix) and "/" not in segment:
            try:
                os.unlink(os.path.join(SHM_DIR, segment))
            except OSError:
                pass


def serialize_bytes(array: np.ndarray) -> bytes:
    """Triton's BYTES encoding of ``array`` in C order (``bytes`` kept, others ``str`` + UTF-8)."""
    parts = []
    for item in array.reshape(-1):
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes(buffer: Any) -> np.ndarray:
    """Triton's BYTES encoding -> 1-D numpy object array of ``bytes``.

    Raises:
        ValueError: a length prefix points past the end of ``buffer``.
    """
    view = memoryview(buffer)
    items, pos, end = [], 0, len(view)
    while pos < end:
        if end - pos < 4:
            raise ValueError("incomplete string length indicator in BYTES tensor")
        (length,) = _LENGTH.unpack_from(view, pos)
        pos += 4
        if pos + length > end:
            raise ValueError("incomplete string data in BYTES tensor")
        items.append(bytes(view[pos : pos + length]))
        pos += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


__all__ = [
    "SHM_PREFIX",
    "SHM_DIR",
    "INLINE_MAX_BYTES",
    "Channel",
    "ChannelClosed",
    "SegmentWriter",
    "WireTensor",
    "map_segment",
    "remove_segments",
    "remove_stale_segments",
    "encode_tensor",
    "decode_tensor",
    "release_payload",
    "serialize_bytes",
    "deserialize_bytes",
]
