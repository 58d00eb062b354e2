"""Reading a TensorRT plan (``model.plan``): TensorRT's logger, deserialization with clear
errors, and the engine's I/O description. ``tensorrt`` is imported only when a plan is read.

TensorRT reports why a plan does not load only through its logger (``deserialize_cuda_engine``
returns None). One process-wide :class:`tensorrt.ILogger` forwards TensorRT's messages to
``logging`` and hands the error lines to whoever is deserializing on the same thread
(:func:`captured_errors`): TensorRT keeps the first logger of a process for all later
runtimes and builders, so a logger per runtime would not see them. :func:`explain_plan_errors`
turns those lines into a reason an operator can act on (pure, CPU-tested).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, SupportsInt

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig, ModelLoadError
from workbench.common.frameworks import import_framework
from workbench.config.tensorrt_io import EngineTensor, ProfileRange, autocomplete_from_engine, config_datatype
from workbench.config.tensorrt_profiles import profile_indices
from workbench.files.model_files import read_model_bytes
from workbench.gpu.devices import gpu_count

log = logging.getLogger(__name__)

#: what a tensorrt_plan model needs, said once for every "cannot load" path
REQUIREMENTS = ("tensorrt_plan models need the 'tensorrt' package (pip install "
                "'workbench[tensorrt]') and an NVIDIA GPU")

# The texts TensorRT logs when deserialization fails, as operators have reported them:
# - library version (TensorRT <= 8.x, and 10.x as "IRuntime::deserializeCudaEngine: Error Code 6:
#   API Usage Error (...)"): "The engine plan file is not compatible with this version of
#   TensorRT, expecting library version 8.2.4 got 8.2.3, please rebuild." (pytorch/TensorRT#1059,
#   triton-inference-server/server#317) and "... expecting library version 10.12.0.36 got .)"
#   (westNeighbor/ComfyUI-ultimate-openpose-estimator#9). "expecting" is the loading library.
# - serialization format tag (TensorRT 8.4+ and 10.x): "Serialization assertion stdVersionRead ==
#   kSERIALIZATION_VERSION failed.Version tag does not match. Note: Current Version: 237,
#   Serialized Engine Version: 239" (yuvraj108c/ComfyUI-Dwpose-Tensorrt#5, NVIDIA/TensorRT#3898;
#   8.x spells it "serializationVersion" / "safeVersionRead == safeSerializationVersion").
# - GPU architecture: "The engine plan file is generated on an incompatible device, expecting
#   compute 8.9 got compute 8.6, please rebuild." (deepinsight/insightface#2882 on TensorRT 10.8;
#   NVIDIA/TensorRT#2177 shows "expecting" is the GPU loading the plan).
# - not a plan at all: "Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does
#   not match" (lix19937/tensorrt-insight#65, an ONNX file read as a plan).
_LIBRARY = re.compile(r"not compatible with this version of TensorRT, expecting library version "
                      r"(?P<here>[\w.]*) got (?P<plan>[\w.]*)")
_FORMAT = re.compile(r"Version tag does not match\. Note: Current Version: (?P<here>\d+), "
                     r"Serialized Engine Version: (?P<plan>\d+)")
_DEVICE = re.compile(r"generated on an incompatible device, expecting compute (?P<here>[\d.]*\d) "
                     r"got compute (?P<plan>[\d.]*\d)")
_MAGIC = re.compile(r"Magic tag does not match")

_REBUILD = ("rebuild the plan on the machine that serves it, from the ONNX model: "
            "`workbench build-plan MODEL.onnx -o model.plan ...`")


def explain_plan_errors(
    lines: Sequence[str], *, model: str, path: str, runtime_version: str, device: str
) -> str:
    """Why a plan did not deserialize, from TensorRT's logged error lines.

    Args:
        lines: the ERROR / INTERNAL_ERROR messages TensorRT logged while deserializing.
        model: model name; path: the plan file; runtime_version: ``tensorrt.__version__`` of
            this server; device: the GPU it was loaded on (``"GPU 0"``).

    Returns:
        ``"unable to load model 'm': ..."``: for another TensorRT version or another GPU
        architecture both sides are named with what to do; a file that is not a plan says so;
        anything else keeps TensorRT's own lines.
    """
    text = "\n".join(lines)
    head = f"unable to load model '{model}': the TensorRT plan '{path}'"
    if match := _LIBRARY.search(text):
        built = match["plan"].strip(".")
        by = f"TensorRT {built}" if built else "another TensorRT version (the plan does not say which)"
        return (f"{head} was built by {by}, but this server runs TensorRT {match['here'].strip('.')} "
                f"({runtime_version}); a plan only loads in the TensorRT version that built it: "
                f"{_REBUILD} with TensorRT {runtime_version} (pip install "
                f"'tensorrt-cu12=={runtime_version}')")
    if match := _FORMAT.search(text):
        return (f"{head} was serialized by another TensorRT version (plan format tag "
                f"{match['plan']}; this server's TensorRT {runtime_version} reads tag "
                f"{match['here']}); a plan only loads in the TensorRT version that built it: "
                f"{_REBUILD} with TensorRT {runtime_version}")
    if match := _DEVICE.search(text):
        return (f"{head} was built for GPUs of compute capability {match['plan']}, but {device} "
                f"here has compute capability {match['here']}; a plan only runs on the GPU "
                f"architecture it was built for: {_REBUILD} on this GPU, or build it with "
                "`--hardware-compatibility ampere+` to run one plan on every Ampere or newer GPU")
    if _MAGIC.search(text):
        return (f"{head} is not a TensorRT engine plan (TensorRT finds no plan header: a "
                "truncated or corrupt file, or another format such as an ONNX model); build "
                "one with `workbench build-plan MODEL.onnx -o model.plan`")
    said = "; ".join(line.strip() for line in lines) or "TensorRT logged no reason"
    return f"{head} could not be deserialized by TensorRT {runtime_version}: {said}"


# -- the process-wide logger ---------------------------------------------------------------------

_LOGGER: Any = None
_LOGGER_LOCK = threading.Lock()
_CAPTURES = threading.local()
#: TensorRT severities (INTERNAL_ERROR=0 .. VERBOSE=4) -> logging levels; VERBOSE is dropped
_LEVELS = {0: logging.ERROR, 1: logging.ERROR, 2: logging.WARNING, 3: logging.DEBUG}


def trt_logger(trt: ModuleType) -> Any:
    """The one :class:`tensorrt.ILogger` this process gives every runtime and builder."""
    global _LOGGER
    with _LOGGER_LOCK:
        if _LOGGER is None:

            class _Logger(trt.ILogger):  # type: ignore[name-defined]  # a base class read off the untyped module
                def __init__(self) -> None:
                    trt.ILogger.__init__(self)

                def log(self, severity: SupportsInt, msg: str) -> None:  # called by TensorRT, GIL held
                    _record(int(severity), str(msg))

            _LOGGER = _Logger()
        return _LOGGER


def _record(severity: int, message: str) -> None:
    if severity not in _LEVELS:
        return
    log.log(_LEVELS[severity], "TensorRT: %s", message)
    if severity <= 1:
        for lines in getattr(_CAPTURES, "active", ()):
            lines.append(message)


@contextlib.contextmanager
def captured_errors() -> Iterator[list[str]]:
    """Collect the TensorRT error lines logged on this thread while the block runs."""
    active = _CAPTURES.__dict__.setdefault("active", [])
    lines: list[str] = []
    active.append(lines)
    try:
        yield lines
    finally:
        active.remove(lines)


# -- reading a plan --------------------------------------------------------------------------------


def tensorrt_or_missing() -> tuple[ModuleType | None, list[str]]:
    """``(tensorrt module, [])`` where TensorRT can run here, else ``(module or None, what is
    missing)``: the package, a visible NVIDIA GPU, or both (one phrase each)."""
    missing = []
    try:
        trt = import_framework("tensorrt")
    except ImportError as exc:
        trt = None
        missing.append(f"the 'tensorrt' package is not installed ({exc})")
    if gpu_count() == 0:
        missing.append("no NVIDIA GPU is visible (the CUDA driver reports none)")
    return trt, missing


def import_tensorrt(model: str) -> ModuleType:
    """``tensorrt``, after checking a GPU is there.

    Raises:
        ModelLoadError: no GPU, or no ``tensorrt`` package (:data:`REQUIREMENTS`, saying which).
    """
    trt, missing = tensorrt_or_missing()
    if missing or trt is None:  # trt is None only with a reason in missing
        raise ModelLoadError(f"unable to load model '{model}': {REQUIREMENTS}; here "
                             + " and ".join(missing))
    return trt


def deserialize(trt: ModuleType, runtime: Any, data: bytes, *, model: str, path: Path, device_id: int) -> Any:
    """``runtime.deserialize_cuda_engine(data)`` on the calling thread's current device.

    Raises:
        ModelLoadError: :func:`explain_plan_errors`'s reason.
    """
    with captured_errors() as lines:
        engine = runtime.deserialize_cuda_engine(data)
    if engine is None:
        raise ModelLoadError(explain_plan_errors(
            lines, model=model, path=str(path), runtime_version=trt.__version__,
            device=f"GPU {device_id}"))
    return engine


def engine_tensors(trt: ModuleType, engine: Any) -> list[EngineTensor]:
    """The engine's I/O tensors in engine order, with every input's profile ranges."""
    tensors = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        shape_tensor = bool(engine.is_shape_inference_io(name))
        profiles: tuple[ProfileRange, ...] = ()
        if is_input and not shape_tensor:
            profiles = tuple(_profile_range(engine, name, shape, p)
                             for p in range(engine.num_optimization_profiles))
        dtype = engine.get_tensor_dtype(name)
        tensors.append(EngineTensor(name, is_input, config_datatype(getattr(dtype, "name", str(dtype))),
                                    shape, profiles, shape_tensor))
    return tensors


def _profile_range(engine: Any, name: str, shape: tuple[int, ...], index: int) -> ProfileRange:
    if -1 not in shape:  # a static input: every profile holds exactly its shape
        return ProfileRange(shape, shape, shape)
    low, opt, high = (tuple(int(d) for d in dims) for dims in engine.get_tensor_profile_shape(name, index))
    return ProfileRange(low, opt, high)


def autocomplete_from_plan(config: mc.ModelConfig, plan_path: Path) -> None:
    """Triton's tensorrt auto-complete: read the plan and fill the config (see
    :func:`~workbench.config.tensorrt_io.autocomplete_from_engine`). Without ``tensorrt`` or a
    GPU only a warning (the load then fails with :data:`REQUIREMENTS`).

    Raises:
        InvalidModelConfig: the plan does not deserialize (the explained reason) or disagrees
            with the config.
    """
    try:
        trt = import_tensorrt(config.name)
    except ModelLoadError as exc:
        log.warning("skipping model configuration auto-complete for '%s': %s", config.name, exc)
        return
    runtime = trt.Runtime(trt_logger(trt))
    try:
        engine = deserialize(trt, runtime, read_model_bytes(plan_path), model=config.name,
                             path=plan_path, device_id=0)
    except ModelLoadError as exc:
        raise InvalidModelConfig(exc.message) from None
    tensors = engine_tensors(trt, engine)
    names = [name for group in config.instance_group for name in group.profile]
    try:
        used = profile_indices(config, names, engine.num_optimization_profiles)
    except ModelLoadError as exc:
        raise InvalidModelConfig(exc.message) from None
    autocomplete_from_engine(config, tensors, used)


__all__ = [
    "REQUIREMENTS",
    "autocomplete_from_plan",
    "captured_errors",
    "deserialize",
    "engine_tensors",
    "explain_plan_errors",
    "import_tensorrt",
    "trt_logger",
]
