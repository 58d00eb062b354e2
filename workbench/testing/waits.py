"""Waits for tests that order events on what the engine shows, not on sleeps.

A scheduling test often needs "request N is queued" before it opens a gate; the engine
shows that in each model version's ``pending`` count (Triton's
``nv_inference_pending_request_count``: queued, not executing), read here through the public
:meth:`~workbench.Server.model_statistics`. Waiting for an execution to start is the fakes'
job (``BEHAVIOUR.executing``, ``PROBE.executing``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Return once ``condition()`` is true, checking it each time the event loop comes round
    (other tasks and the engine's callbacks run in between).

    Raises:
        TimeoutError: still false after ``timeout_s`` seconds (the message names ``what``).
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.001)


def pending(server: Any, model: str) -> int:
    """Requests of ``model`` (all READY versions) queued and not yet executing."""
    return sum(s.pending for s in server.model_statistics() if s.name == model)


async def queued(server: Any, model: str, count: int, timeout_s: float = 10.0) -> None:
    """Return once exactly ``count`` requests of ``model`` are queued (``pending``).

    Raises:
        TimeoutError: the count was not reached within ``timeout_s`` seconds.
    """
    await until(lambda: pending(server, model) == count,
                f"{count} queued request(s) of '{model}' (now {pending(server, model)})", timeout_s)


__all__ = ["pending", "queued", "until"]
