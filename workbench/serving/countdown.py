"""tritonserver's once-a-second countdown while a stop waits for work in flight (its
``Server::Stop`` for inferences, ``WaitForConnectionsToClose`` for gRPC calls): the shared
loop; each caller logs its own lines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

_Found = TypeVar("_Found")


async def count_down(
    seconds: int, pending: Callable[[], _Found], report: Callable[[int, _Found], None], *, stop_at_zero: bool
) -> None:
    """Once a second while ``pending()`` finds something (a truthy value): ``report(left,
    found)``, ``left`` starting at ``seconds`` and counting down by one a second, never below
    0. ``stop_at_zero``: the countdown ends when ``left`` reaches 0 (nothing reported at 0);
    else it goes on at 0 until nothing is pending (the caller cancels it when its stop ends).
    """
    left = seconds
    while (left > 0 or not stop_at_zero) and (found := pending()):
        report(left, found)
        await asyncio.sleep(1.0)
        left = max(0, left - 1)


__all__ = ["count_down"]
