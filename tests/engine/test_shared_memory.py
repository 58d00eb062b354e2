"""The engine's shared-memory registry and shm inference, on the real Server and real models."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto

from workbench import (
    AlreadyExists,
    InferenceRequest,
    InvalidArgument,
    NotFound,
    RequestedOutput,
    Server,
    ServerOptions,
    Tensor,
    Unsupported,
    tensor_from_shared_memory,
)
from workbench.backends.registry import register_backend
from workbench.common.datatypes import serialize_bytes
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.models import identity_graph, write_model

DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


@pytest_asyncio.fixture
async def shm_server(test_repository: Path, tmp_path: Path):
    """The test models plus identity_bytes and the gated fake model, client shm allowed."""
    register_backend("fake", FakeBackend)
    repo = tmp_path / "repo"
    write_model(repo, "identity_bytes", None, identity_graph(TensorProto.STRING, ["batch", "n"]))
    write_fake_model(repo, "fake", count=1)
    BEHAVIOUR.reset()
    options = ServerOptions(model_repository=[str(test_repository), str(repo)], allow_client_shm=True)
    async with Server(options) as server:
        yield server
    BEHAVIOUR.gate.set()


def shm_input(name: str, datatype: str, shape: list, region: str, byte_size: int, offset: int = 0) -> Tensor:
    params = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset:
        params["shared_memory_offset"] = offset
    return tensor_from_shared_memory(name, datatype, shape, params, model="m")


def shm_output(name: str, region: str, byte_size: int, offset: int = 0) -> RequestedOutput:
    return RequestedOutput(name, {"shared_memory_region": region, "shared_memory_offset": offset,
                                  "shared_memory_byte_size": byte_size})


async def test_register_status_unregister(shm_server: Server, shm_segments) -> None:
    key, _ = shm_segments(256)
    await shm_server.shared_memory.register_system_shared_memory("a", key, 0, 128)
    await shm_server.shared_memory.register_system_shared_memory("b", key, 100, 156)
    assert await shm_server.shared_memory.system_shared_memory_status() == [
        {"name": "a", "key": key, "offset": 0, "byte_size": 128},
        {"name": "b", "key": key, "offset": 100, "byte_size": 156},
    ]
    assert await shm_server.shared_memory.system_shared_memory_status("b") == [
        {"name": "b", "key": key, "offset": 100, "byte_size": 156}]
    assert await shm_server.shared_memory.cuda_shared_memory_status() == []
    with pytest.raises(NotFound, match="Unable to find system shared memory region: 'c'"):
        await shm_server.shared_memory.system_shared_memory_status("c")
    with pytest.raises(NotFound, match="registered as system shared memory, not CUDA"):
        await shm_server.shared_memory.cuda_shared_memory_status("a")
    await shm_server.shared_memory.unregister_system_shared_memory("a")
    await shm_server.shared_memory.unregister_system_shared_memory("never-registered")  # not an error (Triton)
    assert [r["name"] for r in await shm_server.shared_memory.system_shared_memory_status()] == ["b"]
    await shm_server.shared_memory.unregister_system_shared_memory()
    assert await shm_server.shared_memory.system_shared_memory_status() == []


async def test_register_misuse_has_triton_texts(shm_server: Server, shm_segments) -> None:
    key, _ = shm_segments(64)
    await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 64)
    with pytest.raises(AlreadyExists, match="shared memory region 'r' already in manager"):
        await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 8)
    with pytest.raises(InvalidArgument, match="Unable to open shared memory region: '/wb_no_such_key'"):
        await shm_server.shared_memory.register_system_shared_memory("x", "/wb_no_such_key", 0, 8)
    with pytest.raises(InvalidArgument, match=re.escape("invalid shm key '/../../etc/passwd'")):
        await shm_server.shared_memory.register_system_shared_memory("x", "/../../etc/passwd", 0, 8)
    with pytest.raises(InvalidArgument, match="failed to register shared memory region 'x': invalid args"):
        await shm_server.shared_memory.register_system_shared_memory("x", key, 32, 64)
    with pytest.raises(InvalidArgument, match="failed to register shared memory region 'x': invalid args"):
        await shm_server.shared_memory.register_system_shared_memory("x", key, 0, 0)
    with pytest.raises(InvalidArgument, match="invalid shm key '///'"):
        await shm_server.shared_memory.register_system_shared_memory("x", "///", 0, 8)
    with pytest.raises(InvalidArgument, match="contains the reserved prefix"):
        await shm_server.shared_memory.register_system_shared_memory("x", "/triton_python_backend_shm_region_1", 0, 8)
    assert [r["name"] for r in await shm_server.shared_memory.system_shared_memory_status()] == ["r"]


async def test_client_shm_disabled_refuses_register_but_reports_status(test_repository: Path,
                                                                       shm_segments) -> None:
    key, _ = shm_segments(64)
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        with pytest.raises(Unsupported) as error:
            await server.shared_memory.register_system_shared_memory("r", key, 0, 64)
        assert error.value.message == DISABLED
        with pytest.raises(Unsupported, match="Client shared memory is disabled"):
            await server.shared_memory.unregister_system_shared_memory()
        with pytest.raises(Unsupported, match="Client shared memory is disabled"):
            await server.shared_memory.register_cuda_shared_memory("c", b"\0" * 64, 0, 64)
        assert await server.shared_memory.system_shared_memory_status() == []
        assert await server.shared_memory.cuda_shared_memory_status() == []


async def test_cuda_register_without_gpu_is_a_clear_error(shm_server: Server) -> None:
    from workbench.gpu.devices import gpu_count

    if gpu_count():
        pytest.skip("a GPU is present: see tests/e2e/test_shared_memory_e2e.py")
    with pytest.raises(InvalidArgument, match="failed to register CUDA shared memory region: 'c', "
                                              "GPUs not supported"):
        await shm_server.shared_memory.register_cuda_shared_memory("c", b"\0" * 64, 0, 64)
    assert await shm_server.shared_memory.cuda_shared_memory_status() == []
    await shm_server.shared_memory.unregister_cuda_shared_memory()


async def test_infer_inputs_and_outputs_in_one_region(shm_server: Server, shm_segments) -> None:
    key, handle = shm_segments(4 * 64)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.float32)
    shm.set_shared_memory_region(handle, [a, b])
    await shm_server.shared_memory.register_system_shared_memory("io", key, 0, 256)
    request = InferenceRequest(
        "add_sub",
        [shm_input("INPUT0", "FP32", [1, 16], "io", 64), shm_input("INPUT1", "FP32", [1, 16], "io", 64, 64)],
        outputs=[shm_output("OUTPUT0", "io", 64, 128), shm_output("OUTPUT1", "io", 64, 192)],
    )
    response = await shm_server.infer(request)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16], 128), a + b)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16], 192), a - b)
    assert response.outputs[0].parameters["shared_memory_region"] == "io"
    assert response.outputs[1].parameters["shared_memory_offset"] == 192


async def test_infer_bytes_through_shared_memory(shm_server: Server, shm_segments) -> None:
    words = np.array([[b"shared", b"", b"memory \xe2\x9c\x93"]], dtype=object)
    raw = serialize_bytes(words)
    key, handle = shm_segments(2 * len(raw))
    handle._mpsm_handle.buf[: len(raw)] = raw
    await shm_server.shared_memory.register_system_shared_memory("in", key, 0, len(raw))
    await shm_server.shared_memory.register_system_shared_memory("out", key, len(raw), len(raw))
    request = InferenceRequest("identity_bytes", [shm_input("INPUT0", "BYTES", [1, 3], "in", len(raw))],
                               outputs=[shm_output("OUTPUT0", "out", len(raw))])
    await shm_server.infer(request)
    got = shm.get_contents_as_numpy(handle, np.object_, [1, 3], len(raw))
    assert got.tolist() == words.tolist()


async def test_infer_misuse_errors_leave_no_region_in_use(shm_server: Server, shm_segments) -> None:
    key, _ = shm_segments(128)
    await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 128)
    cases = [
        (NotFound, "Unable to find shared memory region: 'nope'", "nope", 64, 0, 64),
        (InvalidArgument, "Invalid offset for shared memory region: 'r'", "r", 64, 128, 64),
        (InvalidArgument, "Invalid offset \\+ byte size for shared memory region: 'r'", "r", 64, 96, 64),
        (InvalidArgument, "input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
                          "Expected 64, got 128", "r", 128, 0, 64),
        (InvalidArgument, "shared memory size specified with the request for output 'OUTPUT0' "
                        "\\(32 bytes\\) should be at least 64 bytes to hold the results", "r", 64, 0, 32),
    ]
    for error, text, region, in_size, in_offset, out_size in cases:
        request = InferenceRequest(
            "add_sub",
            [shm_input("INPUT0", "FP32", [1, 16], region, in_size, in_offset),
             Tensor("INPUT1", "FP32", np.zeros((1, 16), np.float32))],
            outputs=[shm_output("OUTPUT0", "r", out_size, 64)],
        )
        with pytest.raises(error, match=text):
            await shm_server.infer(request)
    await shm_server.shared_memory.unregister_system_shared_memory("r")  # nothing holds it: removed at once
    assert await shm_server.shared_memory.system_shared_memory_status() == []


async def test_unregister_while_in_use_waits_for_the_request(shm_server: Server, shm_segments) -> None:
    key, handle = shm_segments(8)
    shm.set_shared_memory_region(handle, [np.array([[7.5]], np.float32)])
    await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 8)
    BEHAVIOUR.gate.clear()
    request = InferenceRequest("fake", [shm_input("INPUT0", "FP32", [1, 1], "r", 4)],
                               outputs=[shm_output("OUTPUT0", "r", 4, 4)])
    task = asyncio.create_task(shm_server.infer(request))
    while not BEHAVIOUR.executions:  # the request is executing (blocked on the gate)
        await asyncio.sleep(0.01)
    await shm_server.shared_memory.unregister_system_shared_memory()  # succeeds; the region outlives it
    assert [r["name"] for r in await shm_server.shared_memory.system_shared_memory_status()] == ["r"]
    with pytest.raises(AlreadyExists):
        await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 8)
    BEHAVIOUR.gate.set()
    await task
    assert shm.get_contents_as_numpy(handle, np.float32, [1], 4)[0] == 7.5
    assert await shm_server.shared_memory.system_shared_memory_status() == []
    await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 8)  # the name is free again


async def test_cancelled_request_releases_its_regions(shm_server: Server, shm_segments) -> None:
    key, _ = shm_segments(8)
    await shm_server.shared_memory.register_system_shared_memory("r", key, 0, 8)
    BEHAVIOUR.gate.clear()
    request = InferenceRequest("fake", [shm_input("INPUT0", "FP32", [1, 1], "r", 4)])
    task = asyncio.create_task(shm_server.infer(request))
    while not BEHAVIOUR.executions:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    BEHAVIOUR.gate.set()
    await shm_server.shared_memory.unregister_system_shared_memory("r")
    assert await shm_server.shared_memory.system_shared_memory_status() == []
