"""Helpers the browser tests share (imported as a sibling module, as tests/gpu does)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

#: seconds any awaited condition may take on a loaded machine (a deadline, not a measurement)
PATIENCE_S = 90.0


def eventually(check: Callable[[], object], what: str) -> object:
    """``check()`` once it is truthy; fails with ``what`` past :data:`PATIENCE_S`."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what} (last: {value!r})")
        time.sleep(0.25)
