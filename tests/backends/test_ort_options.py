"""ONNX Runtime accelerators, graph levels and session parameters (Triton's onnxruntime_backend).

The mapping is a pure function (:func:`session_plan`), tested key by key; the load tests
run the real onnxruntime backend on a real ONNX model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import InferenceRequest, ModelLoadError, Server, ServerOptions, Tensor
from workbench.backends.ort_options import (
    CPU,
    CUDA,
    OPENVINO,
    SPIN_RESERVED_CPUS,
    TENSORRT,
    TRT_PARAMETERS,
    check_providers_started,
    default_intra_op_spinning,
    session_plan,
    tensorrt_options,
)
from workbench.common.results import RepositoryIndexRow
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

ALL = [TENSORRT, CUDA, OPENVINO, CPU]


def _config(text: str) -> ModelConfig:
    return text_format.Parse('name: "m"\n' + text, ModelConfig())


def _trt(params: dict[str, str]) -> str:
    entries = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in params.items())
    return ('optimization { execution_accelerators { gpu_execution_accelerator [ '
            f'{{ name: "tensorrt" {entries} }} ] }} }}')


@pytest.mark.parametrize(("level", "expected"), [
    (None, "ORT_ENABLE_ALL"), (0, "ORT_ENABLE_ALL"), (-1, "ORT_ENABLE_BASIC"),
    (1, "ORT_ENABLE_EXTENDED"), (2, "ORT_DISABLE_ALL"), (7, "ORT_ENABLE_ALL"),
])
def test_graph_level_mapping(level, expected) -> None:
    text = "" if level is None else f"optimization {{ graph {{ level: {level} }} }}"
    assert session_plan(_config(text), "KIND_CPU", 0, ALL).graph_level == expected


def test_defaults_cpu_only() -> None:
    plan = session_plan(_config(""), "KIND_CPU", 0, [CPU])
    assert plan.providers == [(CPU, {})]
    assert (plan.intra_op_threads, plan.inter_op_threads, plan.parallel) == (0, 0, False)
    assert plan.mem_arena is None and plan.mem_pattern is None
    assert plan.config_entries == {"session.intra_op.allow_spinning": "0",
                                   "session.inter_op.allow_spinning": "0"}


def _threads(intra: int, count: int = 1, extra: str = "") -> ModelConfig:
    return _config(f'parameters {{ key: "intra_op_thread_count" value {{ string_value: "{intra}" }} }} '
                   f'instance_group [ {{ count: {count} kind: KIND_CPU }} ] {extra}')


@pytest.mark.parametrize(("intra", "count", "cpus", "spin"), [
    (2, 1, 2, "0"),    # this VM: 2 cores, intra_op 2: the event loop would share a core with a spinner
    (2, 1, 3, "0"),    # one core left over is not enough (SPIN_RESERVED_CPUS = 2)
    (2, 1, 4, "1"),    # two cores left to the rest of the server: ORT's default (spinning)
    (2, 1, 16, "1"),
    (2, 4, 8, "0"),    # 4 instances x 2 threads + 2 > 8
    (2, 4, 10, "1"),
    (0, 1, 64, "0"),   # 0 = ORT's pick, one thread per core: no core left over
])
def test_intra_op_spinning_default_follows_spare_cores(intra, count, cpus, spin) -> None:
    plan = session_plan(_threads(intra, count), "KIND_CPU", 0, [CPU], cpus=cpus)
    assert plan.config_entries["session.intra_op.allow_spinning"] == spin
    assert plan.config_entries["session.inter_op.allow_spinning"] == "0"
    assert default_intra_op_spinning(intra, count, cpus) is (spin == "1")


def test_spinning_parameter_overrides_the_default() -> None:
    off = 'parameters { key: "session.intra_op.allow_spinning" value { string_value: "0" } }'
    on = 'parameters { key: "session.intra_op.allow_spinning" value { string_value: "1" } }'
    big = session_plan(_threads(2, 1, off), "KIND_CPU", 0, [CPU], cpus=64)
    small = session_plan(_threads(2, 1, on), "KIND_CPU", 0, [CPU], cpus=2)
    assert big.config_entries["session.intra_op.allow_spinning"] == "0"
    assert small.config_entries["session.intra_op.allow_spinning"] == "1"
    assert SPIN_RESERVED_CPUS == 2


def test_session_parameters() -> None:
    params = {"intra_op_thread_count": "3", "inter_op_thread_count": "2", "execution_mode": "1",
              "enable_mem_arena": "0", "enable_mem_pattern": "true",
              "session.intra_op.allow_spinning": "1",
              "session.use_device_allocator_for_initializers": "1"}
    text = " ".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}'
                    for k, v in params.items())
    plan = session_plan(_config(text), "KIND_CPU", 0, [CPU])
    assert (plan.intra_op_threads, plan.inter_op_threads, plan.parallel) == (3, 2, True)
    assert (plan.mem_arena, plan.mem_pattern) == (False, True)
    assert plan.config_entries["session.intra_op.allow_spinning"] == "1"
    assert plan.config_entries["session.use_device_allocator_for_initializers"] == "1"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("execution_mode", "2", "Expected values for  execution_mode are 0 or 1 but got 2"),
    ("intra_op_thread_count", "many", "failed to convert 'intra_op_thread_count' value 'many'"),
    ("enable_mem_arena", "maybe", "failed to convert 'enable_mem_arena' value 'maybe' to a boolean"),
])
def test_bad_session_parameters(key, value, message) -> None:
    text = f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
    with pytest.raises(ModelLoadError, match=message):
        session_plan(_config(text), "KIND_CPU", 0, [CPU])


@pytest.mark.parametrize(("mode", "option"), [
    ("FP16", "trt_fp16_enable"), ("BF16", "trt_bf16_enable"), ("INT8", "trt_int8_enable"),
])
def test_trt_precision_mode(mode, option) -> None:
    assert tensorrt_options("m", {"precision_mode": mode}) == {option: "True"}


def test_trt_fp32_sets_nothing_and_bad_precision_fails() -> None:
    assert tensorrt_options("m", {"precision_mode": "FP32"}) == {}
    with pytest.raises(ModelLoadError, match="unsupported precision mode 'FP8' is requested"):
        tensorrt_options("m", {"precision_mode": "FP8"})


@pytest.mark.parametrize("key", sorted(TRT_PARAMETERS))
def test_trt_every_parameter_maps(key) -> None:
    option, kind = TRT_PARAMETERS[key]
    value, expected = {"int": ("7", "7"), "bool": ("1", "True"), "str": ("/x", "/x")}[kind]
    assert tensorrt_options("m", {key: value}) == {option: expected}
    if kind != "str":
        with pytest.raises(ModelLoadError, match=f"failed to convert '{key}'"):
            tensorrt_options("m", {key: "not-a-number-or-bool"})


def test_trt_documented_names() -> None:
    options = tensorrt_options("m", {"max_workspace_size_bytes": "1073741824",
                                     "trt_engine_cache_enable": "false",
                                     "trt_engine_cache_path": "/tmp/trt"})
    assert options == {"trt_max_workspace_size": "1073741824",
                       "trt_engine_cache_enable": "False", "trt_engine_cache_path": "/tmp/trt"}
    with pytest.raises(ModelLoadError, match="unknown parameter 'speed' is provided for "
                       "TensorRT Execution Accelerator"):
        tensorrt_options("m", {"speed": "max"})


def test_gpu_plan_orders_providers_like_triton() -> None:
    text = _trt({"precision_mode": "FP16"}).replace(
        "] } }", ', { name: "cuda" parameters { key: "cudnn_conv_use_max_workspace" value: "0" } '
        'parameters { key: "do_copy_in_default_stream" value: "0" } } ] '
        'cpu_execution_accelerator [ { name: "openvino" } ] } }')
    plan = session_plan(_config(text), "KIND_GPU", 1, ALL)
    assert [p for p, _ in plan.providers] == [TENSORRT, CUDA, OPENVINO, CPU]
    assert plan.providers[0][1] == {"trt_fp16_enable": "True", "device_id": "1"}
    assert plan.providers[1][1] == {"cudnn_conv_use_max_workspace": "0",
                                    "do_copy_in_default_stream": "False", "device_id": "1"}
    assert plan.providers[2][1] == {"device_type": "CPU"}


def test_cuda_deprecated_top_level_parameters() -> None:
    text = ('parameters { key: "cudnn_conv_algo_search" value { string_value: "1" } } '
            'parameters { key: "gpu_mem_limit" value { string_value: "4294967200" } } '
            'parameters { key: "arena_extend_strategy" value { string_value: "1" } }')
    cuda = dict(session_plan(_config(text), "KIND_GPU", 0, ALL).providers)[CUDA]
    assert cuda == {"cudnn_conv_algo_search": "HEURISTIC", "gpu_mem_limit": "4294967200",
                    "arena_extend_strategy": "kSameAsRequested",
                    "do_copy_in_default_stream": "1", "device_id": "0"}
    assert dict(session_plan(_config(""), "KIND_GPU", 0, ALL).providers)[CUDA] == {"device_id": "0"}
    bad = 'parameters { key: "cudnn_conv_algo_search" value { string_value: "5" } }'
    with pytest.raises(ModelLoadError, match="unsupported cudnn_conv_algo_search value '5'"):
        session_plan(_config(bad), "KIND_GPU", 0, ALL)
    bad = 'parameters { key: "arena_extend_strategy" value { string_value: "3" } }'
    with pytest.raises(ModelLoadError, match="unsupported arena_extend_strategy value '3'"):
        session_plan(_config(bad), "KIND_GPU", 0, ALL)


def test_gpu_accelerators_ignored_on_cpu_instances() -> None:
    plan = session_plan(_config(_trt({"precision_mode": "FP16"})), "KIND_CPU", 0, [CPU])
    assert plan.providers == [(CPU, {})]


def test_unknown_accelerators_fail() -> None:
    gpu = _trt({}).replace('"tensorrt"', '"warp"')
    with pytest.raises(ModelLoadError, match="unknown Execution Accelerator 'warp' is requested"):
        session_plan(_config(gpu), "KIND_GPU", 0, ALL)
    cpu = 'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "mkl" } ] } }'
    with pytest.raises(ModelLoadError, match="unknown Execution Accelerator 'mkl' is requested"):
        session_plan(_config(cpu), "KIND_CPU", 0, ALL)


def test_unavailable_provider_names_provider_and_package() -> None:
    with pytest.raises(ModelLoadError) as info:
        session_plan(_config(_trt({})), "KIND_GPU", 0, [CUDA, CPU])
    assert "'tensorrt'" in info.value.message and TENSORRT in info.value.message
    assert "onnxruntime-gpu built with TensorRT" in info.value.message


def test_a_provider_that_did_not_start_fails_the_load() -> None:
    """onnxruntime's Python API silently falls back when a provider fails to start (TensorRT's
    libraries missing, ...); the instance must not run elsewhere than its config says."""
    plan = session_plan(_config(_trt({})), "KIND_GPU", 0, ALL)
    check_providers_started("m", plan, [TENSORRT, CUDA, CPU])
    with pytest.raises(ModelLoadError) as info:
        check_providers_started("m", plan, [CUDA, CPU])
    assert info.value.message.startswith(
        f"unable to load model 'm': onnxruntime could not start {TENSORRT} (the session fell "
        f"back to {CUDA}, {CPU}); {TENSORRT} needs onnxruntime-gpu built with TensorRT")
    check_providers_started("m", session_plan(_config(""), "KIND_CPU", 0, [CPU]), [CPU])


# --- load tests on a real model ---------------------------------------------------------

async def _load(tmp_path: Path, extra: str) -> tuple[RepositoryIndexRow, Server]:
    write_model(tmp_path, "add_sub", ADD_SUB_CONFIG + extra, add_sub_graph())
    server = Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False))
    await server.start()
    return (await server.repository_index())[0], server


@pytest.mark.parametrize("level", [-1, 0, 1, 2])
async def test_graph_levels_load_and_infer(tmp_path: Path, level: int) -> None:
    extra = (f"optimization {{ graph {{ level: {level} }} }}\n"
             'parameters { key: "intra_op_thread_count" value { string_value: "1" } }\n'
             'parameters { key: "inter_op_thread_count" value { string_value: "1" } }\n')
    row, server = await _load(tmp_path, extra)
    try:
        assert row["state"] == "READY", row
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        response = await server.infer(InferenceRequest(
            "add_sub", [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", a)]))
        np.testing.assert_array_equal(response.outputs[0].data, a + a)
    finally:
        await server.stop()


async def test_openvino_accelerator_unavailable_fails_load(tmp_path: Path) -> None:
    import onnxruntime

    if OPENVINO in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the OpenVINO provider")
    extra = ('optimization { execution_accelerators { cpu_execution_accelerator '
             '[ { name: "openvino" } ] } }\n')
    row, server = await _load(tmp_path, extra)
    await server.stop()
    assert row["state"] == "UNAVAILABLE"
    assert "unknown Execution Accelerator 'openvino' is requested" in row["reason"]
    assert OPENVINO in row["reason"] and "onnxruntime-openvino" in row["reason"]
