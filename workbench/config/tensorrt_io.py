"""A TensorRT engine's inputs and outputs against a model config: pure checks and auto-complete.

Works on :class:`EngineTensor` descriptions (names, datatypes, shapes and optimization-profile
ranges read from an engine by :mod:`workbench.config.tensorrt_plan`, or from a network being
built by ``workbench build-plan``), so every rule here runs on CPU without TensorRT. Follows
Triton's tensorrt_backend (``ModelState::AutoCompleteConfigHelper``, ``CompareDimsSupported``,
``ConvertTrtTypeToConfigDataType``); where this backend is stricter it says so.

Shapes are tuples of ints; ``-1`` is a dynamic dimension (TensorRT's and Triton's wildcard).
The profile checks live in :mod:`workbench.config.tensorrt_profiles`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig, ModelLoadError
from workbench.config.batch_io import batch_layout

Shape = tuple[int, ...]

#: ``tensorrt.DataType`` member names -> model-config datatype names (Triton's
#: ``ConvertTrtTypeToConfigDataType``); FP8, INT4, FP4 ... have no Triton type.
TRT_TO_CONFIG = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}


@dataclass(frozen=True, slots=True)
class ProfileRange:
    """One input's shape range in one optimization profile (``get_tensor_profile_shape``)."""

    min: Shape
    opt: Shape
    max: Shape


@dataclass(frozen=True, slots=True)
class EngineTensor:
    """One I/O tensor of a TensorRT engine.

    Attributes:
        name: the tensor name (TensorRT 10's named I/O).
        is_input: ``TensorIOMode.INPUT`` (else OUTPUT).
        datatype: model-config datatype name (``"TYPE_FP32"``), or ``"TRT_<name>"`` for a
            TensorRT type Triton has no name for (``"TRT_FP8"``).
        shape: the engine's shape, -1 for dynamic dims (batch dim included when present).
        profiles: inputs only: the range in each optimization profile, by profile index.
        shape_tensor: ``is_shape_inference_io``: the tensor holds a shape (unsupported here).
    """

    name: str
    is_input: bool
    datatype: str
    shape: Shape
    profiles: tuple[ProfileRange, ...] = field(default=())
    shape_tensor: bool = False


def config_datatype(trt_name: str) -> str:
    """``tensorrt.DataType`` member name (``"FLOAT"``) -> ``"TYPE_FP32"`` (``"TRT_FP8"`` if none)."""
    return TRT_TO_CONFIG.get(trt_name, f"TRT_{trt_name}")


def format_shape(shape: Sequence[int]) -> str:
    """``(-1, 16)`` -> ``"[-1,16]"`` (Triton's ``DimsDebugString`` form)."""
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def batching_supported(tensors: Sequence[EngineTensor]) -> bool:
    """Whether every (non shape-tensor) input has a dynamic first dimension: the engine can
    take a batch dimension. Beyond Triton, which assumes it whenever profiles exist."""
    inputs = [t for t in tensors if t.is_input and not t.shape_tensor]
    return bool(inputs) and all(t.shape and t.shape[0] == -1 for t in inputs)


def engine_max_batch(tensors: Sequence[EngineTensor], profiles: Sequence[int]) -> int:
    """The largest batch the given profiles accept (Triton's ``GetMaxSupportedBatchSize``):
    per profile the smallest ``max[0]`` over the inputs, then the largest over the profiles;
    0 when the engine cannot batch."""
    if not batching_supported(tensors):
        return 0
    inputs = [t for t in tensors if t.is_input and not t.shape_tensor]
    best = 0
    for index in profiles:
        best = max(best, min(t.profiles[index].max[0] for t in inputs if index < len(t.profiles)))
    return best


def check_config_io(config: mc.ModelConfig, tensors: Sequence[EngineTensor]) -> None:
    """Compare the config's inputs and outputs with the engine's (at instance load).

    Every config input/output must be an engine input/output of the same datatype and a
    compatible shape (Triton's ``CompareDimsSupported`` text); every engine input must be in
    the config (TensorRT needs each one's shape). With ``max_batch_size > 0`` the engine's
    first dimension is the batch dimension and must be dynamic (-1); a fixed first dimension
    of 1 is accepted only with ``max_batch_size: 1`` (stricter than Triton, whose error then
    comes from the first execution). Shape tensors and types Triton has no name for (FP8,
    INT4, ...) are refused. Engine outputs missing from the config are computed and dropped.

    Ragged batching as Triton's tensorrt_backend checks it: an ``allow_ragged_batch`` input is
    given flat, so its engine shape must be one dimension equal to its config dims[0]; a
    ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output's dims are not compared; a ``batch_input``
    target is an engine input the config does not list, of the batch input's datatype.

    Raises:
        ModelLoadError: naming the model, the tensor and both sides.
    """
    m = config.name
    layout = batch_layout(config)
    engine = {t.name: t for t in tensors}
    for kind, entries, is_input in (("input", config.input, True), ("output", config.output, False)):
        allowed = sorted(t.name for t in tensors if t.is_input == is_input)
        for entry in entries:
            tensor = engine.get(entry.name)
            if tensor is None or tensor.is_input != is_input:
                raise ModelLoadError(
                    f"unable to load model '{m}', unexpected inference {kind} '{entry.name}', "
                    f"allowed {kind}s are: {', '.join(allowed)}"
                )
            ragged = is_input and entry.name in layout.ragged
            scattered = not is_input and entry.name in layout.outputs
            _check_tensor(config, entry, tensor, kind, dims=not (ragged or scattered))
            if ragged:
                _check_ragged(config, entry, tensor)
    listed = {entry.name for entry in config.input}
    targets = {t: spec.data_type for spec in layout.inputs for t in spec.targets}
    for tensor in tensors:
        if tensor.is_input and tensor.name in targets and tensor.name not in listed:
            if tensor.datatype != targets[tensor.name]:
                raise ModelLoadError(
                    f"unable to load model '{m}', configuration expects datatype "
                    f"{targets[tensor.name]} for batch input '{tensor.name}', model provides "
                    f"{tensor.datatype}"
                )
        elif tensor.is_input and tensor.name not in listed:
            raise ModelLoadError(
                f"unable to load model '{m}': the TensorRT engine's input '{tensor.name}' "
                f"({tensor.datatype} {format_shape(tensor.shape)}) is missing from the model "
                "configuration; every engine input must be listed"
            )


def _check_tensor(config: mc.ModelConfig, entry: mc.ModelInput | mc.ModelOutput, tensor: EngineTensor,
                  kind: str, *, dims: bool = True) -> None:
    m = config.name
    if tensor.shape_tensor:
        raise ModelLoadError(
            f"unable to load model '{m}': {kind} '{tensor.name}' is a TensorRT shape tensor, "
            "which the tensorrt backend here does not serve"
        )
    expected = mc.DataType.Name(entry.data_type)
    if tensor.datatype not in TRT_TO_CONFIG.values():
        raise ModelLoadError(
            f"unable to load model '{m}': the TensorRT engine's {kind} '{tensor.name}' is "
            f"{tensor.datatype.removeprefix('TRT_')}, which has no Triton datatype"
        )
    if expected != tensor.datatype:
        raise ModelLoadError(
            f"unable to load model '{m}', configuration expects datatype {expected} for "
            f"{kind} '{entry.name}', model provides {tensor.datatype}"
        )
    if dims:
        _check_dims(config, entry, tensor)


def _check_ragged(config: mc.ModelConfig, entry: mc.ModelInput | mc.ModelOutput,
                  tensor: EngineTensor) -> None:
    """A ragged input reaches the engine flat: one engine dimension, equal to the config's
    dims[0] (Triton's tensorrt_backend rule and text)."""
    first = int(entry.dims[0]) if entry.dims else None
    if len(tensor.shape) != 1 or tensor.shape[0] != first:
        raise ModelLoadError(
            f"unable to load model '{config.name}': model '{config.name}', tensor '{entry.name}': "
            "for the model to support ragged input, the engine shape is: "
            f"{format_shape(tensor.shape)} while the model config shape is: "
            f"{format_shape(entry.dims)}"
        )


def _check_dims(config: mc.ModelConfig, entry: mc.ModelInput | mc.ModelOutput, tensor: EngineTensor) -> None:
    """Triton's ``CompareDimsSupported`` (non-exact) plus the dynamic-batch-dim rule."""
    dims = [int(d) for d in (entry.reshape.shape if entry.HasField("reshape") else entry.dims)]
    batching = config.max_batch_size > 0
    full = ([-1] if batching else []) + dims
    model = list(tensor.shape)
    prefix = f"unable to load model '{config.name}': model '{config.name}', tensor '{entry.name}': "
    if batching and not model:
        raise ModelLoadError(
            prefix + "for the model to support batching the shape should have at least 1 "
            f"dimension; but shape expected by the model is {format_shape(model)}"
        )
    differ = any(c != -1 and e != -1 and c != e for c, e in zip(full, model, strict=False))  # lengths compared below
    if len(full) != len(model) or differ:
        shown = ("an initial batch dimension because max_batch_size > 0 followed by the "
                 "explicit tensor shape, making complete shape " if batching else "shape ")
        raise ModelLoadError(
            prefix + f"the model expects {len(model)} dimensions (shape {format_shape(model)}) "
            f"but the model configuration specifies {len(full)} dimensions ({shown}"
            f"{format_shape(full)})"
        )
    if batching and model[0] != -1 and not (model[0] == 1 and config.max_batch_size == 1):
        raise ModelLoadError(
            prefix + f"with max_batch_size {config.max_batch_size} the first dimension is the "
            f"batch dimension and must be dynamic (-1) in the engine, but the engine's shape is "
            f"{format_shape(model)}; rebuild the plan with a dynamic batch dimension "
            "(`workbench build-plan --min-batch/--max-batch`), or set max_batch_size: 0 and "
            "list the full shape in dims"
        )


def autocomplete_from_engine(
    config: mc.ModelConfig, tensors: Sequence[EngineTensor], profiles: Sequence[int]
) -> None:
    """Fill what Triton's tensorrt backend auto-completes, in place.

    ``max_batch_size`` (when 0): the engine's :func:`engine_max_batch` over ``profiles`` (the
    profiles the instance groups use, else profile 0), unless the config's listed dims say
    the model does not batch (their rank equals the engine's); ``dynamic_batching {}`` when
    that is > 1 and no scheduler is set; every input/output when the config lists none of
    that kind, else the datatype and dims of listed entries that lack them.

    Raises:
        InvalidModelConfig: Triton's "autofill failed for model 'm': configuration specified
            max-batch 8 but TensorRT engine only supports max-batch 4", or listed dims that
            contradict each other about batching.
    """
    engine_batch = engine_max_batch(tensors, profiles)
    hint = _batch_hint(config, tensors)
    if hint is False:
        engine_batch = 0
    if config.max_batch_size == 0:
        config.max_batch_size = engine_batch
    elif config.max_batch_size > engine_batch:
        raise InvalidModelConfig(
            f"autofill failed for model '{config.name}': configuration specified max-batch "
            f"{config.max_batch_size} but TensorRT engine only supports max-batch {engine_batch}"
            f"; rebuild the plan for batches up to {config.max_batch_size} (`workbench build-plan "
            f"--max-batch {config.max_batch_size}`) or lower max_batch_size"
        )
    if config.max_batch_size > 1 and not (
        config.HasField("dynamic_batching") or config.HasField("sequence_batching")
    ):
        config.dynamic_batching.SetInParent()
    batched = config.max_batch_size > 0
    for entries, is_input in ((config.input, True), (config.output, False)):
        engine = [t for t in tensors if t.is_input == is_input]
        if not entries:
            for tensor in engine:
                _fill(entries.add(name=tensor.name), tensor, batched)
            continue
        by_name = {t.name: t for t in engine}
        for entry in entries:
            if entry.name in by_name:
                _fill(entry, by_name[entry.name], batched)


def _batch_hint(config: mc.ModelConfig, tensors: Sequence[EngineTensor]) -> bool | None:
    """True/False when the config's listed dims say whether the model batches; None if silent."""
    by_name = {t.name: t for t in tensors}
    hint: bool | None = None
    for entry in (*config.input, *config.output):
        dims = entry.reshape.shape if entry.HasField("reshape") else entry.dims
        tensor = by_name.get(entry.name)
        if not dims or tensor is None:
            continue
        batches = len(tensor.shape) == len(dims) + 1
        if hint is not None and hint != batches:
            raise InvalidModelConfig(
                f"unable to autofill for '{config.name}', model tensor configurations are "
                "contradicting each other in terms of whether batching is supported"
            )
        hint = batches
    return hint


def _fill(entry: mc.ModelInput | mc.ModelOutput, tensor: EngineTensor, batched: bool) -> None:
    if entry.data_type == mc.TYPE_INVALID and tensor.datatype in mc.DataType.keys():  # noqa: SIM118  # EnumTypeWrapper has no __contains__
        entry.data_type = mc.DataType.Value(tensor.datatype)
    if not entry.dims and not entry.HasField("reshape"):
        shape = tensor.shape[1:] if batched and tensor.shape else tensor.shape
        if shape:
            entry.dims.extend(shape)
        else:  # only a batch dimension: Triton's dims [1] with an empty reshape
            entry.dims.append(1)
            entry.reshape.SetInParent()


__all__ = [
    "TRT_TO_CONFIG",
    "EngineTensor",
    "ProfileRange",
    "Shape",
    "autocomplete_from_engine",
    "batching_supported",
    "check_config_io",
    "config_datatype",
    "engine_max_batch",
    "format_shape",
]
