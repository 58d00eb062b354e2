"""The response cache: identical requests answered without running the model.

Follows Triton's local response cache (``--cache-config local,size=N``, per model
``response_cache { enable: true }``), with a stricter key: model, the loaded
model's identity (a reload or a new version never hits old entries), every input's
name, datatype, shape and bytes (Triton hashes only names and bytes), and the
requested outputs. Entries are evicted least-recently-used to stay within the
byte budget; only successful responses are stored. An entry's size is what Triton's
local cache allocates for it (:func:`entry_size`: the serialized outputs with their
names, datatypes and shapes, not the tensor bytes alone), so a cache holds what
Triton's of that size holds; a response larger than the cache is not stored and
logged as Triton logs it ("Failed to insert key [...] into response cache: ...").
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from workbench.backends.base import BackendRequest
from workbench.common.datatypes import serialize_bytes, wire_name

log = logging.getLogger(__name__)

#: Triton core's ``CacheEntry`` layout: a uint32 output count per response; per output a
#: uint64 serialized size, uint32 lengths of its name, datatype and shape, a uint64 length of
#: its data (shape: 8 bytes per dimension)
_RESPONSE_HEADER = 4
_OUTPUT_HEADER = 8 + 4 + 4 + 4 + 8


def entry_size(outputs: Mapping[str, np.ndarray]) -> int:
    """Bytes one response takes in the cache, as Triton core serializes a response into its
    local cache (``CacheEntry::SetBufferSize``): 4 + per output (28 + name + datatype name +
    8 x dimensions + data bytes; BYTES data serialized with its 4-byte length prefixes).

    E.g. two FP32 [1,16] outputs ``OUTPUT0``/``OUTPUT1``: 4 + 2 x (28 + 7 + 4 + 16 + 64) = 242.
    """
    return _RESPONSE_HEADER + sum(
        _OUTPUT_HEADER + len(name.encode()) + len(wire_name(array)) + 8 * array.ndim + _nbytes(array)
        for name, array in outputs.items()
    )


class ResponseCache:
    """An LRU map from request keys to output tensors, bounded in bytes.

    Args:
        byte_size: capacity in bytes (each entry counted by :func:`entry_size`). A
            response larger than the capacity is not stored.
    """

    def __init__(self, byte_size: int) -> None:
        self.byte_size = byte_size
        self.used_bytes = 0
        self._entries: OrderedDict[bytes, tuple[dict[str, np.ndarray], int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(owner: int, request: BackendRequest) -> bytes:
        """Digest of the owner token (one per loaded model version) and the request."""
        digest = hashlib.blake2b(digest_size=32)
        digest.update(owner.to_bytes(8, "little"))
        for name in sorted(request.inputs):
            array = request.inputs[name]
            digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
            digest.update(serialize_bytes(array) if array.dtype == np.object_ else np.ascontiguousarray(array).data)
        digest.update("\0".join(request.requested_outputs).encode())
        return digest.digest()

    def lookup(self, key: bytes) -> dict[str, np.ndarray] | None:
        """The cached outputs for ``key`` (marked most recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def insert(self, key: bytes, owner: int, outputs: dict[str, np.ndarray]) -> None:
        """Store a successful response's outputs (read-only copies), evicting LRU entries
        (:func:`entry_size` bytes; a response larger than the whole cache is logged and not
        stored)."""
        if key in self._entries:
            return
        size = entry_size(outputs)
        if size > self.byte_size:
            log.error("Failed to insert key [%s] into response cache: Requested byte_size: %d is greater "
                      "than total cache size: %d", key.hex(), size, self.byte_size)
            return
        while self.used_bytes + size > self.byte_size and self._entries:
            _, (_, evicted, _) = self._entries.popitem(last=False)
            self.used_bytes -= evicted
        frozen = {name: _frozen(a) for name, a in outputs.items()}
        self._entries[key] = (frozen, size, owner)
        self.used_bytes += size

    def purge(self, owner: int) -> None:
        """Drop every entry of one loaded model version (on unload or reload)."""
        for key in [k for k, (_, _, o) in self._entries.items() if o == owner]:
            _, size, _ = self._entries.pop(key)
            self.used_bytes -= size


def _nbytes(array: np.ndarray) -> int:
    return len(serialize_bytes(array)) if array.dtype == np.object_ else array.nbytes


def _frozen(array: np.ndarray) -> np.ndarray:
    copy = np.array(array, copy=True)
    copy.setflags(write=False)
    return copy
