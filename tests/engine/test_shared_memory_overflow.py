"""Shared-memory use whose ``offset + byte_size`` overflows 64 bits gets Triton's own text
(``shared_memory_manager.cc`` GetMemoryInfo: "Integer overflow detected: ..."), checked
after the offset and before the bounds, over HTTP where JSON carries any integer."""

from __future__ import annotations

import pytest

from workbench import InvalidArgument
from workbench.engine.shm.shared_memory import SharedMemoryRegistry

SIZE_MAX = 2**64 - 1


def test_offset_plus_byte_size_past_size_max(shm_segments) -> None:
    key, _ = shm_segments(64)
    registry = SharedMemoryRegistry(allow_client_shm=True)
    registry.register_system("out", key, 0, 64)
    try:
        with pytest.raises(InvalidArgument) as info:
            registry.acquire("out", 32, 2**64 - 32)
        assert info.value.message == (
            f"Integer overflow detected: byte_size ({2**64 - 32}) + offset (32) exceeds maximum "
            f"value ({SIZE_MAX}) for region 'out'")
        with pytest.raises(InvalidArgument, match=r"^Invalid offset \+ byte size"):
            registry.acquire("out", 32, SIZE_MAX - 32)  # sums to SIZE_MAX: no overflow, too big
        with pytest.raises(InvalidArgument, match=r"^Invalid offset for"):
            registry.acquire("out", 64, 2**64)  # the offset is checked first, as Triton
    finally:
        registry.unregister("system")
