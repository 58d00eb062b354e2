"""Large reads of a system region are split over two threads (Region.read): the same bytes, the
same truncation error, on both copy paths (process_vm on the mapping, and pread)."""

from __future__ import annotations

import os
import threading
import uuid

import numpy as np
import pytest

from workbench.common.errors import InvalidArgument
from workbench.engine.shm import shm_copy
from workbench.engine.shm.shared_memory import SPLIT_READ_BYTES, SharedMemoryRegistry

OFFSET = (1 << 20) + 3  # an odd offset: the halves meet at an unaligned byte


@pytest.fixture
def region_object():
    key = f"/wb_split_{uuid.uuid4().hex}"
    path = f"/dev/shm/{key[1:]}"
    data = np.random.default_rng(2).integers(0, 256, OFFSET + SPLIT_READ_BYTES + 5, dtype=np.uint8)
    with open(path, "wb") as file:
        file.write(data.tobytes())
    yield key, path, data
    os.unlink(path)


def test_a_large_read_uses_two_threads_and_gives_the_same_bytes(region_object, copy_path,
                                                                monkeypatch) -> None:
    key, _, data = region_object
    registry = SharedMemoryRegistry(allow_client_shm=True)
    registry.register_system("r", key, 0, data.size)
    threads: set[int] = set()
    boundary = "process_vm_copy" if copy_path == "process_vm" else "pread_into"
    real = getattr(shm_copy, boundary)

    def copy(*args):
        threads.add(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(shm_copy, boundary, copy)
    size = SPLIT_READ_BYTES + 1
    region = registry.acquire("r", OFFSET, size)
    try:
        assert bytes(region.read(OFFSET, size)) == data[OFFSET:OFFSET + size].tobytes()
        assert len(threads) == 2
        threads.clear()
        assert bytes(region.read(5, 1000)) == data[5:1005].tobytes()  # small: one thread
        assert len(threads) == 1
        assert region.shm is not None and region.shm.mapped() == (copy_path == "process_vm")
    finally:
        registry.release(region)
        registry.close()


def test_a_large_read_of_a_truncated_object_is_the_clean_error(region_object, copy_path) -> None:
    key, path, data = region_object
    registry = SharedMemoryRegistry(allow_client_shm=True)
    registry.register_system("r", key, 0, data.size)
    region = registry.acquire("r", 0, data.size)
    try:
        os.truncate(path, OFFSET + SPLIT_READ_BYTES // 4)  # the second half is gone
        with pytest.raises(InvalidArgument, match=r"is now .* bytes, but the region was registered"):
            region.read(0, data.size)
    finally:
        registry.release(region)
        registry.close()
