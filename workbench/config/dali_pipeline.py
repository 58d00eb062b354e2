"""What a serialized DALI pipeline (``model.dali``) declares: its external sources and outputs.

DALI's Python API does not list a deserialized pipeline's inputs (Triton's DALI backend asks the
C API, ``daliGetNumExternalInput`` / ``daliGetExternalInputName``). The file is DALI's
``PipelineDef`` protobuf (``dali/pipeline/proto/dali.proto``), so the few fields needed are
parsed by protobuf with a schema of just those fields (built here), without importing DALI:

- ``num_threads`` (1), ``batch_size`` (2);
- ``op`` (5): an ``OpDef`` whose ``name`` (1) is the operator, ``output`` (3) its outputs (each an
  ``InputOutput`` whose ``name`` (1) is the tensor) and ``args`` (4: ``Argument`` with ``name``
  (1) and an int value ``i`` (4)). The external sources are the outputs of ``ExternalSource``
  operators, named by ``fn.external_source(name=...)``; their ``dtype`` / ``ndim`` arguments,
  when given, are what Triton's DALI backend auto-completes the inputs from;
- ``pipe_outputs`` (7): ``InputOutput`` with the declared ``dtype`` (5) and ``ndim`` (6) of each
  output (-1 when the pipeline does not declare them: ``pipeline_def(output_dtype=...,
  output_ndim=...)``).

Used by the dali backend (workbench/backends/dali.py: load checks) and by its auto-complete
(:mod:`.dali_autocomplete`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import message as protobuf_message
from tritonclient.grpc import model_config_pb2 as mc

_EXTERNAL_SOURCE_OPS = frozenset({"ExternalSource", "_ExternalSource"})

#: DALI's ``DALIDataType`` values -> model-config data types.
DALI_TO_CONFIG_DTYPE: dict[int, int] = {
    0: mc.TYPE_UINT8,
    1: mc.TYPE_UINT16,
    2: mc.TYPE_UINT32,
    3: mc.TYPE_UINT64,
    4: mc.TYPE_INT8,
    5: mc.TYPE_INT16,
    6: mc.TYPE_INT32,
    7: mc.TYPE_INT64,
    8: mc.TYPE_FP16,
    9: mc.TYPE_FP32,
    10: mc.TYPE_FP64,
    11: mc.TYPE_BOOL,
}


@dataclass(frozen=True)
class PipelineIO:
    """One external source or output of a pipeline.

    Attributes:
        name: the tensor's name (an external source's ``name``; DALI's own name for an output).
        data_type: the declared type as a model-config ``DataType`` value, or None when the
            pipeline does not declare it (or declares a type the model config cannot hold).
        ndim: the declared number of dimensions of a sample, or None when not declared.
    """

    name: str
    data_type: int | None = None
    ndim: int | None = None

    @property
    def dims(self) -> list[int] | None:
        """The per-sample shape the declaration allows (``[-1] * ndim``), or None."""
        return None if self.ndim is None else [-1] * self.ndim


@dataclass(frozen=True)
class PipelineDef:
    """The parts of a serialized pipeline the dali backend checks a config against.

    Attributes:
        inputs: the external sources, in pipeline order.
        outputs: the outputs, in order (matched to the config's by position).
        batch_size: the serialized max batch size.
        num_threads: the serialized CPU thread count.
    """

    inputs: tuple[PipelineIO, ...]
    outputs: tuple[PipelineIO, ...]
    batch_size: int
    num_threads: int

    @property
    def input_names(self) -> list[str]:
        """The external sources' names, in pipeline order."""
        return [source.name for source in self.inputs]


def _message_classes() -> dict[str, Any]:
    """Message classes for the subset of DALI's ``dali_proto`` schema read here (field numbers
    and types as ``dali.proto`` declares them; the fields not listed are kept as unknown ones)."""
    F = descriptor_pb2.FieldDescriptorProto
    schema = {
        "Argument": [("name", 1, F.TYPE_STRING, ""), ("ints", 4, F.TYPE_INT64, "")],
        "InputOutput": [("name", 1, F.TYPE_STRING, ""), ("dtype", 5, F.TYPE_INT32, ""),
                        ("ndim", 6, F.TYPE_INT32, "")],
        "OpDef": [("name", 1, F.TYPE_STRING, ""), ("output", 3, F.TYPE_MESSAGE, "InputOutput"),
                  ("args", 4, F.TYPE_MESSAGE, "Argument")],
        "PipelineDef": [("num_threads", 1, F.TYPE_INT64, ""), ("batch_size", 2, F.TYPE_INT32, ""),
                        ("op", 5, F.TYPE_MESSAGE, "OpDef"),
                        ("pipe_outputs", 7, F.TYPE_MESSAGE, "InputOutput")],
    }
    repeated = {"ints", "output", "args", "op", "pipe_outputs"}
    file = descriptor_pb2.FileDescriptorProto(name="workbench_dali_subset.proto",
                                              package="dali_proto", syntax="proto2")
    for message, fields in schema.items():
        proto = file.message_type.add(name=message)
        for field, number, kind, type_name in fields:
            proto.field.add(name=field, number=number, type=kind,
                            type_name=f".dali_proto.{type_name}" if type_name else None,
                            label=F.LABEL_REPEATED if field in repeated else F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"dali_proto.{name}"))
            for name in schema}


_CLASSES = _message_classes()


def _declared(io: Any) -> tuple[int | None, int | None]:
    """An ``InputOutput``'s declared dtype / ndim as (config DataType or None, ndim or None);
    unset or -1 = not declared."""
    dtype = io.dtype if io.HasField("dtype") and io.dtype >= 0 else None
    ndim = io.ndim if io.HasField("ndim") and io.ndim >= 0 else None
    return None if dtype is None else DALI_TO_CONFIG_DTYPE.get(dtype), ndim


def _external_sources(op: Any) -> list[PipelineIO]:
    args = {arg.name: arg.ints[0] for arg in op.args if arg.ints}
    dtype, ndim = args.get("dtype", -1), args.get("ndim", -1)
    data_type = DALI_TO_CONFIG_DTYPE.get(dtype) if dtype >= 0 else None
    return [PipelineIO(out.name, data_type, ndim if ndim >= 0 else None) for out in op.output]


def read_pipeline_def(data: bytes) -> PipelineDef:
    """Read the external sources, outputs and sizes of a serialized pipeline.

    Raises:
        ValueError: ``data`` is not a DALI ``PipelineDef`` (not protobuf, or no operators or
            outputs).
    """
    pipeline = _CLASSES["PipelineDef"]()
    try:
        pipeline.ParseFromString(data)
    except protobuf_message.DecodeError as exc:
        raise ValueError(f"not a protobuf message: {exc}") from None
    if not pipeline.op or not pipeline.pipe_outputs:
        raise ValueError("no operators or no outputs")
    inputs = [source for op in pipeline.op if op.name in _EXTERNAL_SOURCE_OPS
              for source in _external_sources(op)]
    outputs = [PipelineIO(out.name, *_declared(out)) for out in pipeline.pipe_outputs]
    return PipelineDef(tuple(inputs), tuple(outputs), pipeline.batch_size, pipeline.num_threads)


__all__ = ["DALI_TO_CONFIG_DTYPE", "PipelineDef", "PipelineIO", "read_pipeline_def"]
