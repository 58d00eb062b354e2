"""Reused destination buffers of large shared-memory reads (workbench.engine.shm.read_buffers): a buffer
comes back only once nothing refers to it, so a tensor still alive never sees its bytes change; real
/dev/shm objects, the real engine and ONNX Runtime for the requests."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
import tritonclient.utils.shared_memory as shm

from workbench import InferenceRequest, RequestedOutput, Server, ServerOptions, tensor_from_shared_memory
from workbench.engine.shm import read_buffers
from workbench.engine.shm.read_buffers import MIN_POOLED_BYTES
from workbench.engine.shm.shared_memory import SharedMemoryRegistry

SIZE = MIN_POOLED_BYTES + 4096


@pytest.fixture(autouse=True)
def empty_pool():
    read_buffers.clear()
    yield
    read_buffers.clear()


def _address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data


def test_a_buffer_comes_back_only_when_nothing_refers_to_it() -> None:
    first = read_buffers.take(SIZE)
    address = _address(first)
    tensor = np.frombuffer(first, np.float32).reshape(-1, 1024)  # what a request's input holds
    del first
    second = read_buffers.take(SIZE)
    assert _address(second) != address  # the tensor still refers to the first buffer
    del tensor, second
    assert _address(read_buffers.take(SIZE)) == address  # nothing does now: reused
    assert read_buffers.pooled_bytes() == 2 * SIZE


def test_small_reads_are_not_pooled_and_the_pool_is_capped(monkeypatch) -> None:
    read_buffers.take(MIN_POOLED_BYTES - 1)
    assert read_buffers.pooled_bytes() == 0
    monkeypatch.setattr(read_buffers, "POOL_BYTES", 2 * SIZE)
    held = [read_buffers.take(SIZE) for _ in range(3)]  # the third does not fit: not pooled
    assert read_buffers.pooled_bytes() == 2 * SIZE
    del held
    kept = read_buffers.take(SIZE)  # reused, so in use: stays
    read_buffers.take(SIZE - 4096)  # another size: the free buffer makes room
    assert read_buffers.pooled_bytes() == SIZE + (SIZE - 4096)
    assert len(kept) == SIZE


def test_region_reads_never_overwrite_a_live_tensor() -> None:
    key = f"/wb_pool_{uuid.uuid4().hex}"
    path = f"/dev/shm/{key[1:]}"
    with open(path, "wb") as file:
        file.write(bytes(range(256)) * (SIZE // 256))
    registry = SharedMemoryRegistry(allow_client_shm=True)
    try:
        registry.register_system("r", key, 0, SIZE)
        region = registry.acquire("r", 0, SIZE)
        kept = np.frombuffer(region.read(0, SIZE), np.uint8)
        expected = kept.copy()
        with open(path, "r+b") as file:
            file.write(bytes(SIZE))  # the client writes new bytes for the next request
        fresh = region.read(0, SIZE)
        assert bytes(fresh) == bytes(SIZE)
        np.testing.assert_array_equal(kept, expected)  # the first request's tensor is untouched
        registry.release(region)
    finally:
        registry.close()
        os.unlink(path)


@pytest_asyncio.fixture
async def engine(test_repository: Path):
    options = ServerOptions(model_repository=[str(test_repository)], allow_client_shm=True)
    async with Server(options) as server:
        yield server


async def test_concurrent_large_requests_keep_their_own_bytes(engine: Server, shm_segments) -> None:
    n = SIZE // 4
    inputs = [np.full((1, n), value, np.float32) for value in (1.0, 2.0, 3.0, 4.0)]
    key, handle = shm_segments(2 * SIZE * len(inputs))
    for i, data in enumerate(inputs):
        shm.set_shared_memory_region(handle, [data], offset=2 * SIZE * i)
        await engine.shared_memory.register_system_shared_memory(f"in{i}", key, 2 * SIZE * i, SIZE)
        await engine.shared_memory.register_system_shared_memory(f"out{i}", key, 2 * SIZE * i + SIZE, SIZE)

    def request(i: int) -> InferenceRequest:
        return InferenceRequest(
            "identity_fp32",
            [tensor_from_shared_memory("INPUT0", "FP32", [1, n], {"shared_memory_region": f"in{i}",
                                       "shared_memory_byte_size": SIZE}, model="identity_fp32")],
            outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": f"out{i}",
                                                 "shared_memory_byte_size": SIZE})])

    for _ in range(2):  # the second round reuses the first round's buffers
        await asyncio.gather(*(engine.infer(request(i)) for i in range(len(inputs))))
        for i, data in enumerate(inputs):
            out = shm.get_contents_as_numpy(handle, np.float32, [1, n], offset=2 * SIZE * i + SIZE)
            np.testing.assert_array_equal(out, data)
    assert read_buffers.pooled_bytes() >= SIZE
