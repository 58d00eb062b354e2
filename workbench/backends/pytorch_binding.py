"""How a TorchScript module's forward() arguments and results bind to the model config's inputs and
outputs (Triton's pytorch_backend naming rules: argument names, ``INPUT__<i>``, config order;
``OUTPUT__<i>``), with the datatype checks done at load."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelOutput

from workbench.common.errors import ModelLoadError

log = logging.getLogger(__name__)


#: model-config datatypes a TorchScript tensor carries -> ``torch`` dtype attribute names
CONFIG_TO_TORCH = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT16": "int16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
}
#: why the other datatypes cannot be served
_UNSUPPORTED = {
    "TYPE_UINT16": "torch has no arithmetic on unsigned 16/32/64-bit tensors",
    "TYPE_UINT32": "torch has no arithmetic on unsigned 16/32/64-bit tensors",
    "TYPE_UINT64": "torch has no arithmetic on unsigned 16/32/64-bit tensors",
    "TYPE_BF16": "this pytorch backend does not convert BF16 tensors (the Python backend does)",
}
_TORCH_TO_CONFIG_EXTRA = {"bfloat16": "TYPE_BF16", "uint16": "TYPE_UINT16",
                          "uint32": "TYPE_UINT32", "uint64": "TYPE_UINT64"}
_NO_METADATA = (
    "TorchScript files carry no input/output metadata, so the pytorch backend cannot "
    "auto-complete them: list the inputs and outputs in config.pbtxt"
)
OUTPUT_KINDS = (
    "output must be of type Tensor, List[str] or Tuple containing one of these two types. "
    "It should not be a List / Dictionary of Tensors or a Scalar"
)


@dataclass(frozen=True, slots=True)
class BoundInput:
    name: str
    position: int  # forward() argument index; -1 for a Dict[str, Tensor] forward()
    strings: bool  # BYTES, fed as List[str]
    optional: bool


@dataclass(frozen=True, slots=True)
class BoundOutput:
    name: str
    index: int  # element of forward()'s result
    config_type: str  # "TYPE_FP32"
    dims: tuple[int, ...]  # per-sample shape the model returns (reshape.shape when given)


def forward_signature(module, model: str) -> tuple[list, list]:
    """``forward()``'s arguments (without ``self``) and its return types."""
    try:
        schema = module.forward.schema
    except (AttributeError, RuntimeError):
        raise ModelLoadError(
            f"unable to load model '{model}': the TorchScript module has no forward() method"
        ) from None
    arguments = list(schema.arguments)
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]
    return arguments, list(schema.returns)


def is_dict_input(arguments: list) -> bool:
    return len(arguments) == 1 and arguments[0].type.kind() == "DictType"


def _is_string_list_type(t) -> bool:
    return t.kind() == "ListType" and t.getElementType().kind() == "StringType"


def is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _io_dims(entry) -> tuple[int, ...]:
    return tuple(int(d) for d in (entry.reshape.shape if entry.HasField("reshape") else entry.dims))


def _check_datatype(config: ModelConfig, entry, kind: str) -> str:
    name = DataType.Name(entry.data_type)
    if name in CONFIG_TO_TORCH or name == "TYPE_STRING":
        return name
    why = _UNSUPPORTED.get(name, "not a TorchScript tensor type")
    raise ModelLoadError(
        f"unsupported datatype {name} for {kind} '{entry.name}' for model '{config.name}' ({why})"
    )


def _named_index(name: str) -> int | None:
    """``<name>__<index>`` -> index (Triton: the part after the first ``__`` is all digits)."""
    _, sep, suffix = name.partition("__")
    return int(suffix) if sep and suffix.isdigit() else None


def bind_inputs(config: ModelConfig, arguments: list, batched: bool, dict_input: bool) -> list[BoundInput]:
    m = config.name
    if not config.input:
        raise ModelLoadError(
            f"unable to load model '{m}': model configuration must contain at least one input, "
            f"none were specified ({_NO_METADATA})"
        )
    if dict_input:
        value_type = arguments[0].type.getValueType()
        if arguments[0].type.getKeyType().kind() != "StringType" or value_type.kind() != "TensorType":
            raise ModelLoadError(
                f"unable to load model '{m}': forward() takes {arguments[0].type}; a dict input "
                "must be Dict(str, Tensor)"
            )
        bound = []
        for entry in config.input:
            if _check_datatype(config, entry, "input") == "TYPE_STRING":
                raise ModelLoadError(
                    f"unable to load model '{m}': input '{entry.name}' is TYPE_STRING, but "
                    "forward() takes Dict(str, Tensor) and tensors cannot hold strings"
                )
            bound.append(BoundInput(entry.name, -1, False, entry.optional))
        bound += [BoundInput(name, -1, False, False) for name, _, _ in _sequence_inputs(config)]
        bound += [BoundInput(name, -1, False, False) for name in _batch_targets(config)]
        return bound

    for arg in arguments:
        kind = arg.type.kind()
        if kind == "DictType":
            raise ModelLoadError(
                f"unable to load model '{m}': Multiple inputs of kind DictType were detected. "
                "Only a single input of type Dict(str, Tensor) is supported."
            )
        if kind != "TensorType" and not _is_string_list_type(arg.type):
            raise ModelLoadError(
                f"unable to load model '{m}': An input of type '{arg.type}' was detected in the "
                "model. Only a single input of type Dict(str, Tensor) or input(s) of type Tensor "
                "are supported."
            )
    extras = _sequence_inputs(config)
    # Triton counts each batch_input entry once (batch_input_count_), as the inputs do
    expected = len(config.input) + len(extras) + len(config.batch_input)
    if len(arguments) != expected:
        raise ModelLoadError(
            f"unable to load model '{m}', configuration expects {expected} inputs, "
            f"model provides {len(arguments)} (forward({', '.join(a.name for a in arguments)}))"
        )
    arg_names = [a.name for a in arguments]
    positions = _input_positions(config, arg_names, stateful=any(e[2] for e in extras))
    entries = [(e.name, _check_datatype(config, e, "input"), _io_dims(e), e.optional)
               for e in config.input]
    entries += [(name, datatype, (), False) for name, datatype, _ in extras]
    positions += [_named_index(name) for name, _, _ in extras]  # type: ignore[misc]
    targets = _batch_targets(config)
    entries += [(name, datatype, (), False) for name, datatype in targets.items()]
    positions += _batch_input_positions(config, arg_names, list(targets))
    _check_positions(m, [e[0] for e in entries], positions, arg_names)
    bound = []
    for (name, datatype, dims, optional), position in zip(entries, positions, strict=True):
        arg = arguments[position]
        strings = _is_string_list_type(arg.type)
        if (datatype == "TYPE_STRING") != strings:
            raise ModelLoadError(
                f"unable to load model '{m}': input '{name}' is {datatype} but binds to "
                f"forward() argument '{arg.name}' of type {arg.type}; TorchScript tensors "
                "cannot hold strings, so TYPE_STRING inputs need a List[str] argument and "
                "List[str] arguments a TYPE_STRING input"
            )
        if strings and len(dims) + int(batched) > 1:
            raise ModelLoadError(
                "Triton only supports 1 dimensional List of String as input for "
                f"'{name}' for model '{m}'"
            )
        bound.append(BoundInput(name, position, strings, optional))
    return bound


def _sequence_inputs(config: ModelConfig) -> list[tuple[str, str, bool]]:
    """(name, datatype, is_state) of the sequence batcher's control and implicit-state inputs;
    as in Triton they must be named ``<name>__<index>`` (forward()'s argument index)."""
    if not config.HasField("sequence_batching"):
        return []
    batching = config.sequence_batching
    extras = []
    for entry in batching.control_input:
        for control in entry.control:
            if control.kind == control.CONTROL_SEQUENCE_CORRID:
                datatype = DataType.Name(control.data_type)
            elif len(control.fp32_false_true):
                datatype = "TYPE_FP32"
            elif len(control.bool_false_true):
                datatype = "TYPE_BOOL"
            else:
                datatype = "TYPE_INT32"
            extras.append((entry.name, datatype, False))
    extras += [(state.input_name, DataType.Name(state.data_type), True) for state in batching.state]
    for name, datatype, is_state in extras:
        if _named_index(name) is None:
            what = "sequence state input" if is_state else "input"
            raise ModelLoadError(
                f"unable to load model '{config.name}': {what} '{name}' does not follow "
                "<name>__<index> naming convention."
            )
        if datatype not in CONFIG_TO_TORCH:
            raise ModelLoadError(
                f"unsupported datatype {datatype} for input '{name}' for model '{config.name}' "
                f"({_UNSUPPORTED.get(datatype, 'not a TorchScript tensor type')})"
            )
    return extras


def _batch_targets(config: ModelConfig) -> dict[str, str]:
    """Every ``batch_input`` target (Triton's ragged batching) -> its datatype, in config order.
    As in Triton's pytorch_backend each target is one more ``forward()`` argument (a tensor)."""
    return {target: DataType.Name(entry.data_type)
            for entry in config.batch_input for target in entry.target_name}


def _batch_input_positions(config: ModelConfig, arg_names: list[str], targets: list[str]) -> list[int]:
    """The ``forward()`` argument of each batch input target, by the naming convention the
    config inputs follow (Triton's ``AddInputToMap``): argument names, then ``<name>__<index>``,
    then config order (after the config inputs, in ``batch_input`` order).

    Raises:
        ModelLoadError: a target the convention cannot place (not an argument name, or not
            ``<name>__<index>``), where Triton would bind nothing and fail at execution.
    """
    names = [e.name for e in config.input]
    if all(n in arg_names for n in names):
        missing = [t for t in targets if t not in arg_names]
        if missing:
            raise ModelLoadError(
                f"unable to load model '{config.name}': batch input '{missing[0]}' is not a "
                f"forward() argument ({', '.join(arg_names)}), as the model's inputs are; name "
                "it after one"
            )
        return [arg_names.index(t) for t in targets]
    if all(_named_index(n) is not None for n in names):
        indices = [_named_index(t) for t in targets]
        if any(i is None for i in indices):
            name = next(t for t, i in zip(targets, indices, strict=True) if i is None)
            raise ModelLoadError(
                f"unable to load model '{config.name}': batch input '{name}' does not follow "
                "<name>__<index> naming convention, as the model's inputs do."
            )
        return [i for i in indices if i is not None]
    return list(range(len(names), len(names) + len(targets)))


def _check_positions(model: str, names: list[str], positions: list[int], arg_names: list[str]) -> None:
    """Every input takes its own forward() argument (beyond Triton, which would misbehave)."""
    seen: dict[int, str] = {}
    for name, index in zip(names, positions, strict=True):
        if index >= len(arg_names):
            raise ModelLoadError(
                f"unable to load model '{model}': input '{name}' refers to forward() argument "
                f"{index} (<name>__<index> naming convention), but forward() takes "
                f"{len(arg_names)} ({', '.join(arg_names)})"
            )
        if index in seen:
            raise ModelLoadError(
                f"unable to load model '{model}': inputs '{seen[index]}' and '{name}' both refer "
                f"to forward() argument {index}"
            )
        seen[index] = name


def _input_positions(config: ModelConfig, arg_names: list[str], stateful: bool = False) -> list[int]:
    """Triton's naming conventions: forward() argument names, else ``<name>__<index>``, else
    config order. Beyond Triton, config order that would bind an input named after one argument
    to another one is a load error."""
    m, names = config.name, [e.name for e in config.input]
    indices = [_named_index(n) for n in names]
    if stateful and any(i is None for i in indices):
        raise ModelLoadError(
            f"PyTorch model '{m}' is using sequence batching with state but not all inputs and "
            "outputs follow the <name>__<index> naming convention. "
        )
    if all(n in arg_names for n in names):
        return [arg_names.index(n) for n in names]
    if all(i is not None for i in indices):
        return [i for i in indices if i is not None]
    for position, name in enumerate(names):
        if name in arg_names and arg_names[position] != name:
            raise ModelLoadError(
                f"unable to load model '{m}': input '{name}' is named after forward() argument "
                f"{arg_names.index(name)}, but not every input is named after a forward() "
                f"argument ({', '.join(arg_names)}) or follows <name>__<index>, so inputs bind "
                f"in configuration order and '{name}' would get argument {position} "
                f"('{arg_names[position]}'); name the inputs after forward()'s arguments or "
                "INPUT__<index>"
            )
    log.warning(
        "input '%s' or previous input(s) are neither an input argument to the model '%s' nor do "
        "they follow the <name>__<index> naming convention. Falling back to enforcing strict "
        "ordering from model configuration.",
        next(n for n, i in zip(names, indices, strict=True) if i is None), m,
    )
    return list(range(len(names)))


def bind_outputs(config: ModelConfig, returns: list) -> list[BoundOutput]:
    m = config.name
    if not config.output:
        raise ModelLoadError(
            f"unable to load model '{m}': model configuration must contain at least one output, "
            f"none were specified ({_NO_METADATA})"
        )
    element_types = _return_elements(m, returns)
    states = list(config.sequence_batching.state) if config.HasField("sequence_batching") else []
    names = [o.name for o in config.output]
    named = [_named_index(n) for n in names]
    if states and any(i is None for i in named + [_named_index(s.output_name) for s in states]):
        raise ModelLoadError(
            f"PyTorch model '{m}' is using sequence batching with state but not all inputs and "
            "outputs follow the <name>__<index> naming convention. "
        )
    indices = [i for i in named if i is not None]
    if len(indices) < len(named):
        log.warning(
            "output '%s' or previous output(s) of the model '%s' do not follow the <name>__<index> "
            "naming convention. Falling back to enforcing strict ordering from model configuration.",
            next(n for n, i in zip(names, named, strict=True) if i is None), m,
        )
        indices = list(range(len(names)))
    entries = [(e, _check_datatype(config, e, "output"), _io_dims(e)) for e in config.output]
    for state in states:  # implicit state: fed back by the sequence batcher from this output
        if state.output_name not in names:
            state_type = DataType.Name(state.data_type)
            if state_type not in CONFIG_TO_TORCH:
                raise ModelLoadError(
                    f"unsupported datatype {state_type} for output state '{state.output_name}' "
                    f"for model '{m}'"
                )
            entry = ModelOutput(name=state.output_name, data_type=state.data_type)
            entries.append((entry, state_type, tuple(int(d) for d in state.dims)))
            index = _named_index(state.output_name)
            assert index is not None  # with states every output name was checked above
            indices.append(index)
    bound = []
    for (entry, datatype, dims), index in zip(entries, indices, strict=True):
        if element_types is not None:
            if index >= len(element_types):
                raise ModelLoadError(
                    f"unable to load model '{m}': The output {entry.name} in the model "
                    "configuration refers to an output index which doesn't exist. This model has "
                    f"{len(element_types)} outputs"
                )
            element = element_types[index]
            if element is not None and (datatype == "TYPE_STRING") != _is_string_list_type(element):
                raise ModelLoadError(
                    f"unable to load model '{m}': output '{entry.name}' is {datatype}, but "
                    f"forward() returns {element} at index {index}; TYPE_STRING outputs must be "
                    "List[str] and tensors cannot be TYPE_STRING"
                )
        bound.append(BoundOutput(entry.name, index, datatype, dims))
    return bound


def _return_elements(model: str, returns: list) -> list | None:
    """Types of forward()'s result elements (None: only known at execution; an element None:
    any type)."""
    if len(returns) != 1:
        return None
    t = returns[0].type
    kind = t.kind()
    if kind == "TupleType":
        elements = list(t.elements())
        for i, element in enumerate(elements):
            if element.kind() not in ("TensorType", "AnyType") and not _is_string_list_type(element):
                raise ModelLoadError(
                    f"unable to load model '{model}': forward() returns {t}; output at index {i} "
                    f"must be of type Tensor or List[str], received {element}"
                )
        return [e if e.kind() != "AnyType" else None for e in elements]
    if kind == "TensorType" or _is_string_list_type(t):
        return [t]
    if kind == "AnyType":
        return None
    raise ModelLoadError(f"unable to load model '{model}': forward() returns {t}; {OUTPUT_KINDS}")


def torch_to_config(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    for config_type, torch_name in CONFIG_TO_TORCH.items():
        if torch_name == name:
            return config_type
    return _TORCH_TO_CONFIG_EXTRA.get(name, str(dtype))


def format_shape(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"
