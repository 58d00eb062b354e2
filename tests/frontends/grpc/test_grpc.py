"""The gRPC frontend in-process: a real Server on real ONNX models behind grpc.aio on port 0,
called through the generated stub (tritonclient's protobufs)."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import Server, ServerOptions
from workbench.testing.models import build_datatype_repository


@pytest_asyncio.fixture
async def stub(server: Server, stub_for):
    return await stub_for(server)


@pytest.fixture(scope="module")
def datatype_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_datatype_repository(tmp_path_factory.mktemp("grpc_types"))


@pytest_asyncio.fixture
async def types_stub(datatype_repository: Path, stub_for):
    async with Server(ServerOptions(model_repository=[str(datatype_repository)])) as server:
        yield await stub_for(server)


def add_sub_request(a: np.ndarray, b: np.ndarray, **fields) -> pb.ModelInferRequest:
    inputs = [
        pb.ModelInferRequest.InferInputTensor(name=f"INPUT{i}", datatype="FP32", shape=a.shape)
        for i in range(2)
    ]
    return pb.ModelInferRequest(
        model_name="add_sub", inputs=inputs, raw_input_contents=[a.tobytes(), b.tobytes()], **fields
    )


async def rpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


# ----------------------------------------------------------------- health, metadata, config
async def test_health_and_server_metadata(stub) -> None:
    assert (await stub.ServerLive(pb.ServerLiveRequest())).live
    assert (await stub.ServerReady(pb.ServerReadyRequest())).ready
    metadata = await stub.ServerMetadata(pb.ServerMetadataRequest())
    assert metadata.name == "triton" and "statistics" in metadata.extensions


async def test_model_ready_and_metadata(stub) -> None:
    assert (await stub.ModelReady(pb.ModelReadyRequest(name="add_sub"))).ready
    assert not (await stub.ModelReady(pb.ModelReadyRequest(name="versioned", version="9"))).ready
    # an unknown model is ready: false with OK, as Triton's ModelReady (grpcclient's
    # is_model_ready() returns False instead of raising)
    assert not (await stub.ModelReady(pb.ModelReadyRequest(name="nope"))).ready
    metadata = await stub.ModelMetadata(pb.ModelMetadataRequest(name="add_sub"))
    assert metadata.platform == "onnxruntime_onnx" and list(metadata.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "FP32", [-1, 16]), ("INPUT1", "FP32", [-1, 16])
    ]


async def test_model_config_is_the_config_message(stub) -> None:
    config = (await stub.ModelConfig(pb.ModelConfigRequest(name="add_sub"))).config
    assert config.name == "add_sub" and config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    error = await rpc_error(stub.ModelConfig(pb.ModelConfigRequest(name="add_sub", version="7")))
    assert error.code() == grpc.StatusCode.NOT_FOUND


# ----------------------------------------------------------------- inference
async def test_infer_raw_contents(stub) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    params = {"triton_enable_empty_final_response": pb.InferParameter(bool_param=True)}
    response = await stub.ModelInfer(add_sub_request(a, b, id="r1", parameters=params))
    assert (response.model_name, response.model_version, response.id) == ("add_sub", "1", "r1")
    assert [(o.name, o.datatype, list(o.shape)) for o in response.outputs] == [
        ("OUTPUT0", "FP32", [2, 16]), ("OUTPUT1", "FP32", [2, 16])
    ]
    assert not any(o.HasField("contents") for o in response.outputs)
    out0 = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, 16)
    out1 = np.frombuffer(response.raw_output_contents[1], np.float32).reshape(2, 16)
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)
    assert "triton_final_response" not in response.parameters  # only stream responses carry it


async def test_requested_output_subset(stub) -> None:
    a = np.ones((1, 16), np.float32)
    request = add_sub_request(a, a)
    request.outputs.add(name="OUTPUT1")
    response = await stub.ModelInfer(request)
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    assert len(response.raw_output_contents) == 1


async def test_duplicate_requested_output_is_invalid_argument(stub) -> None:
    a = np.ones((1, 16), np.float32)
    request = add_sub_request(a, a)
    for name in ("OUTPUT1", "OUTPUT1"):
        request.outputs.add(name=name)
    error = await rpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "[request id: <id_unknown>] output 'OUTPUT1' already exists in request"


@pytest.mark.parametrize(
    ("datatype", "field", "values"),
    [
        ("INT64", "int64_contents", [-(2**40), 0, 2**40, 7]),
        ("INT8", "int_contents", [-128, 0, 5, 127]),
        ("UINT16", "uint_contents", [0, 1, 65535, 9]),
        ("UINT64", "uint64_contents", [0, 2**63, 5, 6]),
        ("INT32", "int_contents", [-5, 1, 2, 3]),
        ("FP32", "fp32_contents", [0.5, -1.0, 3.25, 8.0]),
        ("FP64", "fp64_contents", [0.1, -2.0, 1e300, 4.0]),
        ("BOOL", "bool_contents", [True, False, True, True]),
        ("BYTES", "bytes_contents", [b"a", b"", b"\x00z", "é".encode()]),
    ],
)
async def test_typed_contents_round_trip_raw(types_stub, datatype: str, field: str, values: list) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype=datatype, shape=[2, 2])
    getattr(tensor.contents, field).extend(values)
    request = pb.ModelInferRequest(model_name=f"identity_{datatype.lower()}", inputs=[tensor])
    response = await types_stub.ModelInfer(request)
    assert response.outputs[0].datatype == datatype and list(response.outputs[0].shape) == [2, 2]
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":  # Triton's 4-byte little-endian length prefix per element
        expected = b"".join(len(v).to_bytes(4, "little") + v for v in values)
        assert raw == expected
    else:
        dtype = {"BOOL": np.bool_, "FP32": np.float32, "FP64": np.float64}.get(datatype, datatype.lower())
        np.testing.assert_array_equal(np.frombuffer(raw, dtype), np.array(values, dtype))


@pytest.mark.parametrize("datatype", ["FP16", "BYTES", "INT64"])
async def test_raw_contents_round_trip(types_stub, datatype: str) -> None:
    if datatype == "BYTES":
        data = b"".join(len(v).to_bytes(4, "little") + v for v in (b"xy", b"", "ü".encode(), b"\x00"))
    else:
        data = np.array([[1.5, -2], [3, 4]], dtype=datatype.lower().replace("fp", "float")).tobytes()
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype=datatype, shape=[2, 2])
    request = pb.ModelInferRequest(
        model_name=f"identity_{datatype.lower()}", inputs=[tensor], raw_input_contents=[data]
    )
    response = await types_stub.ModelInfer(request)
    assert response.raw_output_contents[0] == data


async def test_fp16_in_typed_contents_is_unimplemented(types_stub) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP16", shape=[1, 1])
    tensor.contents.fp32_contents.append(1.0)
    error = await rpc_error(types_stub.ModelInfer(pb.ModelInferRequest(model_name="identity_fp16", inputs=[tensor])))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "raw_input_contents" in error.details()


# ----------------------------------------------------------------- errors
async def test_unknown_model_is_not_found(stub) -> None:
    a = np.ones((1, 16), np.float32)
    request = add_sub_request(a, a)
    request.model_name = "nope"
    error = await rpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "Request for unknown model: 'nope' is not found"


async def test_bad_shape_and_dtype_are_invalid_argument(stub) -> None:
    a = np.ones((1, 8), np.float32)
    error = await rpc_error(stub.ModelInfer(add_sub_request(a, a, id="s")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("[request id: s] unexpected shape for input 'INPUT0' for model 'add_sub'")
    request = add_sub_request(np.ones((1, 16), np.float32), np.ones((1, 16), np.float32))
    request.inputs[0].datatype = "INT32"
    error = await rpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'" in error.details()


async def test_malformed_requests_use_tritons_texts(stub) -> None:
    a = np.ones((1, 16), np.float32)
    mixed = add_sub_request(a, a)
    mixed.inputs[0].contents.fp32_contents.extend(a.ravel())
    error = await rpc_error(stub.ModelInfer(mixed))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == ("contents field must not be specified when using raw_input_contents "
                               "for 'INPUT0' for model 'add_sub'")  # Triton: no "input"
    missing = add_sub_request(a, a)
    del missing.raw_input_contents[:]
    error = await rpc_error(stub.ModelInfer(missing))
    assert error.details() == "unable to find data for input tensor 'INPUT0' for model 'add_sub' in request."
    short = add_sub_request(a, a)
    short.raw_input_contents[1] = b"\x00" * 4
    error = await rpc_error(stub.ModelInfer(short))
    assert "input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 64, got 4" in error.details()


async def test_reserved_parameters(stub) -> None:
    a = np.ones((1, 16), np.float32)
    request = add_sub_request(a, a, parameters={"triton_other": pb.InferParameter(bool_param=True)})
    error = await rpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reserved for Triton usage" in error.details()


# ----------------------------------------------------------------- statistics and repository
async def test_statistics_message(stub) -> None:
    a = np.ones((3, 16), np.float32)
    await stub.ModelInfer(add_sub_request(a, a))
    stats = await stub.ModelStatistics(pb.ModelStatisticsRequest(name="add_sub"))
    [entry] = stats.model_stats
    assert (entry.name, entry.version, entry.inference_count, entry.execution_count) == ("add_sub", "1", 3, 1)
    assert entry.inference_stats.success.count == 1 and entry.inference_stats.success.ns > 0
    assert [b.batch_size for b in entry.batch_stats] == [3]
    error = await rpc_error(stub.ModelStatistics(pb.ModelStatisticsRequest(name="nope")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "requested model 'nope' is not available"


async def test_repository_index_and_none_mode_load(stub) -> None:
    index = await stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True))
    assert {(m.name, m.version, m.state) for m in index.models} >= {("add_sub", "1", "READY")}
    error = await rpc_error(stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="add_sub")))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    error = await rpc_error(stub.RepositoryIndex(pb.RepositoryIndexRequest(repository_name="other")))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_explicit_load_with_config_override_and_unload(test_repository: Path, stub_for) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], model_control_mode="explicit")
    async with Server(options) as server:
        stub = await stub_for(server)
        override = '{"max_batch_size": 2, "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}'
        params = {"config": pb.ModelRepositoryParameter(string_param=override)}
        await stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="add_sub", parameters=params))
        config = (await stub.ModelConfig(pb.ModelConfigRequest(name="add_sub"))).config
        assert config.max_batch_size == 2
        files = {"config": params["config"], "file:1/model.onnx": pb.ModelRepositoryParameter(bytes_param=b"x")}
        error = await rpc_error(stub.RepositoryModelLoad(
            pb.RepositoryModelLoadRequest(model_name="add_sub", parameters=files)))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # "x" is no ONNX model
        assert (await stub.ModelConfig(pb.ModelConfigRequest(name="add_sub"))).config.max_batch_size == 2
        bad = {"config": pb.ModelRepositoryParameter(int64_param=1)}
        error = await rpc_error(stub.RepositoryModelLoad(
            pb.RepositoryModelLoadRequest(model_name="add_sub", parameters=bad)))
        assert error.details() == "Config parameter 'config' must have string type for its value"
        await stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="add_sub"))
        index = await stub.RepositoryIndex(pb.RepositoryIndexRequest())
        assert [m.state for m in index.models if m.name == "add_sub"] == ["UNAVAILABLE"]
        for version in ("", "1"):  # unloaded: ready false with OK (Triton), not an error
            ready = await stub.ModelReady(pb.ModelReadyRequest(name="add_sub", version=version))
            assert not ready.ready
        # nothing to unload: success, as Triton (tests/engine/test_load_names.py)
        await stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="nope"))


# ----------------------------------------------------------------- flags and channel options
def test_grpc_flags_become_channel_options() -> None:
    from workbench.frontends.grpc import channel_options
    from workbench.hosts.cli import build_parser, options_from_args

    args = build_parser().parse_args([
        "serve", "--model-repository=m", "--grpc-port=0", "--grpc-address=127.0.0.1",
        "--grpc-keepalive-time=1000", "--grpc-keepalive-permit-without-calls",
        "--grpc-http2-max-ping-strikes=0", "--grpc-max-message-size=1048576",
        "--grpc-infer-allocation-pool-size=16", "--allow-grpc=false",
    ])
    options = options_from_args(args)
    assert (options.grpc_port, options.grpc_address, options.allow_grpc) == (0, "127.0.0.1", False)
    assert options.grpc_infer_allocation_pool_size == 16
    channel = dict(channel_options(options))
    assert channel["grpc.keepalive_time_ms"] == 1000 and channel["grpc.keepalive_permit_without_calls"] == 1
    assert channel["grpc.http2.max_ping_strikes"] == 0
    assert channel["grpc.max_receive_message_length"] == channel["grpc.max_send_message_length"] == 1048576
    defaults = dict(channel_options(ServerOptions()))
    assert defaults["grpc.max_receive_message_length"] == 2**31 - 1 and defaults["grpc.so_reuseport"] == 0
    assert ServerOptions().grpc_port == 8001 and ServerOptions().allow_grpc


async def test_typed_contents_count_mismatch_uses_the_cores_byte_size_text(stub) -> None:
    request = pb.ModelInferRequest(model_name="add_sub")
    for i, count in enumerate((16, 12)):
        tensor = request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
        tensor.contents.fp32_contents.extend([1.0] * count)
    error = await rpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == ("[request id: <id_unknown>] input byte size mismatch for input "
                               "'INPUT1' for model 'add_sub'. Expected 64, got 48")


async def test_every_raw_input_whose_data_does_not_match_its_shape_is_named(stub) -> None:
    """Two raw inputs with too few bytes: one error naming both (the first alone left a client
    that fixed INPUT0 to find INPUT1 on its next try; Triton names one, in its map's order)."""
    short = np.ones((1, 14), np.float32).tobytes()
    request = pb.ModelInferRequest(model_name="add_sub", raw_input_contents=[short, short])
    for i in range(2):
        request.inputs.add(name=f"INPUT{i}", datatype="FP32", shape=[1, 16])
    error = await rpc_error(stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "[request id: <id_unknown>] " + "; ".join(
        f"input byte size mismatch for input 'INPUT{i}' for model 'add_sub'. Expected 64, got 56"
        for i in range(2))
