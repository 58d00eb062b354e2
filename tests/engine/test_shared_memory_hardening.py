"""Shared memory against hostile keys and files: symlinked or special objects in /dev/shm, keys
that are no shm_open name, an output region too small, and a region truncated by its client
after it was registered. Real engine, real HTTP app and gRPC servicer, a real server process
for the truncation (before the fix it died of SIGBUS)."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.grpc.service_pb2 as pb
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from workbench import (
    InferenceRequest,
    InvalidArgument,
    RequestedOutput,
    Server,
    ServerOptions,
    Tensor,
    tensor_from_shared_memory,
)
from workbench.testing.process import ServerProcess

SHM = Path("/dev/shm")
SYSTEM = "/v2/systemsharedmemory"


@pytest_asyncio.fixture
async def engine(test_repository: Path):
    options = ServerOptions(model_repository=[str(test_repository)], allow_client_shm=True)
    async with Server(options) as server:
        yield server


@pytest.fixture
def shm_entry():
    """``make(kind) -> key``: a ``/dev/shm`` entry that is no plain shm object (``"symlink"`` to
    a secret file outside /dev/shm, ``"fifo"``, ``"dir"``), removed after the test."""
    made: list[Path] = []

    def make(kind: str, target: Path | None = None) -> str:
        path = SHM / f"wb_test_{kind}_{uuid.uuid4().hex[:12]}"
        if kind == "symlink":
            assert target is not None, "a symlink entry needs a target"
            path.symlink_to(target)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
        made.append(path)
        return "/" + path.name

    yield make
    for path in made:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(b"not for clients" + bytes(113))
    return path


# ------------------------------------------------------------------ keys and objects (engine)
async def test_symlinked_key_is_refused(engine: Server, shm_entry, secret: Path) -> None:
    key = shm_entry("symlink", secret)
    with pytest.raises(InvalidArgument, match=f"^Unable to open shared memory region: '{key}'$"):
        await engine.shared_memory.register_system_shared_memory("r", key, 0, 16)
    assert await engine.shared_memory.system_shared_memory_status() == []


@pytest.mark.parametrize("kind", ["fifo", "dir"])
async def test_special_objects_are_refused(engine: Server, shm_entry, kind: str) -> None:
    key = shm_entry(kind)
    with pytest.raises(InvalidArgument, match=f"^Unable to open shared memory region: '{key}'$"):
        await engine.shared_memory.register_system_shared_memory("r", key, 0, 16)
    assert await engine.shared_memory.system_shared_memory_status() == []


@pytest.mark.parametrize(("key", "text"), [
    ("/wb\0key", "cannot register shared memory region 'r' - invalid shm key '/wb\\\\0key'"),
    ("/wb/key", "cannot register shared memory region 'r' - invalid shm key '/wb/key'"),
    ("/..", "cannot register shared memory region 'r' - invalid shm key '/..'"),
    ("//", "cannot register shared memory region 'r' - invalid shm key '//'"),
    ("/triton_python_backend_shm_region_1", "as the key contains the reserved prefix"),
])
async def test_keys_that_are_no_shm_name_are_invalid(engine: Server, key: str, text: str) -> None:
    with pytest.raises(InvalidArgument, match=text):
        await engine.shared_memory.register_system_shared_memory("r", key, 0, 16)


async def test_absent_key_is_a_client_error(engine: Server) -> None:
    with pytest.raises(InvalidArgument, match=r"^Unable to open shared memory region: '/wb_absent'$"):
        await engine.shared_memory.register_system_shared_memory("r", "/wb_absent", 0, 16)


async def test_output_region_too_small_is_invalid_argument(engine: Server, shm_segments) -> None:
    key, _ = shm_segments(128)
    await engine.shared_memory.register_system_shared_memory("r", key, 0, 128)
    zeros = np.zeros((1, 16), np.float32)
    request = InferenceRequest(
        "add_sub",
        [tensor_from_shared_memory("INPUT0", "FP32", [1, 16], {"shared_memory_region": "r",
                                   "shared_memory_byte_size": 64}, model="add_sub"),
         Tensor("INPUT1", "FP32", zeros)],
        outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "r", "shared_memory_offset": 64,
                                             "shared_memory_byte_size": 32})],
    )
    with pytest.raises(InvalidArgument, match=r"^shared memory size specified with the request for "
                       r"output 'OUTPUT0' \(32 bytes\) should be at least 64 bytes to hold the results$"):
        await engine.infer(request)


async def test_large_tensors_round_trip_off_the_loop(engine: Server, shm_segments) -> None:
    from workbench.engine.shm.shared_memory_io import OFF_LOOP_BYTES

    n = OFF_LOOP_BYTES // 4 + 1024  # one input and one output, each above the off-loop limit
    data = np.arange(n, dtype=np.float32).reshape(1, n)
    key, handle = shm_segments(2 * data.nbytes)
    shm.set_shared_memory_region(handle, [data])
    await engine.shared_memory.register_system_shared_memory("in", key, 0, data.nbytes)
    await engine.shared_memory.register_system_shared_memory("out", key, data.nbytes, data.nbytes)
    request = InferenceRequest(
        "identity_fp32",
        [tensor_from_shared_memory("INPUT0", "FP32", [1, n], {"shared_memory_region": "in",
                                   "shared_memory_byte_size": data.nbytes}, model="identity_fp32")],
        outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "out",
                                             "shared_memory_byte_size": data.nbytes})],
    )
    await engine.infer(request)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, n], data.nbytes), data)


# ------------------------------------------------------------------ the same over HTTP and gRPC
async def test_http_bad_keys_are_400_json(engine: Server, asgi_client, shm_entry, secret: Path) -> None:
    link = shm_entry("symlink", secret)
    async with asgi_client(engine) as http:
        nul = await http.post(f"{SYSTEM}/region/r/register", json={"key": "/wb\0key", "byte_size": 8})
        assert nul.status_code == 400, nul.text
        assert nul.json() == {"error": "cannot register shared memory region 'r' - invalid shm key "
                                       "'/wb\\0key'"}
        linked = await http.post(f"{SYSTEM}/region/r/register", json={"key": link, "byte_size": 8})
        assert linked.status_code == 400, linked.text
        assert linked.json() == {"error": f"Unable to open shared memory region: '{link}'"}
        assert (await http.get(f"{SYSTEM}/status")).json() == []


async def test_http_output_region_too_small_is_400(engine: Server, asgi_client, shm_segments) -> None:
    key, _ = shm_segments(128)
    await engine.shared_memory.register_system_shared_memory("r", key, 0, 128)
    body = {"inputs": [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "FP32",
                        "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64}}
                       for i in range(2)],
            "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "r",
                                                           "shared_memory_byte_size": 32}}]}
    async with asgi_client(engine) as http:
        response = await http.post("/v2/models/add_sub/infer", json=body)
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "shared memory size specified with the request for output "
                                        "'OUTPUT0' (32 bytes) should be at least 64 bytes to hold "
                                        "the results"}


async def test_grpc_bad_keys_are_invalid_argument(engine: Server, stub_for, shm_entry,
                                                  secret: Path) -> None:
    link = shm_entry("symlink", secret)
    stub = await stub_for(engine)
    for key, text in [("/wb\0key", "cannot register shared memory region 'r' - invalid shm key "
                                   "'/wb\\0key'"),
                      (link, f"Unable to open shared memory region: '{link}'")]:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(name="r", key=key, byte_size=8))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.value.details() == text


# ------------------------------------------------------------------ a region truncated by its client
def _add_sub(client: httpclient.InferenceServerClient, in_region: str, out_region: str):
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    for i, tensor in enumerate(inputs):
        tensor.set_shared_memory(in_region, 64, offset=64 * i)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    for i, tensor in enumerate(outputs):
        tensor.set_shared_memory(out_region, 64, offset=64 * i)
    return client.infer("add_sub", inputs, outputs=outputs)


def test_truncated_region_is_a_clean_400_and_the_server_lives(test_repository: Path, shm_segments) -> None:
    process = ServerProcess([f"--model-repository={test_repository}", "--allow-client-shm=true",
                             "--model-control-mode=explicit", "--load-model=add_sub",
                             "--allow-metrics=false", "--allow-grpc=false"])
    client = httpclient.InferenceServerClient(process.url)
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        keys = {}
        for name in ("in", "out"):
            key, handle = shm_segments(128)
            shm.set_shared_memory_region(handle, [a, a])
            client.register_system_shared_memory(name, key, 128)
            keys[name] = SHM / key[1:]
        _add_sub(client, "in", "out")  # both regions in use once
        for name, path in keys.items():
            os.truncate(path, 0)  # the client shrinks its own object under the registered region
            with pytest.raises(InferenceServerException) as error:
                _add_sub(client, "in", "out")
            assert error.value.status() == "400", error.value.message()
            assert (f"Invalid shared memory region: '{name}': its shared memory object "
                    f"'/{path.name}' is now 0 bytes") in error.value.message()
            assert process.process.poll() is None, process.log
            os.truncate(path, 128)  # restored: the region serves again
        _add_sub(client, "in", "out")
        assert client.is_server_live()
    finally:
        with contextlib.suppress(Exception):
            client.unregister_system_shared_memory()
        client.close()
        process.stop()


def test_output_region_truncated_while_the_request_runs_is_a_clean_error(tmp_path: Path,
                                                                          shm_segments) -> None:
    """The model (real Python backend) shrinks the output object after the server checked the
    region and before the output is written: a 400 / INVALID_ARGUMENT with the truncation text on
    HTTP and gRPC, and the server keeps serving."""
    import tritonclient.grpc as grpcclient

    from workbench.testing.python_backend import copy_python_model

    copy_python_model(tmp_path / "repo", "shm_truncator")
    process = ServerProcess([f"--model-repository={tmp_path / 'repo'}", "--allow-client-shm=true",
                             "--allow-metrics=false"])
    http = httpclient.InferenceServerClient(process.url)
    rpc = grpcclient.InferenceServerClient(process.grpc_url)
    data = np.arange(1024, dtype=np.float32)
    try:
        for client, module in ((http, httpclient), (rpc, grpcclient)):
            key, handle = shm_segments(data.nbytes)
            path = SHM / key[1:]
            client.register_system_shared_memory("out", key, data.nbytes)

            def infer(truncate: Path, client=client, module=module):
                inputs = [module.InferInput("INPUT0", [data.size], "FP32"),
                          module.InferInput("TRUNCATE", [1], "BYTES")]
                inputs[0].set_data_from_numpy(data)
                inputs[1].set_data_from_numpy(np.array([str(truncate).encode()], dtype=np.object_))
                output = module.InferRequestedOutput("OUTPUT0")
                output.set_shared_memory("out", data.nbytes)
                return client.infer("shm_truncator", inputs, outputs=[output])

            with pytest.raises(InferenceServerException) as error:
                infer(path)
            assert error.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), error.value.message()
            assert (f"Invalid shared memory region: 'out': its shared memory object '/{path.name}' is now "
                    f"0 bytes, but the region was registered over bytes 0 to {data.nbytes}") \
                in error.value.message()
            assert process.process.poll() is None, process.log
            os.truncate(path, data.nbytes)  # restored: the region serves again
            infer(tmp_path / "absent")
            np.testing.assert_array_equal(
                shm.get_contents_as_numpy(handle, np.float32, [data.size]), data)
            client.unregister_system_shared_memory("out")
    finally:
        http.close()
        rpc.close()
        process.stop()
