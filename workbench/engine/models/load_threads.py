"""The model-load threads (tritonserver ``--model-load-thread-count``): blocking load work off
the event loop, and a record of what still runs on them.

A caller that stops waiting (its task was cancelled) does not stop its thread: Python cannot
interrupt a thread, and a load may sit in a framework's native code. :meth:`LoadThreads.finish`
waits for that work too, so the server's stop waits for every load thread to be done (the
host's ``--exit-timeout-secs`` bounds the wait; past it, ``workbench serve`` exits at once
instead of joining a thread that may never return: :mod:`workbench.hosts.serve`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class LoadThreads:
    """``count`` model-load threads.

    Args:
        count: threads that run loads in parallel.
    """

    def __init__(self, count: int) -> None:
        self._executor = ThreadPoolExecutor(count, thread_name_prefix="model-load")
        self._lock = threading.Lock()
        self._running: set[Future[Any]] = set()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a load thread; its result or exception. Cancelling the caller
        stops the waiting only (see the module docstring)."""
        future = self._executor.submit(fn, *args)
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._done)
        return await asyncio.wrap_future(future)

    def busy(self) -> int:
        """Calls still queued or running."""
        with self._lock:
            return len(self._running)

    async def finish(self) -> None:
        """Wait until every call made so far has ended, then let the threads go."""
        with self._lock:
            running = list(self._running)
        if running:
            log.info("stopping: waiting for %d model load(s) still running", len(running))
            await asyncio.wait([asyncio.wrap_future(future) for future in running])
        self._executor.shutdown(wait=False)

    def _done(self, future: Future[Any]) -> None:
        with self._lock:
            self._running.discard(future)


__all__ = ["LoadThreads"]
