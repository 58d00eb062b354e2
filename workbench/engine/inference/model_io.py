"""Per-model tensor specs precomputed from the model config (the infer path reads only these)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.datatypes import NUMPY_TO_WIRE, WIRE_TO_NUMPY, config_to_wire
from workbench.common.results import TensorMetadata


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output of a model.

    Attributes:
        name, wire: tensor name and wire datatype (``"FP32"``...).
        dims: per-sample dims from the config (batch dim excluded); -1 = variable.
        reshape: the config's ``reshape.shape`` or None when there is none.
        optional: input may be omitted.
    """

    name: str
    wire: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False

    @property
    def dtype(self) -> np.dtype | None:
        return WIRE_TO_NUMPY.get(self.wire)

    def wire_of(self, array: np.ndarray) -> str:
        """The datatype an output ``array`` is answered with: the config's, or the array's own
        when the backend made another Triton datatype (Triton's core checks an output's name,
        not its datatype: a Python model answering FP16 for an FP32 output answers FP16)."""
        dtype = self.dtype
        if dtype is None or not isinstance(array, np.ndarray) or array.dtype == dtype:
            return self.wire
        if array.dtype.kind in ("O", "S", "U"):
            return "BYTES"
        return NUMPY_TO_WIRE.get(array.dtype.newbyteorder("="), self.wire)

    def full_dims(self, max_batch_size: int) -> tuple[int, ...]:
        """Dims as clients see them: a leading -1 when the model batches."""
        return (-1, *self.dims) if max_batch_size > 0 else self.dims

    def undo_reshape(self, array: np.ndarray, batched: bool) -> np.ndarray:
        """An output as the model made it (the ``reshape`` shape) in the config's ``dims``,
        as Triton's core gives it to clients (``InferenceResponse::Output::Reshape``): the
        batch dim kept when the model batches, each -1 of ``dims`` filled, in order, with the
        sizes the model gave at the -1 positions of ``reshape``.

        ``array`` comes back unchanged without a ``reshape``, and when it cannot be put in
        those dims (a rank or element count that does not fit: the model's own shape is
        then what the client sees rather than an error for data the model did produce).
        """
        if self.reshape is None:
            return array
        lead = array.shape[:1] if batched and array.ndim else ()
        item = array.shape[len(lead):]
        if len(item) != len(self.reshape):
            if any(d == -1 for d in self.reshape):
                return array
            item = self.reshape  # no variable dim to read: Triton needs none of the shape
        variable = iter(s for d, s in zip(self.reshape, item, strict=True) if d == -1)
        target = lead + tuple(next(variable, -1) if d == -1 else d for d in self.dims)
        if target == array.shape:
            return array
        if -1 in target or int(np.prod(target)) != array.size:
            return array
        return array.reshape(target)


class ModelIO:
    """Inputs and outputs of one model config, keyed by name, in config order."""

    def __init__(self, config: ModelConfig) -> None:
        self.model_name = config.name
        self.max_batch_size = int(config.max_batch_size)
        self.inputs = {i.name: _spec(i, i.optional) for i in config.input}
        self.outputs = {o.name: _spec(o, False) for o in config.output}
        self.required = [n for n, s in self.inputs.items() if not s.optional]

    def metadata(self) -> tuple[list[TensorMetadata], list[TensorMetadata]]:
        """``inputs`` / ``outputs`` lists of the v2 model metadata response (``shape``: -1 =
        variable, with a leading -1 batch dim when the model batches)."""
        return (
            [self._meta(s) for s in self.inputs.values()],
            [self._meta(s) for s in self.outputs.values()],
        )

    def _meta(self, spec: TensorSpec) -> TensorMetadata:
        return {
            "name": spec.name,
            "datatype": spec.wire,
            "shape": list(spec.full_dims(self.max_batch_size)),
        }


def _spec(entry, optional: bool) -> TensorSpec:
    reshape = tuple(int(d) for d in entry.reshape.shape) if entry.HasField("reshape") else None
    return TensorSpec(
        name=entry.name,
        wire=config_to_wire(entry.data_type),
        dims=tuple(int(d) for d in entry.dims),
        reshape=reshape,
        optional=optional,
    )
