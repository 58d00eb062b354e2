"""What a serialized DALI pipeline (``model.dali``) declares: its external sources and outputs.

DALI's Python API does not list a deserialized pipeline's inputs (Triton's DALI backend asks the
C API, ``daliGetNumExternalInput`` / ``daliGetExternalInputName``). The file is DALI's
``PipelineDef`` protobuf (``dali/pipeline/proto/dali.proto``), so the few fields needed are read
from the wire format here, without importing DALI: ``num_threads`` (1), ``batch_size`` (2),
``op`` (5; an ``OpDef`` whose ``name`` (1) is the operator, ``output`` (3) its outputs, each an
``InputOutput`` whose ``name`` (1) is the tensor) and ``pipe_outputs`` (7). The external sources
are the outputs of ``ExternalSource`` operators, named by ``fn.external_source(name=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

_EXTERNAL_SOURCE_OPS = frozenset({"ExternalSource", "_ExternalSource"})


@dataclass(frozen=True)
class PipelineDef:
    """The parts of a serialized pipeline the dali backend checks a config against.

    Attributes:
        inputs: the external sources' names, in pipeline order.
        num_outputs: how many outputs the pipeline returns (matched to the config's by position).
        batch_size: the serialized max batch size.
        num_threads: the serialized CPU thread count.
    """

    inputs: tuple[str, ...]
    num_outputs: int
    batch_size: int
    num_threads: int


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


def read_pipeline_def(data: bytes) -> PipelineDef:
    """Read the external sources, output count and sizes of a serialized pipeline.

    Raises:
        ValueError: ``data`` is not a DALI ``PipelineDef`` (not protobuf, or no operators or
            outputs).
    """
    inputs: list[str] = []
    num_outputs = batch_size = num_threads = 0
    ops = 0
    for number, value in _fields(data):
        if number == 1 and isinstance(value, int):
            num_threads = value
        elif number == 2 and isinstance(value, int):
            batch_size = value
        elif number == 5 and isinstance(value, bytes):
            ops += 1
            op = _fields(value)
            kind = next((v for n, v in op if n == 1 and isinstance(v, bytes)), b"").decode()
            if kind in _EXTERNAL_SOURCE_OPS:
                for n, v in op:
                    if n == 3 and isinstance(v, bytes):
                        name = next((x for m, x in _fields(v) if m == 1 and isinstance(x, bytes)), b"")
                        inputs.append(name.decode())
        elif number == 7 and isinstance(value, bytes):
            num_outputs += 1
        elif number in (1, 2, 5, 7):
            raise ValueError(f"field {number} has the wrong wire type")
    if not ops or not num_outputs:
        raise ValueError("no operators or no outputs")
    return PipelineDef(tuple(inputs), num_outputs, batch_size, num_threads)


__all__ = ["PipelineDef", "read_pipeline_def"]
