"""Copies in and out of system regions (workbench.engine.shm.shm_copy) on real /dev/shm objects: the
same bytes on both paths (process_vm on the server's mapping, and pread / pwrite) at sizes around
the split threshold and odd offsets; a truncated object is the clean error, never a SIGBUS (these
tests run in the pytest process: a fault would kill it); the kernel refusing process_vm (EPERM, as
a container's seccomp profile does) falls back to the descriptor with the right bytes; closing a
region while a copy runs unmaps it only when that copy is done."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
import uuid

import numpy as np
import pytest

from workbench.common.errors import InvalidArgument
from workbench.engine.shm import shm_copy
from workbench.engine.shm.shared_memory import SharedMemoryRegistry
from workbench.engine.shm.shm_copy import SPLIT_BYTES, ObjectEnded

REGION_OFFSET = 3 * 4096 + 5  # not page aligned: the mapping starts below the region
SIZE = 2 * SPLIT_BYTES + 4096


@pytest.fixture
def shm_object():
    """``(key, path, data)``: a /dev/shm object holding random ``data``, unlinked after."""
    key = f"/wb_copy_{uuid.uuid4().hex}"
    path = f"/dev/shm/{key[1:]}"
    data = np.random.default_rng(7).integers(0, 256, REGION_OFFSET + SIZE, dtype=np.uint8)
    with open(path, "wb") as file:
        file.write(data.tobytes())
    yield key, path, data
    os.unlink(path)


@pytest.fixture
def registry():
    registry = SharedMemoryRegistry(allow_client_shm=True)
    yield registry
    registry.close()


@pytest.mark.parametrize("offset, size", [(0, 1), (1, 4095), (4093, 4099), (7, SPLIT_BYTES - 1),
                                          (0, SPLIT_BYTES), (3, SPLIT_BYTES + 1), (0, SIZE),
                                          (SIZE - SPLIT_BYTES - 3, SPLIT_BYTES + 3)])
def test_round_trips_are_byte_exact(shm_object, copy_path, registry, offset, size) -> None:
    key, path, data = shm_object
    registry.register_system("r", key, REGION_OFFSET, SIZE)
    region = registry.acquire("r", offset, size)
    try:
        start = REGION_OFFSET + offset
        assert bytes(region.read(offset, size)) == data[start:start + size].tobytes()
        new = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
        region.write(offset, new.data)
        with open(path, "rb") as file:
            written = np.frombuffer(file.read(), np.uint8)
        expected = data.copy()
        expected[start:start + size] = new
        np.testing.assert_array_equal(written, expected)  # nothing outside the bytes changed
        assert region.shm.mapped() == (copy_path == "process_vm")
    finally:
        registry.release(region)


def test_a_write_into_a_truncated_object_is_the_clean_error(shm_object, copy_path, registry) -> None:
    key, path, _ = shm_object
    registry.register_system("r", key, REGION_OFFSET, SIZE)
    region = registry.acquire("r", 0, SIZE)
    try:
        region.read(0, 16)  # mapped (process_vm path) before the client shrinks the object
        os.truncate(path, REGION_OFFSET + SIZE // 2)
        with pytest.raises(InvalidArgument, match=r"^Invalid shared memory region: 'r': its shared memory "
                           rf"object '{key}' is now {REGION_OFFSET + SIZE // 2} bytes, but the region was "
                           "registered over bytes"):
            region.write(0, np.zeros(SIZE, np.uint8).data)
    finally:
        registry.release(region)


def test_a_copy_racing_a_truncation_stops_with_object_ended(shm_object) -> None:
    """Past the size check: the copy itself meets the end of the object (EFAULT on the mapping)."""
    if not shm_copy.process_vm_in_use():
        pytest.skip("no process_vm_readv here")
    _, path, _ = shm_object
    fd = os.open(path, os.O_RDWR)
    obj = shm_copy.ShmObject(fd, REGION_OFFSET, SIZE)
    try:
        obj.read_into(np.empty(16, np.uint8).data, 0)
        assert obj.mapped()
        os.truncate(path, REGION_OFFSET + 4096)
        for copy in (obj.write_from, obj.read_into):
            with pytest.raises(ObjectEnded) as ended:
                copy(np.zeros(SIZE, np.uint8).data, 0)
            assert ended.value.object_size == REGION_OFFSET + 4096
        assert os.fstat(fd).st_size == REGION_OFFSET + 4096  # a write never grows the object
    finally:
        obj.close()


def test_process_vm_refused_falls_back_to_the_descriptor(shm_object, registry, monkeypatch) -> None:
    lib = shm_copy.bound_libc()
    if lib is None or not shm_copy.process_vm_in_use():
        pytest.skip("no process_vm_readv here")
    calls = []

    def refuse(*args) -> int:
        calls.append(args)
        ctypes.set_errno(errno.EPERM)
        return -1

    monkeypatch.setattr(shm_copy, "USE_PROCESS_VM", True)  # restored after: the refusal clears it
    monkeypatch.setattr(lib, "readv", refuse)
    monkeypatch.setattr(lib, "writev", refuse)
    key, path, data = shm_object
    registry.register_system("r", key, REGION_OFFSET, SIZE)
    region = registry.acquire("r", 1, SIZE - 1)
    try:
        assert bytes(region.read(1, SIZE - 1)) == data[REGION_OFFSET + 1:].tobytes()
        assert calls
        assert not shm_copy.process_vm_in_use()  # switched off for the rest of the process
        new = np.arange(SIZE - 1, dtype=np.uint8)
        region.write(1, new.data)
        with open(path, "rb") as file:
            file.seek(REGION_OFFSET + 1)
            assert file.read() == new.tobytes()
    finally:
        registry.release(region)


@pytest.mark.parametrize("boundary", ["process_vm_copy", "pread_into"])
def test_closing_a_region_while_a_copy_runs_waits_for_it(shm_object, registry, monkeypatch,
                                                          boundary) -> None:
    if boundary == "pread_into":
        monkeypatch.setattr(shm_copy, "USE_PROCESS_VM", False)
    elif not shm_copy.process_vm_in_use():
        pytest.skip("no process_vm_readv here")
    started, go = threading.Event(), threading.Event()
    real = getattr(shm_copy, boundary)

    def held_copy(*args):
        started.set()
        assert go.wait(10)
        return real(*args)

    monkeypatch.setattr(shm_copy, boundary, held_copy)
    key, _, data = shm_object
    registry.register_system("r", key, REGION_OFFSET, SIZE)
    region = registry.acquire("r", 0, 4096)
    obj = region.shm
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(bytes(region.read(0, 4096))))
    reader.start()
    try:
        assert started.wait(10)
        registry.close()  # shutdown removes regions even while in use
        assert os.fstat(obj.fd).st_size == data.size  # the descriptor is still open ...
        assert obj.mapped() == (boundary == "process_vm_copy")  # ... and the mapping still there
    finally:
        go.set()
        reader.join(10)
    assert out == [data[REGION_OFFSET:REGION_OFFSET + 4096].tobytes()]
    assert obj.fd == -1 and not obj.mapped()  # released by the copy that ended last
    with pytest.raises(InvalidArgument, match=r"^Invalid shared memory region: 'r': Bad file descriptor$"):
        region.read(0, 16)


def test_copies_outside_the_region_are_refused_before_any_byte_moves(shm_object, copy_path) -> None:
    _, path, data = shm_object
    obj = shm_copy.ShmObject(os.open(path, os.O_RDWR), REGION_OFFSET, 4096)
    try:
        for offset, size in ((4000, 97), (-1, 1), (4096, 1)):
            with pytest.raises(ValueError, match="outside the region"):
                obj.write_from(np.zeros(size, np.uint8).data, offset)
            with pytest.raises(ValueError, match="outside the region"):
                obj.read_into(np.zeros(size, np.uint8).data, offset)
        with open(path, "rb") as file:
            assert file.read() == data.tobytes()
    finally:
        obj.close()
