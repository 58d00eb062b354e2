"""Shared memory over gRPC in-process: the six RPCs and shm tensors in ModelInfer and
ModelStreamInfer, on a real Server behind grpc.aio (generated stub, tritonclient's helper
for the segments)."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions

DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


@pytest_asyncio.fixture
async def stub(test_repository: Path, stub_for):
    options = ServerOptions(model_repository=[str(test_repository)], allow_client_shm=True)
    async with Server(options) as server:
        yield await stub_for(server)


async def rpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


def set_shm(tensor, region: str, byte_size: int, offset: int | None = None) -> None:
    tensor.parameters["shared_memory_region"].string_param = region
    tensor.parameters["shared_memory_byte_size"].int64_param = byte_size
    if offset is not None:
        tensor.parameters["shared_memory_offset"].int64_param = offset


def add_sub_shm_request(out_size: int = 64) -> pb.ModelInferRequest:
    """add_sub with INPUT0/INPUT1 at 0/64 of region "in", OUTPUT0/OUTPUT1 at 0/64 of "out"."""
    request = pb.ModelInferRequest(model_name="add_sub", id="shm")
    for i in range(2):
        tensor = request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
        set_shm(tensor, "in", 64, 64 * i)
        set_shm(request.outputs.add(name=f"OUTPUT{i}"), "out", out_size, 64 * i)
    return request


async def register_io(stub, shm_segments) -> tuple[np.ndarray, np.ndarray, object]:
    in_key, in_handle = shm_segments(128)
    out_key, out_handle = shm_segments(128)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.float32)
    shm.set_shared_memory_region(in_handle, [a, b])
    await stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="in", key=in_key, byte_size=128))
    await stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="out", key=out_key, byte_size=128))
    return a, b, out_handle


async def test_register_status_unregister(stub, shm_segments) -> None:
    key, _ = shm_segments(128)
    await stub.SystemSharedMemoryRegister(
        pb.SystemSharedMemoryRegisterRequest(name="r", key=key, offset=64, byte_size=64)
    )
    status = await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())
    assert dict(status.regions) == {
        "r": pb.SystemSharedMemoryStatusResponse.RegionStatus(name="r", key=key, offset=64, byte_size=64)
    }
    one = await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="r"))
    assert list(one.regions) == ["r"]
    again = await rpc_error(stub.SystemSharedMemoryRegister(
        pb.SystemSharedMemoryRegisterRequest(name="r", key=key, byte_size=8)))
    assert again.code() == grpc.StatusCode.ALREADY_EXISTS
    assert again.details() == "shared memory region 'r' already in manager"
    missing = await rpc_error(stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(name="x")))
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    assert missing.details() == "Unable to find system shared memory region: 'x'"
    past_end = await rpc_error(stub.SystemSharedMemoryRegister(
        pb.SystemSharedMemoryRegisterRequest(name="x", key=key, offset=100, byte_size=64)))
    assert past_end.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert past_end.details().startswith("failed to register shared memory region 'x': invalid args")
    no_key = await rpc_error(stub.SystemSharedMemoryRegister(
        pb.SystemSharedMemoryRegisterRequest(name="x", key="/wb_absent", byte_size=8)))
    assert no_key.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert no_key.details().startswith("Unable to open shared memory region: '/wb_absent'")
    await stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="r"))
    assert not (await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())).regions


async def test_unregister_all(stub, shm_segments) -> None:
    for name in ("a", "b"):
        key, _ = shm_segments(16)
        await stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name=name, key=key, byte_size=16))
    assert len((await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())).regions) == 2
    await stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
    assert not (await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())).regions


async def test_cuda_rpcs_without_gpu(stub) -> None:
    from workbench.gpu.devices import gpu_count

    if gpu_count():
        pytest.skip("a GPU is present")
    error = await rpc_error(stub.CudaSharedMemoryRegister(
        pb.CudaSharedMemoryRegisterRequest(name="c", raw_handle=b"\0" * 64, device_id=0, byte_size=64)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "failed to register CUDA shared memory region: 'c', GPUs not supported"
    assert not (await stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest())).regions
    await stub.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest())
    missing = await rpc_error(stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(name="c")))
    assert missing.code() == grpc.StatusCode.NOT_FOUND


async def test_register_disabled_is_unimplemented(test_repository: Path, stub_for, shm_segments) -> None:
    key, _ = shm_segments(8)
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        stub = await stub_for(server)
        calls = [
            stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(name="r", key=key, byte_size=8)),
            stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest()),
            stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="c", byte_size=8)),
        ]
        for call in calls:
            error = await rpc_error(call)
            assert error.code() == grpc.StatusCode.UNIMPLEMENTED
            assert error.details() == DISABLED
        assert not (await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())).regions
        assert not (await stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest())).regions


async def test_infer_inputs_and_outputs_in_shared_memory(stub, shm_segments) -> None:
    a, b, out_handle = await register_io(stub, shm_segments)
    response = await stub.ModelInfer(add_sub_shm_request())
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", "FP32", [1, 16]), ("OUTPUT1", "FP32", [1, 16])]
    assert list(response.raw_output_contents) == [b"", b""]
    total = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=0)
    diff = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=64)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(diff, a - b)


async def test_stream_with_shared_memory_and_mixed_raw_input(stub, shm_segments) -> None:
    a, _b, out_handle = await register_io(stub, shm_segments)
    request = add_sub_shm_request()
    del request.inputs[1].parameters["shared_memory_region"]
    del request.inputs[1].parameters["shared_memory_byte_size"]
    del request.inputs[1].parameters["shared_memory_offset"]
    other = np.full((1, 16), 5, dtype=np.float32)
    request.raw_input_contents.append(other.tobytes())
    del request.outputs[1]
    responses = [r async for r in stub.ModelStreamInfer(iter([request]))]
    assert len(responses) == 1 and not responses[0].error_message
    assert list(responses[0].infer_response.raw_output_contents) == [b""]
    total = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=0)
    np.testing.assert_array_equal(total, a + other)


async def test_plain_output_next_to_shared_memory_output(stub, shm_segments) -> None:
    a, b, _out_handle = await register_io(stub, shm_segments)
    request = add_sub_shm_request()
    request.outputs[1].ClearField("parameters")
    response = await stub.ModelInfer(request)
    assert response.raw_output_contents[0] == b""
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[1], np.float32), (a - b).ravel())


async def test_infer_misuse_has_tritons_codes_and_texts(stub, shm_segments) -> None:
    await register_io(stub, shm_segments)
    small = await rpc_error(stub.ModelInfer(add_sub_shm_request(out_size=32)))
    assert small.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert small.details() == ("shared memory size specified with the request for output 'OUTPUT0' "
                               "(32 bytes) should be at least 64 bytes to hold the results")
    unknown = add_sub_shm_request()
    set_shm(unknown.inputs[0], "nowhere", 64)
    error = await rpc_error(stub.ModelInfer(unknown))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "Unable to find shared memory region: 'nowhere'"
    past_end = add_sub_shm_request()
    set_shm(past_end.inputs[1], "in", 64, 100)
    error = await rpc_error(stub.ModelInfer(past_end))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "Invalid offset + byte size for shared memory region: 'in'"


async def test_tensor_parameter_errors_use_tritons_grpc_texts(stub, shm_segments) -> None:
    await register_io(stub, shm_segments)
    cases = []
    request = add_sub_shm_request()
    request.inputs[0].parameters["shared_memory_region"].int64_param = 3
    cases.append((request, "invalid value type for 'shared_memory_region' parameter for tensor "
                           "'INPUT0', expected string_param."))
    request = add_sub_shm_request()
    request.inputs[0].parameters["shared_memory_offset"].string_param = "0"
    cases.append((request, "invalid value type for 'shared_memory_offset' parameter for tensor "
                           "'INPUT0', expected int64_param."))
    request = add_sub_shm_request()
    del request.inputs[0].parameters["shared_memory_byte_size"]
    cases.append((request, "'shared_memory_byte_size' must be specified along with "
                           "'shared_memory_region' parameter for tensor 'INPUT0'"))
    request = add_sub_shm_request()
    del request.outputs[0].parameters["shared_memory_region"]
    cases.append((request, "'shared_memory_offset' can not be specified without "
                           "'shared_memory_region' parameter for tensor 'OUTPUT0'"))
    request = add_sub_shm_request()
    request.inputs[0].contents.fp32_contents.extend([0.0] * 16)
    cases.append((request, "unexpected 'content' provided when using shared memory for input "
                           "tensor 'INPUT0' for model 'add_sub'"))
    request = add_sub_shm_request()
    request.outputs[0].parameters["classification"].int64_param = 2
    cases.append((request, "output can't set both 'shared_memory_region' and 'classification'"))
    for request, message in cases:
        error = await rpc_error(stub.ModelInfer(request))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, message
        assert error.details() == message
