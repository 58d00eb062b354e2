"""What a model config says about ragged batching: ragged inputs, batch inputs, batch outputs.

Triton's ragged batching (``docs/user_guide/ragged_batching.md``): an input with
``allow_ragged_batch: true`` may differ in shape between the requests of one batch; the
backend hands it to the model flat (all requests' elements concatenated, shape
``[total elements]``), and ``batch_input`` entries give the model extra inputs that describe
the batch (element counts, offsets, item shapes). A ``batch_output`` of kind
``BATCH_SCATTER_WITH_INPUT_SHAPE`` is split back per request by the shape of its source input.
This module only reads the config (the backend side, ``BatchInput`` / ``BatchOutput`` of
Triton's backend library); the arrays are computed in :mod:`workbench.backends.ragged`.
The config's own checks (kinds, source inputs, targets) are Triton's ``ValidateBatchIO`` in
:mod:`workbench.config.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

#: the batch input kinds Triton defines (``model_config.proto`` ``BatchInput.Kind``)
BATCH_INPUT_KINDS = (
    "BATCH_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
    "BATCH_ITEM_SHAPE",
    "BATCH_ITEM_SHAPE_FLATTEN",
)


@dataclass(frozen=True, slots=True)
class BatchInputSpec:
    """One ``batch_input`` entry.

    Attributes:
        kind: one of :data:`BATCH_INPUT_KINDS`.
        targets: the model input names that receive the computed tensor (each the same one).
        data_type: ``"TYPE_INT32"`` or ``"TYPE_FP32"`` (the validated choices).
        source: the request input it is computed from.
    """

    kind: str
    targets: tuple[str, ...]
    data_type: str
    source: str


@dataclass(frozen=True, slots=True)
class BatchOutputSpec:
    """One target of a ``BATCH_SCATTER_WITH_INPUT_SHAPE`` ``batch_output``.

    Attributes:
        target: the model output that is scattered.
        source: the request input whose shape each request's part takes.
        dims: the output's shape per request as configured, the batch dim (-1) first when the
            model batches (``reshape`` when given, else ``dims``); each -1 becomes the source
            input's dim at the same index.
    """

    target: str
    source: str
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BatchLayout:
    """A model's ragged inputs, batch inputs and scatter outputs (empty for most models).

    Attributes:
        ragged: names of the inputs with ``allow_ragged_batch: true``.
        inputs: the ``batch_input`` entries, in config order.
        outputs: scatter output target name -> its :class:`BatchOutputSpec`.
    """

    ragged: frozenset[str] = frozenset()
    inputs: tuple[BatchInputSpec, ...] = ()
    outputs: dict[str, BatchOutputSpec] = field(default_factory=dict)

    @property
    def targets(self) -> tuple[str, ...]:
        """Every model input that a batch input fills, in config order."""
        return tuple(t for spec in self.inputs for t in spec.targets)


def batch_layout(config: mc.ModelConfig) -> BatchLayout:
    """The :class:`BatchLayout` of a (validated) model config."""
    ragged = frozenset(io.name for io in config.input if io.allow_ragged_batch)
    inputs = tuple(
        BatchInputSpec(
            kind=mc.BatchInput.Kind.Name(entry.kind),
            targets=tuple(entry.target_name),
            data_type=mc.DataType.Name(entry.data_type),
            source=entry.source_input[0],
        )
        for entry in config.batch_input
    )
    shapes = {
        io.name: tuple(io.reshape.shape if io.HasField("reshape") else io.dims)
        for io in config.output
    }
    lead = (-1,) if config.max_batch_size > 0 else ()
    outputs = {
        target: BatchOutputSpec(target, entry.source_input[0], lead + tuple(int(d) for d in shapes[target]))
        for entry in config.batch_output
        for target in entry.target_name
        if target in shapes
    }
    return BatchLayout(ragged, inputs, outputs)


__all__ = ["BATCH_INPUT_KINDS", "BatchInputSpec", "BatchLayout", "BatchOutputSpec", "batch_layout"]
