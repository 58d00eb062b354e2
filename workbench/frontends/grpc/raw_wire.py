"""Large tensors on the unary ``ModelInfer`` path without protobuf copies of their bytes.

protobuf (upb) copies every ``bytes`` field twice on the way in (into its arena when parsing,
into a Python ``bytes`` when the field is read) and twice on the way out (into the message
when it is built, into the serialized string), and ``bytes(memoryview)`` of a numpy output
costs a third: for a 64 MiB tensor that is most of the server's time (bench/RESULTS.md,
"Issue 20: large tensors"). ``raw_input_contents`` (``ModelInferRequest`` field 7) and
``raw_output_contents`` (``ModelInferResponse`` field 6) are the highest-numbered fields of
their messages and carry the tensor data, so:

* :func:`parse_infer_request` walks the request's top-level wire fields, keeps each field-7
  payload as a ``memoryview`` of the received bytes (no copy), and lets protobuf parse the
  rest (a few hundred bytes). Anything it does not recognise (a malformed tag or length, a
  group, field 7 with another wire type) goes to protobuf whole, which parses or refuses it
  exactly as before.
* :class:`RawInferResponse` is a response without ``raw_output_contents`` plus the output
  buffers; :func:`serialize_infer_response` writes protobuf's own bytes for the message and
  appends each buffer as a field-6 record, one copy in all. protobuf serializes known fields
  in field-number order, so the result is byte-identical to serializing the full message
  (tests/frontends/grpc/test_grpc_raw_wire.py compares them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import service_pb2 as pb

#: ``ModelInferRequest.raw_input_contents`` / ``ModelInferResponse.raw_output_contents``
RAW_INPUT_FIELD, RAW_OUTPUT_FIELD = 7, 6
_LENGTH_DELIMITED = 2
_RAW_OUTPUT_TAG = bytes([RAW_OUTPUT_FIELD << 3 | _LENGTH_DELIMITED])
#: below this many bytes a request is parsed by protobuf alone (the walk costs more than it saves)
MIN_WALK_BYTES = 64 * 1024


class RawInferRequest:
    """A ``ModelInferRequest`` whose ``raw_input_contents`` are views of the received bytes.

    Every other attribute is the parsed message's (``model_name``, ``inputs``, ...).

    Attributes:
        message: the request without its ``raw_input_contents``.
        raw_input_contents: one read-only ``memoryview`` per raw input, in wire order.
    """

    __slots__ = ("message", "raw_input_contents")

    def __init__(self, message: pb.ModelInferRequest, raw: list[memoryview]) -> None:
        self.message = message
        self.raw_input_contents = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it; IndexError / ValueError when malformed."""
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("varint too long")


def _split_raw_inputs(data: bytes) -> tuple[bytes, list[memoryview]] | None:
    """``(the other fields' bytes, field-7 views)``, or None where protobuf must decide."""
    view = memoryview(data)
    kept: list[memoryview] = []
    raw: list[memoryview] = []
    pos, end = 0, len(data)
    try:
        while pos < end:
            start = pos
            tag, pos = _varint(data, pos)
            wire = tag & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == _LENGTH_DELIMITED:
                length, pos = _varint(data, pos)
                if tag >> 3 == RAW_INPUT_FIELD:
                    if pos + length > end:
                        return None
                    raw.append(view[pos : pos + length])
                    pos += length
                    continue
                pos += length
            else:  # groups, or no wire type at all: protobuf's call
                return None
            if pos > end or (tag >> 3 == RAW_INPUT_FIELD):  # field 7 that is no bytes field
                return None
            kept.append(view[start:pos])
    except (IndexError, ValueError):
        return None
    return b"".join(kept), raw


def parse_infer_request(data: bytes) -> pb.ModelInferRequest | RawInferRequest:
    """Parse a serialized ``ModelInferRequest`` (the ``ModelInfer`` request deserializer).

    Returns:
        A :class:`RawInferRequest` when the message has raw input contents and is at least
        :data:`MIN_WALK_BYTES` long, else the protobuf message.

    Raises:
        google.protobuf.message.DecodeError: bytes protobuf refuses (as ``FromString``).
    """
    if len(data) >= MIN_WALK_BYTES:
        split = _split_raw_inputs(data)
        if split is not None and split[1]:
            return RawInferRequest(pb.ModelInferRequest.FromString(split[0]), split[1])
    return pb.ModelInferRequest.FromString(data)


class RawInferResponse:
    """A ``ModelInferResponse`` to be serialized with :func:`serialize_infer_response`.

    Args:
        message: the response without ``raw_output_contents``.
        raw: one buffer per output (``b""`` for an output in shared memory), in output order.
    """

    __slots__ = ("message", "raw")

    def __init__(self, message: pb.ModelInferResponse, raw: Sequence[bytes | memoryview]) -> None:
        self.message = message
        self.raw = raw

    def full_message(self) -> pb.ModelInferResponse:
        """The complete protobuf message (copies the buffers: tests and non-unary callers)."""
        message = pb.ModelInferResponse()
        message.CopyFrom(self.message)
        message.raw_output_contents.extend(bytes(buffer) for buffer in self.raw)
        return message


def varint_bytes(value: int) -> bytes:
    """Protobuf's base-128 varint of ``value`` (>= 0)."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def serialize_infer_response(response: pb.ModelInferResponse | RawInferResponse) -> bytes:
    """The ``ModelInfer`` response serializer: protobuf's bytes for a message; for a
    :class:`RawInferResponse`, the message's bytes followed by one field-6 record per buffer
    (the bytes protobuf would write for the full message, with one copy of the data)."""
    if not isinstance(response, RawInferResponse):
        return response.SerializeToString()
    parts: list[bytes | memoryview] = [response.message.SerializeToString()]
    for buffer in response.raw:
        parts += (_RAW_OUTPUT_TAG, varint_bytes(len(buffer)), buffer)
    return b"".join(parts)


__all__ = ["MIN_WALK_BYTES", "RawInferRequest", "RawInferResponse", "parse_infer_request",
           "serialize_infer_response", "varint_bytes"]
