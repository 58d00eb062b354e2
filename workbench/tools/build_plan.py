"""``workbench build-plan``: build a TensorRT plan (``model.plan``) from an ONNX model, with an
optimization profile for its dynamic shapes, as operators do with ``trtexec --onnx=...
--minShapes=... --optShapes=... --maxShapes=... --saveEngine=model.plan``; optionally write
the matching ``config.pbtxt`` for a ``tensorrt_plan`` model.

Needs ``tensorrt`` (10.x, imported here only) and an NVIDIA GPU: TensorRT picks kernels by
timing them on the GPU, and the plan then runs only on GPUs of that architecture and with
that TensorRT version (``hardware_compatibility="ampere+"`` trades some speed for every
Ampere-or-newer GPU). Build on the machine (or an identical one) that will serve the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from workbench.config.model_config import model_config_to_text
from workbench.config.tensorrt_io import (
    EngineTensor,
    ProfileRange,
    Shape,
    autocomplete_from_engine,
    config_datatype,
)
from workbench.config.tensorrt_plan import captured_errors, tensorrt_or_missing, trt_logger
from workbench.tools.plan_shapes import PlanBuildError, Triple, plan_profile, read_onnx_inputs

#: default builder workspace (TensorRT's ``MemoryPoolType.WORKSPACE`` limit): 1 GiB
DEFAULT_WORKSPACE_BYTES = 1 << 30
#: ``hardware_compatibility`` values -> ``tensorrt.HardwareCompatibilityLevel`` member names
HARDWARE_LEVELS = {"none": "NONE", "ampere+": "AMPERE_PLUS",
                   "same-compute-capability": "SAME_COMPUTE_CAPABILITY"}
NEEDS = ("building a TensorRT plan needs the 'tensorrt' package (pip install "
         "'workbench[tensorrt]') and an NVIDIA GPU (TensorRT times its kernels on the GPU the plan "
         "is built for)")


def build_plan(
    onnx_path: Path | str,
    plan_path: Path | str,
    *,
    min_batch: int = 1,
    opt_batch: int | None = None,
    max_batch: int = 8,
    dims: Mapping[str, Triple] | None = None,
    shapes: Mapping[str, tuple[Shape, Shape, Shape]] | None = None,
    fp16: bool = False,
    tf32: bool = True,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    hardware_compatibility: str = "none",
) -> list[EngineTensor]:
    """Build ``plan_path`` from ``onnx_path`` with one optimization profile.

    Args:
        onnx_path: the ONNX model (external weight files beside it are read too).
        plan_path: where the serialized engine goes (folders are created).
        min_batch / opt_batch / max_batch, dims, shapes: the profile's ranges, see
            :func:`workbench.tools.plan_shapes.plan_profile`.
        fp16: allow FP16 kernels (``BuilderFlag.FP16``; TensorRT 10's weakly typed networks).
        tf32: allow TF32 for FP32 math on Ampere+ (TensorRT's default; False = trtexec --noTF32,
            closer to FP32 references).
        workspace_bytes: the builder's workspace memory pool limit.
        hardware_compatibility: ``"none"``, ``"ampere+"`` or ``"same-compute-capability"``.

    Returns:
        The plan's inputs and outputs (inputs with their profile range), for
        :func:`plan_model_config`.

    Raises:
        PlanBuildError: exit code 2 for bad ranges or arguments; 1 without tensorrt or a GPU,
            or when TensorRT cannot parse the model or build the engine (its errors included).
    """
    if hardware_compatibility not in HARDWARE_LEVELS:
        raise PlanBuildError(f"hardware compatibility must be one of {', '.join(HARDWARE_LEVELS)}", 2)
    if workspace_bytes <= 0:
        raise PlanBuildError("the workspace must be a positive number of bytes", 2)
    profile = plan_profile(read_onnx_inputs(Path(onnx_path)), min_batch=min_batch,
                           opt_batch=opt_batch, max_batch=max_batch, dims=dims, shapes=shapes)
    trt = _import_tensorrt()
    logger = trt_logger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch: the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    with captured_errors() as lines:
        parsed = parser.parse_from_file(str(onnx_path))
    if not parsed:
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)] + lines
        raise PlanBuildError(f"TensorRT could not parse '{onnx_path}': {'; '.join(errors)}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    _set_precision(trt, config, fp16, tf32)
    if hardware_compatibility != "none":
        config.hardware_compatibility_level = getattr(
            trt.HardwareCompatibilityLevel, HARDWARE_LEVELS[hardware_compatibility])
    tensors = _network_tensors(network, profile)
    _add_profile(builder, config, tensors)
    with captured_errors() as lines:
        serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise PlanBuildError(f"TensorRT could not build a plan from '{onnx_path}': "
                             f"{'; '.join(lines) or 'no reason logged'}")
    plan_path = Path(plan_path)
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    with open(plan_path, "wb") as plan:  # IHostMemory's buffer: raw bytes for file.write
        plan.write(serialized)
    return tensors


def _import_tensorrt():
    trt, missing = tensorrt_or_missing()
    if missing:
        raise PlanBuildError(f"{NEEDS}; here " + " and ".join(missing))
    return trt


def _set_precision(trt, config, fp16: bool, tf32: bool) -> None:
    if fp16:
        flag = getattr(trt.BuilderFlag, "FP16", None)
        if flag is None:  # TensorRT 11 builds strongly typed networks only
            raise PlanBuildError(f"--fp16 needs TensorRT 10 (this is {trt.__version__}); convert "
                                 "the ONNX model to FP16 instead", 2)
        config.set_flag(flag)
    if not tf32:
        config.clear_flag(trt.BuilderFlag.TF32)


def _network_tensors(network, profile: Mapping[str, ProfileRange]) -> list[EngineTensor]:
    tensors = []
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if tensor.name not in profile:
            raise PlanBuildError(f"TensorRT's network has an input '{tensor.name}' that the ONNX "
                                 "graph does not list")
        if tensor.is_shape_tensor:
            raise PlanBuildError(f"input '{tensor.name}' is a shape tensor; build this model with "
                                 "trtexec (the tensorrt backend here does not serve shape tensors)")
        tensors.append(_describe(tensor, True, (profile[tensor.name],)))
    for i in range(network.num_outputs):
        tensors.append(_describe(network.get_output(i), False, ()))
    return tensors


def _describe(tensor, is_input: bool, profiles: tuple[ProfileRange, ...]) -> EngineTensor:
    dtype = tensor.dtype
    shape = tuple(int(d) for d in tensor.shape)
    return EngineTensor(tensor.name, is_input, config_datatype(getattr(dtype, "name", str(dtype))),
                        shape, profiles)


def _add_profile(builder, config, tensors: list[EngineTensor]) -> None:
    dynamic = [t for t in tensors if t.is_input and -1 in t.shape]
    if not dynamic:
        return  # a static network needs no optimization profile
    profile = builder.create_optimization_profile()
    for tensor in dynamic:
        span = tensor.profiles[0]
        profile.set_shape(tensor.name, span.min, span.opt, span.max)
    config.add_optimization_profile(profile)


def plan_model_config(name: str, tensors: list[EngineTensor]) -> mc.ModelConfig:
    """The ``config.pbtxt`` of a ``tensorrt_plan`` model serving the plan ``tensors`` describe:
    inputs, outputs and max_batch_size as the server's auto-complete would fill them, one
    KIND_GPU instance, and ``dynamic_batching {}`` when the plan batches beyond 1."""
    config = mc.ModelConfig(name=name, platform="tensorrt_plan", backend="tensorrt")
    autocomplete_from_engine(config, tensors, [0])
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_GPU)
    return config


def write_model_config(path: Path | str, name: str, tensors: list[EngineTensor]) -> Path:
    """Write :func:`plan_model_config` to ``path`` (``path/config.pbtxt`` for a folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.pbtxt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(model_config_to_text(plan_model_config(name, tensors)))
    return path


__all__ = ["DEFAULT_WORKSPACE_BYTES", "HARDWARE_LEVELS", "build_plan", "plan_model_config",
           "write_model_config"]
