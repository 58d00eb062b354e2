"""Wire data <-> numpy tensors, shared by every frontend (no protocol knowledge here).

Raw buffers are little-endian, row-major; BYTES use Triton's 4-byte length prefix.
Decoding makes numpy *views* of the received buffer for fixed-size types (no copy).
Errors carry Triton's texts and the ``[request id: ...]`` prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from workbench.common.datatypes import WIRE_ITEMSIZE, WIRE_TO_NUMPY, deserialize_bytes, serialize_bytes
from workbench.common.errors import InvalidArgument, request_prefix
from workbench.messages.types import Tensor

#: the largest element count and byte size a tensor may have (Triton's INT64_MAX; numpy's too)
INT64_MAX = 2**63 - 1
#: dims up to this size, at most 3 of them, cannot pass INT64_MAX elements or bytes (16-byte items)
_SMALL_DIM = 2**19


def check_shape(name: str, shape: Sequence[int], model: str, request_id: str) -> tuple[int, ...]:
    """Validate a request shape: every dim given, non-negative, and the element count within
    int64 (Triton's ``GetElementCount`` rules).

    Raises:
        InvalidArgument: "All input dimensions should be specified for input ..." (Triton
            core, a negative dim); "invalid shape for input 'X': shape [..] contains one or
            more invalid dimensions" (a dim past int64) or "... causes total element count to
            exceed maximum size of 9223372036854775807" (Triton's HTTP frontend).
    """
    try:
        dims = tuple(map(int, shape))
    except (TypeError, ValueError):
        raise InvalidArgument(f"Unable to parse 'shape' for input '{name}'") from None
    if not dims:
        return dims
    low, high = min(dims), max(dims)
    if low >= 0 and high <= _SMALL_DIM and len(dims) <= 3:
        return dims  # the common case: (2**19)**3 elements of <= 16 bytes stay below 2**63
    if low < 0:
        got = "[" + ",".join(str(d) for d in dims) + "]"
        raise InvalidArgument(
            request_prefix(request_id) + f"All input dimensions should be specified for input "
            f"'{name}' for model '{model}', got {got}"
        )
    if high > INT64_MAX:
        raise InvalidArgument(
            f"invalid shape for input '{name}': shape {_shape_text(dims)} contains one or more "
            "invalid dimensions"
        )
    if 0 not in dims and math.prod(dims) > INT64_MAX:
        raise InvalidArgument(
            f"invalid shape for input '{name}': shape {_shape_text(dims)} causes total element "
            f"count to exceed maximum size of {INT64_MAX}"
        )
    return dims


def _shape_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _check_byte_span(name: str, dims: tuple[int, ...], dtype: np.dtype) -> None:
    """numpy refuses an array whose non-zero dims times the item size pass int64, even an
    empty one (``[0, 2**62]``): refuse such a shape as the client's error.

    Raises:
        InvalidArgument: Triton's "byte size overflow for input ..." text when the tensor has
            elements; for an empty one, "invalid shape for input 'X': shape [..] exceeds the
            maximum byte size of 9223372036854775807 ..." (Triton has no text for it).
    """
    span = math.prod(dims) if 0 not in dims else math.prod(d for d in dims if d)
    if span * dtype.itemsize <= INT64_MAX:
        return
    if 0 not in dims:
        raise InvalidArgument(
            f"byte size overflow for input '{name}': element count ({span}) * data type size "
            f"({dtype.itemsize}) exceeds maximum allowed size ({INT64_MAX})"
        )
    raise InvalidArgument(
        f"invalid shape for input '{name}': shape {_shape_text(dims)} exceeds the maximum byte "
        f"size of {INT64_MAX} ({span} elements of {dtype.itemsize} bytes, not counting the "
        "zero dimensions, which an array cannot hold)"
    )


def _dtype(name: str, datatype: str) -> np.dtype:
    dtype = WIRE_TO_NUMPY.get(datatype)
    if dtype is None:
        raise InvalidArgument(f"invalid datatype '{datatype}' for input '{name}'")
    return dtype


def tensor_from_buffer(
    name: str,
    datatype: str,
    shape: Sequence[int],
    buffer: bytes | bytearray | memoryview,
    *,
    model: str,
    request_id: str = "",
) -> Tensor:
    """Decode a raw (binary) tensor; fixed-size types become a zero-copy view.

    Raises:
        InvalidArgument: bad shape, byte size mismatch, or malformed/miscounted BYTES elements.
    """
    dims = check_shape(name, shape, model, request_id)
    dtype = _dtype(name, datatype)
    _check_byte_span(name, dims, dtype)
    count = math.prod(dims)
    if datatype == "BYTES":
        array = deserialize_bytes(buffer, name, model)
        if array.size < count:
            raise InvalidArgument(
                request_prefix(request_id) + f"expected {count} string elements for inference input "
                f"'{name}' for model '{model}', got {array.size}"
            )
        if array.size > count:  # Triton stops at the first element past the count
            raise InvalidArgument(
                request_prefix(request_id) + f"unexpected number of string elements {count + 1} for "
                f"inference input '{name}' for model '{model}', expecting {count}"
            )
        return Tensor(name, datatype, array.reshape(dims))
    expected = count * WIRE_ITEMSIZE[datatype]
    if len(buffer) != expected:
        raise InvalidArgument(
            request_prefix(request_id) + f"input byte size mismatch for input '{name}' for model "
            f"'{model}'. Expected {expected}, got {len(buffer)}"
        )
    array = np.frombuffer(buffer, dtype=dtype.newbyteorder("<")).reshape(dims)
    return Tensor(name, datatype, array)


def tensor_from_list(
    name: str, datatype: str, shape: Sequence[int], data: object, *, model: str, request_id: str = ""
) -> Tensor:
    """Decode a JSON ``data`` array (flat or nested, row-major; BYTES as strings).

    Raises:
        InvalidArgument: bad shape, FP16 over JSON (Triton refuses it), or an element count
            that does not match the shape (Triton core's texts: "input byte size mismatch ...",
            for BYTES "expected N string elements ..." / "unexpected number of string elements
            ..."; the HTTP codec checks the count first with its own texts).
    """
    dims = check_shape(name, shape, model, request_id)
    dtype = _dtype(name, datatype)
    _check_byte_span(name, dims, dtype)
    if datatype in ("FP16", "BF16"):
        raise InvalidArgument(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data "
            f"format for input '{name}'"
        )
    try:
        if datatype == "BYTES":
            flat = np.asarray(data, dtype=object).ravel()
            array = np.empty(flat.size, dtype=object)
            array[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat]
        else:
            array = np.asarray(data, dtype=dtype).ravel()
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"Unable to parse 'data' of input '{name}': {exc}") from None
    count = math.prod(dims)
    if array.size != count:  # Triton core's texts (the byte size, or the string count)
        if datatype != "BYTES":
            itemsize = WIRE_ITEMSIZE[datatype]
            raise InvalidArgument(
                request_prefix(request_id) + f"input byte size mismatch for input '{name}' for model "
                f"'{model}'. Expected {count * itemsize}, got {array.size * itemsize}"
            )
        if array.size < count:
            raise InvalidArgument(
                request_prefix(request_id) + f"expected {count} string elements for inference input "
                f"'{name}' for model '{model}', got {array.size}"
            )
        raise InvalidArgument(
            request_prefix(request_id) + f"unexpected number of string elements {count + 1} for "
            f"inference input '{name}' for model '{model}', expecting {count}"
        )
    return Tensor(name, datatype, array.reshape(dims))


def tensor_from_shared_memory(
    name: str, datatype: str, shape: Sequence[int], parameters: dict, *, model: str, request_id: str = ""
) -> Tensor:
    """An input tensor whose data is in a shared-memory region named by ``parameters``
    (``shared_memory_region``, ``shared_memory_offset``, ``shared_memory_byte_size``).

    Its ``data`` is a placeholder of the right dtype and shape (one element, zero strides);
    :meth:`workbench.Server.infer` replaces it with a view over the region.

    Raises:
        InvalidArgument: bad shape or datatype.
    """
    dims = check_shape(name, shape, model, request_id)
    dtype = _dtype(name, datatype)
    _check_byte_span(name, dims, dtype)
    placeholder = np.broadcast_to(np.zeros((), dtype=dtype), dims)
    return Tensor(name, datatype, placeholder, parameters)


def tensor_to_buffer(tensor: Tensor) -> bytes | memoryview:
    """Raw little-endian bytes of a tensor (BYTES length-prefixed); a view when possible."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    array = tensor.data
    if array.size == 0:
        return b""
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    # bytes through a uint8 view: the buffer protocol has no format for every dtype (BF16)
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def tensor_to_list(tensor: Tensor) -> list:
    """Flat JSON-ready list (BYTES decoded as UTF-8).

    Raises:
        UnicodeDecodeError: a BYTES element is not valid UTF-8 (JSON cannot carry it; it is
            never replaced with U+FFFD, which would hand the client other data).
    """
    flat = tensor.data.ravel()
    if tensor.datatype == "BYTES":
        return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in flat]
    return flat.tolist()
