"""Triton's BYTES tensor encoding (each element: 4-byte little-endian length, then its bytes).

Needs numpy only, so the Python backend's stub process uses it without importing the engine;
``workbench.common.datatypes`` words its errors as Triton does for request inputs.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

_LENGTH = struct.Struct("<I")


class IncompleteBytes(ValueError):
    """A BYTES buffer ends inside a length prefix (``in_prefix``) or inside an element.

    Attributes:
        in_prefix: True when fewer than 4 bytes were left for a length prefix.
        length: the element length the prefix announced (0 when ``in_prefix``).
        available: how many bytes were left.
    """

    def __init__(self, in_prefix: bool, length: int, available: int) -> None:
        what = "string length indicator" if in_prefix else "string data"
        super().__init__(f"incomplete {what} in BYTES tensor: {available} bytes available")
        self.in_prefix, self.length, self.available = in_prefix, length, available


def encode_bytes(array: np.ndarray) -> bytes:
    """``array`` (any shape, C order; ``bytes`` elements kept, others ``str()`` + UTF-8) ->
    the BYTES encoding."""
    parts = []
    for item in array.reshape(-1):
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_bytes(buffer: Any) -> np.ndarray:
    """The BYTES encoding -> 1-D numpy object array of ``bytes``.

    Raises:
        IncompleteBytes: a length prefix is cut short or points past the end of ``buffer``.
    """
    view = memoryview(buffer)
    items, pos, end = [], 0, len(view)
    while pos < end:
        if end - pos < 4:
            raise IncompleteBytes(True, 0, end - pos)
        (length,) = _LENGTH.unpack_from(view, pos)
        pos += 4
        if pos + length > end:
            raise IncompleteBytes(False, length, end - pos)
        items.append(bytes(view[pos : pos + length]))
        pos += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out
