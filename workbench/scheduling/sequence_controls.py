"""Control and implicit-state tensors the sequence batcher gives a model.

Follows Triton's sequence batcher: ``control_input`` entries name the tensors
(CONTROL_SEQUENCE_START / _END / _READY as ``int32_false_true``,
``fp32_false_true`` or ``bool_false_true`` pairs; CONTROL_SEQUENCE_CORRID with a
``data_type``), and ``state`` entries name implicit state carried from one
request of a sequence to the next (``initial_state`` zero data by default).
Tensors have shape ``[1] + dims`` (the request's batch of one) when the model
batches, ``dims`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelSequenceBatching

from workbench.common.datatypes import config_to_wire, numpy_dtype

Kind = ModelSequenceBatching.Control.Kind


@dataclass(frozen=True, slots=True)
class ControlTensor:
    """One control input: its name, kind and the (false, true) values or CORRID dtype."""

    name: str
    kind: int
    false_true: tuple[int, ...] | tuple[float, ...] | tuple[bool, ...]
    dtype: np.dtype


@dataclass(frozen=True, slots=True)
class StateTensor:
    """One implicit state: fed as ``input_name``, read back from ``output_name``."""

    input_name: str
    output_name: str
    dtype: np.dtype
    dims: tuple[int, ...]


def control_tensors(batching: ModelSequenceBatching) -> list[ControlTensor]:
    """The config's control inputs, one entry per control."""
    found = []
    for entry in batching.control_input:
        for control in entry.control:
            if control.kind == Kind.CONTROL_SEQUENCE_CORRID:
                dtype = numpy_dtype(config_to_wire(control.data_type))
                found.append(ControlTensor(entry.name, control.kind, (), dtype))
            elif control.int32_false_true:
                found.append(ControlTensor(entry.name, control.kind, tuple(control.int32_false_true),
                                           np.dtype(np.int32)))
            elif control.fp32_false_true:
                found.append(ControlTensor(entry.name, control.kind, tuple(control.fp32_false_true),
                                           np.dtype(np.float32)))
            else:
                found.append(ControlTensor(entry.name, control.kind, tuple(control.bool_false_true),
                                           np.dtype(np.bool_)))
    return found


def state_tensors(batching: ModelSequenceBatching) -> list[StateTensor]:
    """The config's implicit states (``state { input_name output_name data_type dims }``)."""
    return [
        StateTensor(s.input_name, s.output_name, numpy_dtype(config_to_wire(s.data_type)),
                    tuple(int(d) for d in s.dims))
        for s in batching.state
    ]


def control_values(
    controls: list[ControlTensor], *, start: bool, end: bool, correlation_id: int | str, batched: bool,
    ready: bool = True,
) -> dict[str, np.ndarray]:
    """Control tensors for one row of an execution, each of shape ``[1, 1]`` (batching
    model) or ``[1]``, in the control's dtype.

    A real request has ``ready`` true; the ``direct`` strategy's null requests (empty batch
    slots) have START, END and READY false and CORRID 0, as Triton sends them.
    """
    flags = {Kind.CONTROL_SEQUENCE_START: start, Kind.CONTROL_SEQUENCE_END: end,
             Kind.CONTROL_SEQUENCE_READY: ready}
    shape = (1, 1) if batched else (1,)
    out = {}
    for control in controls:
        if control.kind == Kind.CONTROL_SEQUENCE_CORRID:
            value: object = correlation_id if control.dtype != np.object_ else str(correlation_id).encode()
        else:
            value = control.false_true[1 if flags[control.kind] else 0]
        out[control.name] = np.full(shape, value, dtype=control.dtype)
    return out


def initial_state(state: StateTensor, batched: bool) -> np.ndarray:
    """Zeros of the state's shape (Triton's default ``initial_state``)."""
    dims = tuple(1 if d < 0 else d for d in state.dims)
    return np.zeros(((1,) if batched else ()) + dims, dtype=state.dtype)


__all__ = [
    "ControlTensor",
    "StateTensor",
    "control_tensors",
    "control_values",
    "initial_state",
    "state_tensors",
]
