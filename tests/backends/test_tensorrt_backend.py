"""The tensorrt backend (``platform: "tensorrt_plan"``) where no TensorRT or GPU is needed.

On this CPU machine: the backend resolves; a plan model is UNAVAILABLE with what it needs
while a real sample keeps serving; TensorRT's real deserialization error texts become clear
reasons; the profile / max_batch_size / config-vs-engine rules as pure functions over shapes;
auto-complete and the config ``workbench build-plan --config`` writes; build-plan's shape
handling and its CLI errors. Serving real plans is tested in tests/gpu/test_tensorrt_gpu.py.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.registry import backend_for, servable_backends
from workbench.backends.tensorrt import TensorRTBackend
from workbench.common.errors import InvalidArgument, InvalidModelConfig, ModelLoadError
from workbench.config.model_config import parse_model_config
from workbench.config.normalize import normalize_model_config
from workbench.config.tensorrt_io import (
    EngineTensor,
    ProfileRange,
    autocomplete_from_engine,
    check_config_io,
    engine_max_batch,
)
from workbench.config.tensorrt_plan import REQUIREMENTS, _record, captured_errors, explain_plan_errors
from workbench.config.tensorrt_profiles import check_profiles, choose_profile, instance_profiles
from workbench.config.validate import validate_model_config
from workbench.hosts.cli import main
from workbench.tools.build_plan import plan_model_config
from workbench.tools.plan_shapes import (
    PlanBuildError,
    parse_dims,
    parse_shapes,
    plan_profile,
    read_onnx_inputs,
    split_shapes,
)

ROOT = Path(__file__).resolve().parents[2]


# --- registry, config validation, the Server without TensorRT ---------------------------------------


def test_platform_tensorrt_plan_resolves_to_the_tensorrt_backend() -> None:
    assert "tensorrt" in servable_backends() and "tensorrt_plan" in servable_backends()
    backend = backend_for(mc.ModelConfig(name="m", platform="tensorrt_plan"))
    assert isinstance(backend, TensorRTBackend)
    assert backend.default_model_filename == "model.plan"


PLAN_CONFIG = """
name: "encoder_plan"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
instance_group [ { kind: KIND_GPU count: 2 profile: [ "0", "1" ] } ]
optimization { cuda { graphs: true busy_wait_events: true } }
parameters { key: "execution_context_allocation_strategy" value { string_value: "ON_PROFILE_CHANGE" } }
"""


def test_tensorrt_plan_configs_validate_as_in_triton() -> None:
    config = normalize_model_config(parse_model_config(PLAN_CONFIG), gpu_count=1)
    config.backend = "tensorrt"  # what auto-complete fills from the platform
    validate_model_config(config, "encoder_plan", known_backends=servable_backends())
    onnx_config = parse_model_config(PLAN_CONFIG.replace("tensorrt_plan", "onnxruntime_onnx"))
    onnx_config.backend = "onnxruntime"
    with pytest.raises(InvalidModelConfig, match="profile field which is only supported for TensorRT"):
        validate_model_config(onnx_config, "encoder_plan", known_backends=servable_backends())


def _digits_request() -> InferenceRequest:
    pixels = np.linspace(0, 16, 64, dtype=np.float32).reshape(1, 64)
    return InferenceRequest("digits_mlp", [Tensor("pixels", "FP32", pixels)])


async def test_without_tensorrt_a_plan_is_unavailable_and_other_models_serve(
    tmp_path: Path, sample_repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "digits_mlp").symlink_to(sample_repository / "digits_mlp", target_is_directory=True)
    (tmp_path / "encoder_plan" / "1").mkdir(parents=True)
    (tmp_path / "encoder_plan" / "config.pbtxt").write_text(PLAN_CONFIG)
    (tmp_path / "encoder_plan" / "1" / "model.plan").write_bytes(b"\x00not a plan" * 100)
    (tmp_path / "bare_plan" / "1").mkdir(parents=True)  # no config: found by its model.plan
    (tmp_path / "bare_plan" / "1" / "model.plan").write_bytes(b"any bytes")
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt -> ImportError, everywhere
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with Server(options) as server:
        rows = {(r["name"], r["version"]): r for r in await server.repository_index()}
        for name in ("encoder_plan", "bare_plan"):
            row = rows[(name, "1")]
            assert row["state"] == "UNAVAILABLE"
            assert REQUIREMENTS in row["reason"], row["reason"]
            assert "'tensorrt' package is not installed" in row["reason"]
        response = await server.infer(_digits_request())
        assert response.outputs[0].data.shape == (1, 10)
        assert rows[("digits_mlp", "2")]["state"] == "READY"


async def test_the_plan_file_honours_default_model_filename(tmp_path: Path) -> None:
    config = PLAN_CONFIG + 'default_model_filename: "encoder.engine"\n'
    (tmp_path / "encoder_plan" / "1").mkdir(parents=True)
    (tmp_path / "encoder_plan" / "config.pbtxt").write_text(config)
    (tmp_path / "encoder_plan" / "1" / "model.plan").write_bytes(b"the default name, not used")
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with Server(options) as server:
        row = (await server.repository_index())[0]
        assert row["state"] == "UNAVAILABLE"
        assert "encoder_plan/1/encoder.engine' for model instance 'encoder_plan_0_0'" in row["reason"]


# --- TensorRT's deserialization errors -> clear reasons ----------------------------------------------

# The lines TensorRT logs, verbatim from operators' reports (see workbench/config/tensorrt_plan.py).
LIBRARY_8 = ("6: The engine plan file is not compatible with this version of TensorRT, expecting "
             "library version 8.2.4 got 8.2.3, please rebuild.")
LIBRARY_10_EMPTY = ("IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine "
                    "plan file is not compatible with this version of TensorRT, expecting library "
                    "version 10.12.0.36 got .)")
FORMAT_10 = ("IRuntime::deserializeCudaEngine: Error Code 1: Serialization (Serialization assertion "
             "stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match. Note: "
             "Current Version: 237, Serialized Engine Version: 239)")
DEVICE_10 = ("IRuntime::deserializeCudaEngine: Error Code 6: API Usage Error (The engine plan file "
             "is generated on an incompatible device, expecting compute 8.9 got compute 8.6, "
             "please rebuild.)")
DEVICE_8 = ("6: The engine plan file is generated on an incompatible device, expecting compute 6.1 "
            "got compute 7.5, please rebuild.")
MAGIC = ("1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization "
         "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
FAILED = "4: [runtime.cpp::deserializeCudaEngine::65] Error Code 4: Internal Error (Engine deserialization failed.)"


def _explain(*lines: str) -> str:
    return explain_plan_errors(list(lines), model="bert", path="/repo/bert/1/model.plan",
                               runtime_version="10.13.0.35", device="GPU 0")


def test_a_plan_from_another_tensorrt_version_names_both_versions_and_what_to_do() -> None:
    reason = _explain(LIBRARY_8, FAILED)
    assert reason.startswith("unable to load model 'bert': the TensorRT plan '/repo/bert/1/model.plan'")
    assert "was built by TensorRT 8.2.3, but this server runs TensorRT 8.2.4" in reason
    assert "workbench build-plan" in reason and "tensorrt-cu12==10.13.0.35" in reason
    unknown = _explain(LIBRARY_10_EMPTY)
    assert "built by another TensorRT version (the plan does not say which)" in unknown
    assert "this server runs TensorRT 10.12.0.36" in unknown
    tag = _explain(FORMAT_10, FAILED)
    assert "serialized by another TensorRT version (plan format tag 239; this server's TensorRT " \
           "10.13.0.35 reads tag 237)" in tag and "workbench build-plan" in tag


def test_a_plan_for_another_gpu_architecture_names_both_and_what_to_do() -> None:
    reason = _explain(DEVICE_10)
    assert "was built for GPUs of compute capability 8.6, but GPU 0 here has compute capability 8.9" in reason
    assert "workbench build-plan" in reason and "--hardware-compatibility ampere+" in reason
    assert "compute capability 7.5, but GPU 0 here has compute capability 6.1" in _explain(DEVICE_8, FAILED)


def test_other_deserialization_failures_keep_tensorrt_s_words() -> None:
    assert "is not a TensorRT engine plan" in _explain(MAGIC, FAILED)
    other = _explain("1: [pluginV2Runner.cpp::load::303] Error Code 1: Serialization (plugin not found)")
    assert other.endswith("could not be deserialized by TensorRT 10.13.0.35: 1: [pluginV2Runner.cpp::"
                          "load::303] Error Code 1: Serialization (plugin not found)")
    assert _explain().endswith("TensorRT logged no reason")


def test_tensorrt_errors_are_captured_per_thread_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    other: list[str] = []

    def elsewhere() -> None:
        with captured_errors() as lines:
            _record(1, "error on another thread")
        other.extend(lines)

    with caplog.at_level(logging.DEBUG, "workbench.config.tensorrt_plan"), captured_errors() as mine:
        _record(0, "internal error here")
        _record(2, "a warning is not a reason")
        _record(4, "verbose chatter is dropped")
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    _record(1, "after the block")
    assert mine == ["internal error here"]
    assert other == ["error on another thread"]
    logged = [r.getMessage() for r in caplog.records]
    assert "TensorRT: a warning is not a reason" in logged
    assert not any("verbose" in m for m in logged)


# --- optimization profiles against max_batch_size and the config --------------------------------------


def _input(name: str = "input_ids", shape=(-1, -1), *ranges: tuple) -> EngineTensor:
    profiles = tuple(ProfileRange(*r) for r in ranges) or (ProfileRange((1, 1), (4, 64), (8, 128)),)
    return EngineTensor(name, True, "TYPE_INT64", shape, profiles)


def test_profiles_must_reach_max_batch_size() -> None:
    tensor = _input("input_ids", (-1, -1), ((1, 1), (4, 64), (8, 128)), ((1, 1), (2, 64), (4, 128)))
    check_profiles("bert", 8, {"input_ids": [-1]}, [tensor], [0])
    with pytest.raises(ModelLoadError) as error:
        check_profiles("bert", 8, {"input_ids": [-1]}, [tensor], [0, 1])
    assert error.value.message == (
        "unable to load model 'bert': configuration specified max-batch 8 but TensorRT engine only "
        "supports max-batch 4 (optimization profile 1, input 'input_ids': min [1,1], opt [2,64], "
        "max [4,128]); rebuild the plan with a larger maximum batch (`workbench build-plan "
        "--max-batch 8` or --max-shapes input_ids:8x128) or lower max_batch_size to 4")


def test_fixed_config_dims_must_lie_in_every_profile() -> None:
    check_profiles("bert", 8, {"input_ids": [128]}, [_input()], [0])
    with pytest.raises(ModelLoadError) as error:
        check_profiles("bert", 8, {"input_ids": [256]}, [_input()], [0])
    assert error.value.message == (
        "unable to load model 'bert': model configuration specified invalid shape for input "
        "'input_ids' for model bert. Error details: model expected the shape of dimension 1 to be "
        "between 1 and 128 but received 256 (optimization profile 0)")
    with pytest.raises(ModelLoadError, match="model expected 1 dimensions but received 2"):
        static = _input("x", (-1,), ((1,), (4,), (8,)))
        check_profiles("m", 0, {"x": [2, 3]}, [static], [0])


def test_a_profile_that_cannot_take_one_request_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_profiles("bert", 8, {}, [_input("x", (-1,), ((2,), (4,), (8,)))], [0])
    assert "accepts batches of 2..8 for input 'x'; smaller batches (a single request) will fail" in caplog.text


def test_each_batch_runs_in_the_fitting_profile_closest_to_its_opt_shapes() -> None:
    short = ((1, 1), (8, 16), (16, 32))
    long = ((1, 32), (4, 256), (8, 512))
    wide = ((1, 1), (8, 128), (8, 512))
    tensors = [_input("ids", (-1, -1), short, long, wide), _input("mask", (-1, -1), short, long, wide)]
    assert choose_profile("bert", {"ids": (8, 16), "mask": (8, 16)}, tensors, [0, 1, 2]) == 0
    assert choose_profile("bert", {"ids": (4, 300), "mask": (4, 300)}, tensors, [0, 1, 2]) == 1
    assert choose_profile("bert", {"ids": (8, 100), "mask": (8, 100)}, tensors, [0, 1, 2]) == 2
    assert choose_profile("bert", {"ids": (4, 300), "mask": (4, 300)}, tensors, [2]) == 2
    with pytest.raises(InvalidArgument) as error:
        choose_profile("bert", {"ids": (16, 600), "mask": (16, 600)}, tensors, [0, 1])
    assert error.value.message == ("input 'ids' of model 'bert': model expected the shape of dimension "
                                   "1 to be between 1 and 32 but received 600 (optimization profile 0)")


def test_instances_use_their_group_s_profiles() -> None:
    config = parse_model_config(PLAN_CONFIG)
    config.instance_group[0].name = "gpu_group"
    config.instance_group.add(name="default_group", kind=mc.ModelInstanceGroup.KIND_GPU)
    assert instance_profiles(config, "gpu_group", 2) == (0, 1)
    assert instance_profiles(config, "default_group", 2) == (0,)
    with pytest.raises(ModelLoadError) as error:
        instance_profiles(config, "gpu_group", 1)
    assert error.value.message == ("unable to load model 'encoder_plan', configuration specified "
                                   "invalid profile 1 . Number of profiles supported by TensorRT "
                                   "engine: 1")


# --- the config against the engine's I/O, and auto-complete -------------------------------------------

ENGINE = [
    _input("input_ids", (-1, -1), ((1, 1), (4, 64), (8, 128)), ((1, 1), (16, 64), (32, 128))),
    EngineTensor("embedding", False, "TYPE_FP32", (-1, 384)),
    EngineTensor("scores", False, "TYPE_FP16", (-1,)),
]


def _config(text: str = PLAN_CONFIG) -> mc.ModelConfig:
    config = parse_model_config(text)
    config.backend = "tensorrt"
    return config


@pytest.mark.parametrize(("change", "reason"), [
    (('name: "input_ids"', 'name: "token_ids"'),
     "unexpected inference input 'token_ids', allowed inputs are: input_ids"),
    (('name: "embedding"', 'name: "input_ids"'),
     "unexpected inference output 'input_ids', allowed outputs are: embedding, scores"),
    (("TYPE_INT64", "TYPE_INT32"),
     "configuration expects datatype TYPE_INT32 for input 'input_ids', model provides TYPE_INT64"),
    (("dims: [ 384 ]", "dims: [ 768 ]"),
     "tensor 'embedding': the model expects 2 dimensions (shape [-1,384]) but the model configuration "
     "specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the "
     "explicit tensor shape, making complete shape [-1,768])"),
    (("max_batch_size: 8", "max_batch_size: 0"),
     "tensor 'input_ids': the model expects 2 dimensions (shape [-1,-1]) but the model configuration "
     "specifies 1 dimensions (shape [-1])"),
])
def test_config_and_engine_must_agree(change, reason) -> None:
    with pytest.raises(ModelLoadError) as error:
        check_config_io(_config(PLAN_CONFIG.replace(*change)), ENGINE)
    assert reason in error.value.message


def test_batching_needs_a_dynamic_first_dimension_and_every_engine_input() -> None:
    check_config_io(_config(), ENGINE)
    static = [EngineTensor("input_ids", True, "TYPE_INT64", (4, -1)), *ENGINE[1:]]
    with pytest.raises(ModelLoadError, match=r"with max_batch_size 8 the first dimension is the batch "
                                             r"dimension and must be dynamic \(-1\) in the engine, but "
                                             r"the engine's shape is \[4,-1\]"):
        check_config_io(_config(), static)
    extra = [*ENGINE, EngineTensor("mask", True, "TYPE_INT64", (-1, -1))]
    with pytest.raises(ModelLoadError, match=r"engine's input 'mask' .* is missing from the model"):
        check_config_io(_config(), extra)
    shape_tensor = [EngineTensor("input_ids", True, "TYPE_INT64", (-1, -1), shape_tensor=True), *ENGINE[1:]]
    with pytest.raises(ModelLoadError, match="is a TensorRT shape tensor"):
        check_config_io(_config(), shape_tensor)
    fp8 = [ENGINE[0], EngineTensor("embedding", False, "TRT_FP8", (-1, 384))]
    with pytest.raises(ModelLoadError, match="'embedding' is FP8, which has no Triton datatype"):
        check_config_io(_config(), fp8)


def test_auto_complete_fills_io_max_batch_size_and_dynamic_batching() -> None:
    config = mc.ModelConfig(name="bert", platform="tensorrt_plan", backend="tensorrt")
    assert engine_max_batch(ENGINE, [0]) == 8 and engine_max_batch(ENGINE, [0, 1]) == 32
    autocomplete_from_engine(config, ENGINE, [0])
    assert config.max_batch_size == 8 and config.HasField("dynamic_batching")
    assert [(i.name, mc.DataType.Name(i.data_type), list(i.dims)) for i in config.input] == [
        ("input_ids", "TYPE_INT64", [-1])]
    outputs = {o.name: o for o in config.output}
    assert list(outputs["embedding"].dims) == [384]
    assert list(outputs["scores"].dims) == [1] and outputs["scores"].HasField("reshape")
    too_big = mc.ModelConfig(name="bert", max_batch_size=16)
    with pytest.raises(InvalidModelConfig) as error:
        autocomplete_from_engine(too_big, ENGINE, [0])
    assert error.value.message.startswith("autofill failed for model 'bert': configuration "
                                          "specified max-batch 16 but TensorRT engine only "
                                          "supports max-batch 8; rebuild the plan")
    unbatched = _config('name: "bert"\ninput [ { name: "input_ids" dims: [ -1, -1 ] } ]')
    autocomplete_from_engine(unbatched, ENGINE, [0])
    assert unbatched.max_batch_size == 0 and mc.DataType.Name(unbatched.input[0].data_type) == "TYPE_INT64"
    assert list(unbatched.output[0].dims) == [-1, 384]


def test_build_plan_config_is_a_valid_tensorrt_plan_config() -> None:
    config = plan_model_config("bert", ENGINE)
    text = str(config)
    reparsed = parse_model_config(text)
    validate_model_config(normalize_model_config(reparsed, gpu_count=1), "bert",
                          known_backends=servable_backends(), gpu_count=1)
    assert reparsed.platform == "tensorrt_plan" and reparsed.max_batch_size == 8
    assert mc.ModelInstanceGroup.Kind.Name(reparsed.instance_group[0].kind) == "KIND_GPU"
    check_config_io(reparsed, ENGINE)


# --- build-plan: profile shapes and the CLI without TensorRT -----------------------------------------


def _token_model(path: Path) -> Path:
    """input_ids, attention_mask INT64 [batch, sequence], pixel FP32 [batch, 3] -> two outputs."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
              for n in ("input_ids", "attention_mask")]
    inputs.append(helper.make_tensor_value_info("pixel", TensorProto.FLOAT, ["batch", 3]))
    outputs = [helper.make_tensor_value_info("masked", TensorProto.INT64, ["batch", "sequence"]),
               helper.make_tensor_value_info("pixel_out", TensorProto.FLOAT, ["batch", 3])]
    nodes = [helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
             helper.make_node("Identity", ["pixel"], ["pixel_out"])]
    weight = helper.make_tensor("unused_weight", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(nodes, "tokens", inputs, outputs, initializer=[weight])
    graph.input.append(helper.make_tensor_value_info("unused_weight", TensorProto.FLOAT, [1]))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_profile_shapes_from_the_onnx_model_and_the_operator(tmp_path: Path) -> None:
    inputs = read_onnx_inputs(_token_model(tmp_path / "tokens.onnx"))
    assert [(i.name, i.dims) for i in inputs] == [
        ("input_ids", ("batch", "sequence")), ("attention_mask", ("batch", "sequence")),
        ("pixel", ("batch", 3))]
    profile = plan_profile(inputs, min_batch=1, opt_batch=4, max_batch=16,
                           dims=parse_dims(["sequence=1,128,512"]))
    assert profile["input_ids"] == ProfileRange((1, 1), (4, 128), (16, 512))
    assert profile["pixel"] == ProfileRange((1, 3), (4, 3), (16, 3))
    shapes = split_shapes(parse_shapes(["attention_mask:2x8"], "--min-shapes"), {},
                          parse_shapes(["attention_mask:4x64"], "--max-shapes"))
    profile = plan_profile(inputs, max_batch=8, dims={"sequence": (1, 16, 64)}, shapes=shapes)
    assert profile["attention_mask"] == ProfileRange((2, 8), (4, 64), (4, 64))
    assert profile["input_ids"] == ProfileRange((1, 1), (8, 16), (8, 64))


@pytest.mark.parametrize(("name", "content"), [
    ("model.onnx", b"\x0a\xff\xff\xff\xff\xff"),  # protobuf bytes cut short: DecodeError
    ("model.onnx", b"not a model \xff\xfe"),
    ("model.json", b"{"),  # onnx picks a JSON / text reader by the file's extension
    ("model.textproto", b"zz: 1"),
    ("model.onnxtxt", b"<bad"),
])
@pytest.mark.filterwarnings("ignore:The onnxtxt format is experimental")  # onnx's, for .onnxtxt files
def test_a_file_that_is_not_onnx_is_a_usage_error(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(PlanBuildError) as error:
        read_onnx_inputs(path)
    assert error.value.message.startswith(f"'{path}' is not an ONNX model: ") and error.value.exit_code == 2


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dims": {}}, "input 'input_ids' has dynamic dimension 1 ('sequence') (shape [batch,sequence]); give its "
         "range with --dim sequence=MIN,OPT,MAX or --min-shapes/--opt-shapes/--max-shapes input_ids:..."),
    ({"min_batch": 4, "max_batch": 2}, "batch sizes need 1 <= min (4) <= opt (2) <= max (2)"),
    ({"shapes": {"pixel": ((1, 4), (1, 4), (1, 4))}},
     "input 'pixel': dimension 1 is fixed at 3 in the ONNX model; the given shapes say 4, 4, 4"),
    ({"shapes": {"pixel": ((1,), (1,), (1,))}}, "input 'pixel' has 2 dimensions"),
    ({"shapes": {"image": ((1,), (1,), (1,))}}, "shapes given for 'image', which the ONNX model does not take"),
])
def test_profile_shape_mistakes_are_usage_errors(tmp_path: Path, kwargs, message) -> None:
    inputs = read_onnx_inputs(_token_model(tmp_path / "tokens.onnx"))
    with pytest.raises(PlanBuildError) as error:
        plan_profile(inputs, **{"dims": {"sequence": (1, 8, 16)}, **kwargs})
    assert message in error.value.message and error.value.exit_code == 2


@pytest.mark.parametrize(("parse", "text"), [
    (lambda: parse_shapes(["input_ids:1xA"], "--min-shapes"), "--min-shapes: expected NAME:DxDxD"),
    (lambda: parse_dims(["sequence=1,128"]), "--dim: expected NAME=MIN,OPT,MAX"),
    (lambda: parse_dims(["sequence=8,4,16"]), "need 0 <= MIN <= OPT <= MAX"),
    (lambda: split_shapes({"x": (1,)}, {}, {}), "give its shape in both --min-shapes and --max-shapes"),
])
def test_malformed_shape_flags_are_usage_errors(parse, text) -> None:
    with pytest.raises(PlanBuildError, match=text):
        parse()


def test_build_plan_without_tensorrt_says_what_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    model = _token_model(tmp_path / "tokens.onnx")
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    status = main(["build-plan", str(model), "-o", str(tmp_path / "m" / "1" / "model.plan"),
                   "--dim", "sequence=1,16,64", "--config", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith("workbench build-plan: error: building a TensorRT plan needs the 'tensorrt' "
                          "package (pip install 'workbench[tensorrt]') and an NVIDIA GPU")
    assert not (tmp_path / "m").exists()


def test_build_plan_cli_reports_usage_errors_without_a_traceback(tmp_path: Path) -> None:
    model = _token_model(tmp_path / "tokens.onnx")
    run = [sys.executable, "-m", "workbench.hosts.cli", "build-plan", str(model), "-o",
           str(tmp_path / "model.plan")]
    result = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "error: input 'input_ids' has dynamic dimension 1 ('sequence')" in result.stderr
    assert "Traceback" not in result.stderr
    missing = subprocess.run([*run[:4], str(tmp_path / "nope.onnx"), "-o", "x.plan"],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert missing.returncode == 2 and "ONNX model" in missing.stderr and "not found" in missing.stderr
    with pytest.raises(SystemExit) as exited:  # argparse: -o is required
        main(["build-plan", str(model)])
    assert exited.value.code == 2


# --- ragged batching (issue 19 item 4): the load checks, on CPU -------------------------------------

RAGGED_PLAN_CONFIG = """
name: "ragged"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "SHAPES" data_type: TYPE_INT32 source_input: "INPUT" } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT" source_input: "INPUT" } ]
"""


def _ragged_engine(input_shape=(-1,), shapes_type: str = "TYPE_INT32") -> list[EngineTensor]:
    """A flat ragged INPUT [n] (profile: 1..4096 elements), its item shapes SHAPES [b, 1] and a
    flat OUTPUT [n]."""
    flat = (ProfileRange((1,), (64,), (4096,)),)
    return [EngineTensor("INPUT", True, "TYPE_FP32", input_shape, flat),
            EngineTensor("SHAPES", True, shapes_type, (-1, 1),
                         (ProfileRange((1, 1), (4, 1), (8, 1)),)),
            EngineTensor("OUTPUT", False, "TYPE_FP32", (-1,))]


def test_a_ragged_engine_passes_the_load_checks() -> None:
    """The flat input is one dimension, the batch input an engine input the config does not
    list, the scatter output's dims are not compared; the profiles check neither's batch dim."""
    config, engine = _config(RAGGED_PLAN_CONFIG), _ragged_engine()
    check_config_io(config, engine)
    inputs = [t for t in engine if t.is_input]
    check_profiles("ragged", 8, {"INPUT": [-1]}, inputs, [0], free={"INPUT", "SHAPES"})


@pytest.mark.parametrize(("engine", "reason"), [
    (_ragged_engine((-1, -1)), "unable to load model 'ragged': model 'ragged', tensor 'INPUT': for the "
                               "model to support ragged input, the engine shape is: [-1,-1] while "
                               "the model config shape is: [-1]"),
    (_ragged_engine(shapes_type="TYPE_INT64"),
     "unable to load model 'ragged', configuration expects datatype TYPE_INT32 for batch input "
     "'SHAPES', model provides TYPE_INT64"),
])
def test_a_ragged_config_the_engine_cannot_take_fails_the_load(engine, reason: str) -> None:
    with pytest.raises(ModelLoadError) as error:
        check_config_io(_config(RAGGED_PLAN_CONFIG), engine)
    assert error.value.message == reason
