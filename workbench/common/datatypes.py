"""Triton datatypes: wire names, model-config enum values and numpy dtypes.

Wire names are the KServe v2 / Triton protocol strings (``"FP32"``, ``"BYTES"``);
model-config names are the ``inference.DataType`` enum (``TYPE_FP32``,
``TYPE_STRING``). BYTES tensors are numpy ``object`` arrays of ``bytes``; on the
wire each element is a 4-byte little-endian length followed by the raw bytes
(Triton's binary tensor encoding).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import serialize_byte_tensor

from workbench.common.bytes_codec import IncompleteBytes, decode_bytes
from workbench.common.errors import InvalidArgument

#: numpy's bfloat16 (ml_dtypes, which tritonclient uses for BF16 too): BF16 tensors are
#: numpy arrays of it (2 bytes an element; ``astype(np.float32)`` reads the values)
BF16 = np.dtype(ml_dtypes.bfloat16)

#: wire name -> numpy dtype (BYTES -> object, BF16 -> :data:`BF16`).
WIRE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": BF16,
    "BYTES": np.dtype(np.object_),
}

#: numpy dtype -> wire name (str_/bytes_ arrays count as BYTES).
NUMPY_TO_WIRE: dict[np.dtype, str] = {v: k for k, v in WIRE_TO_NUMPY.items()}

#: element size in bytes of fixed-size wire types (BYTES is variable).
WIRE_ITEMSIZE: dict[str, int] = {
    k: v.itemsize for k, v in WIRE_TO_NUMPY.items() if k != "BYTES"
}


def config_to_wire(data_type: int) -> str:
    """``inference.DataType`` enum value -> wire name (``TYPE_STRING`` -> ``"BYTES"``).

    Raises:
        InvalidArgument: for ``TYPE_INVALID`` or an unknown value.
    """
    if data_type == mc.TYPE_STRING:
        return "BYTES"
    if data_type == mc.TYPE_INVALID:
        raise InvalidArgument("data type TYPE_INVALID is not a valid tensor data type")
    try:
        return mc.DataType.Name(data_type).removeprefix("TYPE_")
    except ValueError:
        raise InvalidArgument(f"unknown data type value {data_type}") from None


def wire_to_config(wire: str) -> int:
    """Wire name -> ``inference.DataType`` enum value (``"BYTES"`` -> ``TYPE_STRING``).

    Raises:
        InvalidArgument: for an unknown wire name.
    """
    if wire == "BYTES":
        return mc.TYPE_STRING
    try:
        return mc.DataType.Value("TYPE_" + wire)
    except ValueError:
        raise InvalidArgument(f"invalid datatype '{wire}'") from None


def numpy_dtype(wire: str) -> np.dtype:
    """Wire name -> numpy dtype.

    Raises:
        InvalidArgument: for an unknown name.
    """
    try:
        return WIRE_TO_NUMPY[wire]
    except KeyError:
        raise InvalidArgument(f"datatype '{wire}' is not supported") from None


def wire_name(array: np.ndarray) -> str:
    """Numpy array -> wire name; ``object``, ``bytes_`` and ``str_`` arrays are BYTES.

    Raises:
        InvalidArgument: for a dtype with no Triton equivalent (complex, datetime...).
    """
    kind = array.dtype.kind
    if kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return NUMPY_TO_WIRE[array.dtype.newbyteorder("=")]
    except KeyError:
        raise InvalidArgument(f"numpy dtype {array.dtype} has no Triton datatype") from None


def serialize_bytes(array: np.ndarray) -> bytes:
    """BYTES tensor -> Triton's length-prefixed encoding (4-byte LE length + bytes per element)."""
    if array.size == 0:
        return b""
    out = serialize_byte_tensor(array)  # a 0-d object array holding the encoded bytes
    return bytes(out.item())


def deserialize_bytes(buffer: bytes | bytearray | memoryview, name: str, model: str) -> np.ndarray:
    """Triton's length-prefixed encoding -> 1-D numpy object array of ``bytes``.

    Raises:
        InvalidArgument: when a length indicator is incomplete or points past the end
            (Triton's texts, naming the input and the model).
    """
    try:
        return decode_bytes(buffer)
    except IncompleteBytes as exc:
        if exc.in_prefix:
            raise InvalidArgument(
                f"incomplete string length indicator for inference input '{name}' "
                f"for model '{model}', expecting 4 bytes but only {exc.available} bytes available. "
                "Please make sure the string length indicator is in one piece."
            ) from None
        raise InvalidArgument(
            f"incomplete string data for inference input '{name}' for model '{model}', "
            f"expecting string of length {exc.length} but only {exc.available} bytes available"
        ) from None


__all__ = [
    "NUMPY_TO_WIRE",
    "WIRE_ITEMSIZE",
    "WIRE_TO_NUMPY",
    "config_to_wire",
    "deserialize_bytes",
    "numpy_dtype",
    "serialize_bytes",
    "wire_name",
    "wire_to_config",
]
