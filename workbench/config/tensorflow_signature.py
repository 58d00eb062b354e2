"""A SavedModel's serving signature, and auto-complete from it, as Triton's tensorflow backend.

Follows tensorflow_backend: the meta graph of tag ``TF_GRAPH_TAG`` (default ``serve``), the
signature ``TF_SIGNATURE_DEF`` (default ``serving_default``; when that default is absent, the
first signature that is neither ``__saved_model_init_op`` nor ``__saved_model_train_op``, with
a warning, as ``TRITONTF_ModelCreateFromSavedModel``). A tensor's name is its key in the
signature's ``inputs`` / ``outputs`` map (``pixels``), never the graph tensor behind it
(``serving_default_pixels:0``). Auto-complete follows ``AutoCompleteHelper``
(``FixBatchingSupport``, ``FixConfigInputs``, ``FixConfigOutputs``).

Only ``saved_model.pb`` is read (protobuf, no variables), with TensorFlow's own message classes:
``tensorflow`` is imported when a SavedModel config is completed or loaded, never before.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import message as protobuf_message
from tritonclient.grpc import model_config_pb2 as mc

from workbench.errors import InvalidModelConfig, ModelLoadError
from workbench.model_files import read_model_bytes

logger = logging.getLogger(__name__)

DEFAULT_TAG = "serve"
DEFAULT_SIGNATURE = "serving_default"
#: signatures a SavedModel keeps for itself, never served (Triton skips them too)
RESERVED_SIGNATURES = ("__saved_model_init_op", "__saved_model_train_op")

#: TensorFlow ``DataType`` enum name -> model-config enum (tensorflow_backend's ConvertDataType)
TF_TO_CONFIG: dict[str, int] = {
    "DT_BOOL": mc.TYPE_BOOL,
    "DT_UINT8": mc.TYPE_UINT8,
    "DT_UINT16": mc.TYPE_UINT16,
    "DT_UINT32": mc.TYPE_UINT32,
    "DT_UINT64": mc.TYPE_UINT64,
    "DT_INT8": mc.TYPE_INT8,
    "DT_INT16": mc.TYPE_INT16,
    "DT_INT32": mc.TYPE_INT32,
    "DT_INT64": mc.TYPE_INT64,
    "DT_HALF": mc.TYPE_FP16,
    "DT_FLOAT": mc.TYPE_FP32,
    "DT_DOUBLE": mc.TYPE_FP64,
    "DT_STRING": mc.TYPE_STRING,
}


@dataclass(frozen=True)
class TfTensor:
    """One signature input or output.

    Attributes:
        name: its key in the signature (what the model config names).
        data_type: model-config ``DataType`` (TYPE_INVALID for a type Triton cannot express).
        tf_type: TensorFlow's type name (``DT_FLOAT``), for messages.
        dims: shape, -1 for an unknown dim; None for an unknown rank (the config's shape is
            then taken as it is, as Triton does for a rank-0 signature shape).
    """

    name: str
    data_type: int
    tf_type: str
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class Signature:
    """The signature a model serves: its key, inputs and outputs (sorted by name)."""

    key: str
    inputs: tuple[TfTensor, ...]
    outputs: tuple[TfTensor, ...]


#: TensorFlow's native log threshold variable, and its value when the user set none
#: (``1``: warnings and errors, not INFO)
TF_LOG_LEVEL_VARIABLE, TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL", "1"


def import_tensorflow() -> Any:
    """``import tensorflow``, with OpenAI Triton's ``libtriton`` loaded first when installed.

    TensorFlow >= 2.20's wheels load their library with ``RTLD_GLOBAL``, putting its LLVM in the
    global symbol table; a ``libtriton`` (torch's ``triton`` package, >= 3.7) loaded *after*
    it binds to that LLVM and the process dies with SIGSEGV (tensorflow/tensorflow#124205).
    torch loads libtriton lazily (``torch._dynamo``: ``torch.compile``, a ``torch.optim``
    optimizer), so a PyTorch or Python-backend model after a TensorFlow one would crash the
    server. Loaded before TensorFlow, libtriton keeps its own LLVM (0.25 s, once).

    TensorFlow's native INFO lines ("oneDNN custom operations are on", "This TensorFlow binary
    is optimized to use available CPU instructions", with absl's "All log messages before
    absl::InitializeLog() is called are written to STDERR") are kept off the server's
    terminal: ``TF_CPP_MIN_LOG_LEVEL`` defaults to 1 (warnings and errors still show) before
    the first import, unless the user set it. They are TensorFlow describing its build, not
    the user's concern (tritonserver's TensorFlow backend logs at its own verbose level).

    Raises:
        ImportError: TensorFlow is not installed.
    """
    if "tensorflow" not in sys.modules and not os.environ.get(TF_LOG_LEVEL_VARIABLE):
        os.environ[TF_LOG_LEVEL_VARIABLE] = TF_LOG_LEVEL
    if importlib.util.find_spec("triton") is not None:
        try:
            importlib.import_module("triton._C.libtriton")
        except (ImportError, OSError) as exc:  # a broken triton: TensorFlow still loads
            logger.debug("not preloading triton's libtriton before TensorFlow: %s", exc)
    return importlib.import_module("tensorflow")


def parameter(config: mc.ModelConfig, key: str, default: str = "") -> str:
    """A config ``parameters`` value (Triton's tensorflow parameters are strings)."""
    return config.parameters[key].string_value if key in config.parameters else default


def read_signature(config: mc.ModelConfig, model_path: Path) -> Signature:
    """The signature ``config`` selects in the SavedModel folder ``model_path``.

    Raises:
        ModelLoadError: no readable ``saved_model.pb``, no meta graph of the tag, or the
            signature absent (the message lists the signatures there).
    """
    name = config.name
    tag = parameter(config, "TF_GRAPH_TAG") or DEFAULT_TAG
    asked = parameter(config, "TF_SIGNATURE_DEF")
    import_tensorflow()
    from tensorflow.core.protobuf import saved_model_pb2

    pb_path = model_path / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(read_model_bytes(pb_path))
    except (OSError, protobuf_message.DecodeError) as exc:
        raise ModelLoadError(f"unable to load model '{name}': cannot read SavedModel "
                             f"'{pb_path}': {exc}") from None
    graphs = [g for g in saved.meta_graphs if tag in g.meta_info_def.tags]
    if not graphs:
        tags = sorted({t for g in saved.meta_graphs for t in g.meta_info_def.tags})
        raise ModelLoadError(f"unable to load model '{name}', expected '{tag}' tag; the "
                             f"SavedModel has tags {tags}")
    signatures = graphs[0].signature_def
    servable = sorted(k for k in signatures if k not in RESERVED_SIGNATURES)
    key = asked or DEFAULT_SIGNATURE
    if key not in signatures or key in RESERVED_SIGNATURES:
        if asked or not servable:
            raise ModelLoadError(f"unable to load model '{name}', expected '{key}' signature; "
                                 f"the SavedModel has signatures {servable}")
        logger.warning("unable to find serving signature '%s' in model '%s'; using signature '%s'",
                       key, name, servable[0])
        key = servable[0]
    signature = signatures[key]
    return Signature(key, _tensors(signature.inputs), _tensors(signature.outputs))


def _tensors(entries: Any) -> tuple[TfTensor, ...]:
    from tensorflow.core.framework import types_pb2

    tensors = []
    for key in sorted(entries):
        info = entries[key]
        tf_type = types_pb2.DataType.Name(info.dtype)
        shape = info.tensor_shape
        dims = None if shape.unknown_rank else tuple(int(d.size) for d in shape.dim)
        tensors.append(TfTensor(key, TF_TO_CONFIG.get(tf_type, mc.TYPE_INVALID), tf_type, dims))
    return tuple(tensors)


def supports_batching(signature: Signature) -> bool:
    """Triton's ``ModelSupportsBatch``: every tensor of known rank has a first dim of -1."""
    return all(not t.dims or t.dims[0] == -1 for t in (*signature.inputs, *signature.outputs))


def autocomplete_from_savedmodel(config: mc.ModelConfig, model_path: Path,
                                 default_max_batch_size: int) -> None:
    """Complete ``config`` in place from the signature of the SavedModel in ``model_path``.

    As tensorflow_backend's ``AutoCompleteHelper``: ``max_batch_size`` 0 becomes
    ``default_max_batch_size`` (warning logged) when the signature batches (every first dim
    -1) and the config's listed tensors do not say otherwise (their dims' rank one less than
    the signature's); with ``max_batch_size > 1`` and no scheduler an empty
    ``dynamic_batching`` is added. Inputs: listed ones are completed (data_type, dims), the
    signature's others appended. Outputs: all of them when none is listed, else only the
    listed ones completed. A scalar (rank 0) gets ``dims: [1]`` and an empty ``reshape``.

    Raises:
        InvalidModelConfig: an unreadable SavedModel or missing signature (Triton's "unable to
            auto-complete model configuration" text), a non-zero ``max_batch_size`` for a
            signature that cannot batch, contradicting tensor ranks, or a tensor of a type
            or rank auto-complete cannot express.
    """
    try:
        signature = read_signature(config, model_path)
    except ModelLoadError as exc:
        raise InvalidModelConfig(f"unable to auto-complete model configuration for "
                                 f"'{config.name}', failed to load model: {exc}") from None
    batching = _fix_batching(config, signature, default_max_batch_size)
    by_input = {t.name: t for t in signature.inputs}
    listed = {e.name for e in config.input}
    listed |= {n for b in config.batch_input for n in b.target_name}
    listed |= {c.name for c in config.sequence_batching.control_input}
    for entry in config.input:
        if entry.name in by_input:
            _fill(config.name, entry, by_input[entry.name], batching)
    for tensor in signature.inputs:
        if tensor.name not in listed:
            _fill(config.name, config.input.add(name=tensor.name), tensor, batching)
    by_output = {t.name: t for t in signature.outputs}
    if not config.output:
        for tensor in signature.outputs:
            _fill(config.name, config.output.add(name=tensor.name), tensor, batching)
    for entry in config.output:
        if entry.name in by_output:
            _fill(config.name, entry, by_output[entry.name], batching)


def _fix_batching(config: mc.ModelConfig, signature: Signature, default_max_batch_size: int) -> bool:
    """Triton's ``FixBatchingSupport``; returns whether auto-complete drops the batch dim."""
    can_batch = supports_batching(signature)
    if not can_batch and config.max_batch_size > 0:
        raise InvalidModelConfig(
            f"unable to autofill for '{config.name}', configuration specified max-batch "
            f"{config.max_batch_size} but model signature does not support batching")
    hint = False
    if can_batch:
        # listed tensors hint for or against batching; none listed: the signature decides
        hint = _config_batch_hint(config, signature) if config.input or config.output else True
    batching = hint and default_max_batch_size > 0
    if config.max_batch_size == 0 and batching:
        config.max_batch_size = default_max_batch_size
        logger.warning(
            "autofilled max_batch_size to %d for model '%s' since batching is supported but no "
            "max_batch_size is specified in model configuration. Must specify max_batch_size to "
            "utilize autofill with a larger max batch size", default_max_batch_size, config.name)
    if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()
    return batching


def _config_batch_hint(config: mc.ModelConfig, signature: Signature) -> bool:
    """What the listed tensors say about batching (Triton's explicit / weak hints)."""
    explicit: bool | None = None
    weak = False
    for entries, tensors in ((config.input, signature.inputs), (config.output, signature.outputs)):
        by_name = {t.name: t for t in tensors}
        for entry in entries:
            if getattr(entry, "allow_ragged_batch", False):
                return True
            tensor = by_name.get(entry.name)
            if tensor is None or not tensor.dims:
                continue
            dims = list(entry.reshape.shape) if entry.HasField("reshape") else list(entry.dims)
            if not dims:
                weak = weak or explicit is None
                continue
            says = len(dims) == len(tensor.dims) - 1
            if explicit is not None and explicit != says:
                raise InvalidModelConfig(
                    f"unable to autofill for '{config.name}', model tensor configurations are "
                    "contradicting each other in terms of whether batching is supported")
            explicit = says
    return explicit if explicit is not None else weak


def _fill(model: str, entry: Any, tensor: TfTensor, batching: bool) -> None:
    """Triton's ``FillMissingValues``: a missing data_type and dims from the signature."""
    if entry.data_type == mc.TYPE_INVALID:
        if tensor.data_type == mc.TYPE_INVALID:
            raise InvalidModelConfig(f"unable to autofill for '{model}': unsupported datatype "
                                     f"'{tensor.tf_type}' of model tensor '{tensor.name}'")
        entry.data_type = tensor.data_type
    if len(entry.dims) == 0:
        if not tensor.dims:
            raise InvalidModelConfig(f"Unable to autofill for '{model}': the rank of model tensor "
                                     f"'{tensor.name}' is 0 and dimensions are not defined")
        dims = list(tensor.dims[1:] if batching else tensor.dims)
        if not dims:
            dims = [1]
            entry.reshape.SetInParent()
        entry.dims.extend(dims)


__all__ = [
    "DEFAULT_SIGNATURE",
    "DEFAULT_TAG",
    "TF_TO_CONFIG",
    "Signature",
    "TfTensor",
    "autocomplete_from_savedmodel",
    "import_tensorflow",
    "parameter",
    "read_signature",
    "supports_batching",
]
