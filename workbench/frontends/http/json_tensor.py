"""Strict reading of an infer request's JSON ``shape`` and ``data``, as Triton's HTTP frontend.

Triton reads these with TritonJson's typed accessors (``http_server.cc``: ``IndexAsUInt`` for
shape elements, ``AsBool`` / ``AsInt`` / ``AsUInt`` / ``AsDouble`` / ``AsString`` per datatype
for data elements, nesting at most ``HTTP_MAX_JSON_NESTING_DEPTH`` = 100), so ``"1"``,
``1.5`` or ``true`` as a dimension, ``null`` or ``true`` as an FP32 value, or a number as a
BYTES element are refused with its texts instead of being coerced by numpy.
"""

from __future__ import annotations

from typing import Any

from workbench import InvalidArgument

#: Triton's HTTP_MAX_JSON_NESTING_DEPTH (``src/common.h``): how deep ``data`` may nest
MAX_NESTING_DEPTH = 100
UINT64_MAX = 2**64 - 1

#: TritonJson's texts for a value of another JSON type
NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_NUMBER = "attempt to access JSON non-number as double"
NOT_BOOL = "attempt to access JSON non-boolean as boolean"
NOT_STRING = "attempt to access JSON non-string as string"
_NOT_ARRAY = "attempt to access JSON non-array as array"

#: wire datatype -> (the Python types JSON gives its elements, TritonJson's text otherwise)
_ELEMENTS: dict[str, tuple[frozenset[type], str]] = {
    "BOOL": (frozenset({bool}), NOT_BOOL),
    **{t: (frozenset({int}), _NOT_INT) for t in ("INT8", "INT16", "INT32", "INT64")},
    **{t: (frozenset({int}), NOT_UINT) for t in ("UINT8", "UINT16", "UINT32", "UINT64")},
    "FP32": (frozenset({int, float}), _NOT_NUMBER),
    "FP64": (frozenset({int, float}), _NOT_NUMBER),
    "BYTES": (frozenset({str}), NOT_STRING),
}


def json_shape(item: dict[str, Any]) -> list[int]:
    """The ``shape`` of a JSON input: a list of unsigned integers (JSON numbers without a
    fraction; ``true``, ``1.0`` and ``"1"`` are not).

    Raises:
        InvalidArgument: "Unable to parse 'shape': attempt to access ..." (Triton's texts) for
            a missing or non-array shape, or an element that is not an unsigned integer.
    """
    if "shape" not in item:
        raise InvalidArgument(
            "Unable to parse 'shape': attempt to access non-existing object member 'shape'"
        )
    shape = item["shape"]
    if not isinstance(shape, list):
        raise InvalidArgument(f"Unable to parse 'shape': {_NOT_ARRAY}")
    for dim in shape:
        if type(dim) is not int or not 0 <= dim <= UINT64_MAX:
            raise InvalidArgument(f"Unable to parse 'shape': {NOT_UINT}")
    return shape


def json_data(datatype: str, data: object) -> list:
    """The flat, row-major elements of a JSON ``data`` array, each of the JSON type the
    datatype needs (BOOL: boolean; INT*: integer; UINT*: non-negative integer; FP32/FP64:
    any number; BYTES: string). Nested arrays may be ragged: only the count matters, as in
    Triton. Datatypes outside that table (FP16, unknown) are returned flattened, unchecked,
    for :func:`workbench.tensor_from_list` to refuse.

    Raises:
        InvalidArgument: "Unable to parse 'data': attempt to access JSON non-... as ..."
            ("Unable to parse JSON bytes array: ..." for BYTES), "Unable to parse 'data':
            JSON nesting depth exceeds maximum allowed limit (100)" (Triton's texts).
    """
    if not isinstance(data, list):
        raise InvalidArgument(f"Unable to parse 'data': {_NOT_ARRAY}")
    flat: list = []
    types: set[type] = set()
    _flatten(data, 0, flat, types)
    allowed, text = _ELEMENTS.get(datatype, (None, ""))
    if allowed is None:
        return flat
    prefix = "Unable to parse JSON bytes array" if datatype == "BYTES" else "Unable to parse 'data'"
    if not types <= allowed:
        raise InvalidArgument(f"{prefix}: {text}")
    if flat and text is NOT_UINT and min(flat) < 0:
        raise InvalidArgument(f"{prefix}: {text}")
    return flat


def _flatten(array: list, depth: int, out: list, types: set[type]) -> None:
    """Append the scalars of ``array`` (at nesting ``depth``, the top array being 0) to
    ``out`` and their types to ``types``; Triton refuses any value at depth >= 100."""
    if depth >= MAX_NESTING_DEPTH:
        raise _too_deep()
    kinds = set(map(type, array))
    if list not in kinds:
        if array and depth + 1 >= MAX_NESTING_DEPTH:  # the scalars are one level deeper
            raise _too_deep()
        out.extend(array)
        types.update(kinds)
        return
    for value in array:
        if type(value) is list:
            _flatten(value, depth + 1, out, types)
        else:  # a scalar beside arrays: a one-element array at this depth
            _flatten([value], depth, out, types)


def _too_deep() -> InvalidArgument:
    return InvalidArgument(
        "Unable to parse 'data': JSON nesting depth exceeds maximum allowed limit "
        f"({MAX_NESTING_DEPTH})"
    )
