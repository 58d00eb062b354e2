"""What a serialized DALI pipeline (``model.dali``) declares: its external sources and outputs.

DALI's Python API does not list a deserialized pipeline's inputs (Triton's DALI backend asks the
C API, ``daliGetNumExternalInput`` / ``daliGetExternalInputName``). The file is DALI's
``PipelineDef`` protobuf (``dali/pipeline/proto/dali.proto``), so the few fields needed are read
from the wire format here, without importing DALI:

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


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos
        if shift > 70:
            raise ValueError("varint too long")


def _signed(value: int) -> int:
    """A varint read as protobuf's int64 (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message (varints as int, the rest bytes).

    Raises:
        ValueError: the bytes are not a protobuf message.
    """
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field")
            value, pos = buf[pos : pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = buf[pos : pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire}")
        out.append((number, value))
    return out


def _string(fields: list[tuple[int, int | bytes]], number: int) -> str:
    value = next((v for n, v in fields if n == number and isinstance(v, bytes)), b"")
    return value.decode(errors="replace")


def _int(fields: list[tuple[int, int | bytes]], number: int) -> int | None:
    value = next((v for n, v in fields if n == number and isinstance(v, int)), None)
    return None if value is None else _signed(value)


def _declared(dtype: int | None, ndim: int | None) -> tuple[int | None, int | None]:
    """DALI's declared dtype / ndim as (config DataType or None, ndim or None); -1 = none."""
    data_type = None if dtype is None or dtype < 0 else DALI_TO_CONFIG_DTYPE.get(dtype)
    return data_type, None if ndim is None or ndim < 0 else ndim


def _external_sources(op: list[tuple[int, int | bytes]]) -> list[PipelineIO]:
    args = {}
    for number, value in op:
        if number == 4 and isinstance(value, bytes):
            arg = _fields(value)
            args[_string(arg, 1)] = _int(arg, 4)
    data_type, ndim = _declared(args.get("dtype"), args.get("ndim"))
    return [PipelineIO(_string(_fields(v), 1), data_type, ndim)
            for n, v in op if n == 3 and isinstance(v, bytes)]


def read_pipeline_def(data: bytes) -> PipelineDef:
    """Read the external sources, outputs and sizes of a serialized pipeline.

    Raises:
        ValueError: ``data`` is not a DALI ``PipelineDef`` (not protobuf, or no operators or
            outputs).
    """
    inputs: list[PipelineIO] = []
    outputs: list[PipelineIO] = []
    batch_size = num_threads = ops = 0
    for number, value in _fields(data):
        if number == 1 and isinstance(value, int):
            num_threads = _signed(value)
        elif number == 2 and isinstance(value, int):
            batch_size = _signed(value)
        elif number == 5 and isinstance(value, bytes):
            ops += 1
            op = _fields(value)
            if _string(op, 1) in _EXTERNAL_SOURCE_OPS:
                inputs.extend(_external_sources(op))
        elif number == 7 and isinstance(value, bytes):
            out = _fields(value)
            outputs.append(PipelineIO(_string(out, 1), *_declared(_int(out, 5), _int(out, 6))))
        elif number in (1, 2, 5, 7):
            raise ValueError(f"field {number} has the wrong wire type")
    if not ops or not outputs:
        raise ValueError("no operators or no outputs")
    return PipelineDef(tuple(inputs), tuple(outputs), batch_size, num_threads)


__all__ = ["DALI_TO_CONFIG_DTYPE", "PipelineDef", "PipelineIO", "read_pipeline_def"]
