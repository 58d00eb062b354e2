"""Auto-complete from an ONNX graph, as Triton's onnxruntime backend does.

Follows onnxruntime_backend ``ModelState::AutoCompleteConfig`` /
``AutoCompleteMaxBatch`` / ``AutoCompleteIO``. ``onnx`` is imported lazily so
the config layer loads without it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import message as protobuf_message
from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig

logger = logging.getLogger(__name__)

#: ONNX ``TensorProto.DataType`` name -> ``inference.DataType`` (onnxruntime backend's table).
ONNX_TO_CONFIG_DTYPE: dict[str, int] = {
    "BOOL": mc.TYPE_BOOL,
    "UINT8": mc.TYPE_UINT8,
    "UINT16": mc.TYPE_UINT16,
    "UINT32": mc.TYPE_UINT32,
    "UINT64": mc.TYPE_UINT64,
    "INT8": mc.TYPE_INT8,
    "INT16": mc.TYPE_INT16,
    "INT32": mc.TYPE_INT32,
    "INT64": mc.TYPE_INT64,
    "BFLOAT16": mc.TYPE_BF16,
    "FLOAT16": mc.TYPE_FP16,
    "FLOAT": mc.TYPE_FP32,
    "DOUBLE": mc.TYPE_FP64,
    "STRING": mc.TYPE_STRING,
}


@dataclass(frozen=True)
class OnnxTensorInfo:
    """One graph input or output as the onnxruntime backend sees it.

    Attributes:
        name: tensor name.
        data_type: ``inference.DataType`` value (TYPE_INVALID when unsupported).
        onnx_type: the ONNX type name, for error messages.
        dims: shape; symbolic or unknown dims are -1; empty for scalars and
            tensors of unknown rank.
    """

    name: str
    data_type: int
    onnx_type: str
    dims: tuple[int, ...]


def autocomplete_from_onnx(
    config: mc.ModelConfig, model_file: Path, default_max_batch_size: int
) -> None:
    """Complete ``config`` in place from the ONNX graph in ``model_file``.

    Follows the onnxruntime backend: skipped when inputs and outputs are both
    listed (and, beyond Triton, every listed entry has data_type and dims);
    batching is supported only when every input and output has a variable first
    dimension; a batchable graph with ``max_batch_size`` 0 gets
    ``default_max_batch_size`` (warning logged) and, when that is > 1 and no
    scheduler is set, an empty ``dynamic_batching``; an empty input or output
    list is filled from the graph. Beyond Triton, listed entries with no
    data_type or dims are completed from the graph tensor of the same name.

    Args:
        config: the config to complete (mutated); its backend is onnxruntime.
        model_file: ``model.onnx`` file, or a folder holding ``model.onnx``.
        default_max_batch_size: onnxruntime ``default-max-batch-size``.

    Raises:
        InvalidModelConfig: unreadable graph; a non-batchable graph with a
            non-zero max_batch_size; a tensor type Triton cannot express.
    """
    has_inputs = len(config.input) + len(config.batch_input) > 0
    has_outputs = len(config.output) > 0
    incomplete = any(_is_incomplete(io) for io in (*config.input, *config.output))
    if has_inputs and has_outputs and not incomplete:
        logger.debug(
            "skipping model configuration auto-complete for '%s': inputs and outputs "
            "already specified",
            config.name,
        )
        return
    inputs, outputs = read_onnx_tensor_infos(model_file, config.name)
    if not (has_inputs and has_outputs):
        _autocomplete_max_batch(config, inputs, outputs, default_max_batch_size)
    batching = config.max_batch_size > 0
    if not has_inputs:
        _add_all(config.input, inputs, batching, config.name, "input")
    if not has_outputs:
        _add_all(config.output, outputs, batching, config.name, "output")
    _complete_listed(config.input, inputs, batching, config.name, "input")
    _complete_listed(config.output, outputs, batching, config.name, "output")


def read_onnx_tensor_infos(
    model_file: Path, model_name: str
) -> tuple[list[OnnxTensorInfo], list[OnnxTensorInfo]]:
    """Read the graph inputs (initializers excluded) and outputs of an ONNX model.

    External tensor data is not loaded (``load_external_data=False``).

    Args:
        model_file: ``model.onnx`` file, or a folder holding ``model.onnx``.
        model_name: for error messages.

    Returns:
        ``(inputs, outputs)`` in graph order.

    Raises:
        InvalidModelConfig: when the file cannot be read as an ONNX model.
    """
    import onnx

    path = Path(model_file)
    if path.is_dir():
        path = path / "model.onnx"
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except (OSError, ValueError, protobuf_message.Error) as exc:  # unreadable, or not an ONNX protobuf
        raise InvalidModelConfig(
            f"autofill failed for model '{model_name}': unable to load ONNX model '{path}': {exc}"
        ) from None
    initializers = {init.name for init in graph.initializer}
    inputs = [_tensor_info(v) for v in graph.input if v.name not in initializers]
    outputs = [_tensor_info(v) for v in graph.output]
    return inputs, outputs


def _tensor_info(value_info: Any) -> OnnxTensorInfo:
    """``onnx.ValueInfoProto`` -> :class:`OnnxTensorInfo`."""
    import onnx

    kind = value_info.type.WhichOneof("value")
    if kind != "tensor_type":
        return OnnxTensorInfo(value_info.name, mc.TYPE_INVALID, str(kind), ())
    tensor_type = value_info.type.tensor_type
    onnx_type = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
    dims: tuple[int, ...] = ()
    if tensor_type.HasField("shape"):
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
    return OnnxTensorInfo(
        value_info.name, ONNX_TO_CONFIG_DTYPE.get(onnx_type, mc.TYPE_INVALID), onnx_type, dims
    )


def _autocomplete_max_batch(
    config: mc.ModelConfig,
    inputs: Sequence[OnnxTensorInfo],
    outputs: Sequence[OnnxTensorInfo],
    default_max_batch_size: int,
) -> None:
    """Triton's ``AutoCompleteMaxBatch``: max_batch_size and dynamic_batching."""
    can_batch = all(info.dims and info.dims[0] == -1 for info in (*inputs, *outputs))
    if not can_batch:
        if config.max_batch_size != 0:
            raise InvalidModelConfig(
                f"autofill failed for model '{config.name}': model does not support "
                "batching while non-zero max_batch_size is specified"
            )
        return
    if config.max_batch_size == 0:
        config.max_batch_size = max(default_max_batch_size, 0)
        logger.warning(
            "autofilled max_batch_size to %d for model '%s' since batching is supported "
            "but no max_batch_size is specified in model configuration. Must specify "
            "max_batch_size to utilize autofill with a larger max batch size",
            config.max_batch_size,
            config.name,
        )
    if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()


def _is_incomplete(io: mc.ModelInput | mc.ModelOutput) -> bool:
    """A listed entry with no data_type or no dims."""
    return io.data_type == mc.TYPE_INVALID or len(io.dims) == 0


def _add_all(
    ios: Any, infos: Iterable[OnnxTensorInfo], batching: bool, model: str, what: str
) -> None:
    """Triton's ``AutoCompleteIO``: one entry per graph tensor, in graph order."""
    for info in infos:
        entry = ios.add(name=info.name)
        _fill_entry(entry, info, batching, model, what)


def _complete_listed(
    ios: Any, infos: Iterable[OnnxTensorInfo], batching: bool, model: str, what: str
) -> None:
    """Complete listed entries that lack data_type or dims from the same-named tensor."""
    by_name = {info.name: info for info in infos}
    for entry in ios:
        info = by_name.get(entry.name)
        if info is not None and _is_incomplete(entry):
            _fill_entry(entry, info, batching, model, what)


def _fill_entry(
    entry: mc.ModelInput | mc.ModelOutput,
    info: OnnxTensorInfo,
    batching: bool,
    model: str,
    what: str,
) -> None:
    """Set a missing data_type / dims; the batch dim is dropped when batching.

    A tensor left with no dims gets ``dims: [1]``, plus an empty ``reshape`` when
    batching (a batched scalar), as the onnxruntime backend does.
    """
    if entry.data_type == mc.TYPE_INVALID:
        if info.data_type == mc.TYPE_INVALID:
            raise InvalidModelConfig(
                f"autofill failed for model '{model}': unsupported ONNX data type "
                f"{info.onnx_type} for {what} '{info.name}'"
            )
        entry.data_type = info.data_type
    if len(entry.dims) == 0:
        dims = list(info.dims[1:] if batching else info.dims)
        if not dims:
            dims = [1]
            if batching and not entry.HasField("reshape"):
                entry.reshape.SetInParent()
        entry.dims.extend(dims)


__all__ = [
    "ONNX_TO_CONFIG_DTYPE",
    "OnnxTensorInfo",
    "autocomplete_from_onnx",
    "read_onnx_tensor_infos",
]
