"""The engine's event loop on a thread of its own, for a synchronous API.

Triton's ``tritonserver`` calls block (``server.start()``, ``model.infer()``, iterating the
responses), also in a Jupyter kernel whose own asyncio loop runs the cell. The engine
(:class:`workbench.Server`, asyncio-native) therefore never runs on the caller's loop: it runs
on this thread's loop, and each call is handed over with ``asyncio.run_coroutine_threadsafe``.
Nothing here calls ``asyncio.run`` or touches the caller's loop, so the same object works in a
plain script, in a kernel, and from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from workbench.tritonserver._errors import UnavailableError

T = TypeVar("T")


class EngineLoop:
    """An asyncio loop running on a daemon thread until :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tritonserver-engine",
                                        daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coroutine`` on the engine's loop; its future (thread-safe).

        Raises:
            UnavailableError: the loop is closed (the server was stopped).
        """
        if not self.running:
            coroutine.close()
            raise UnavailableError("Server not started")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coroutine`` on the engine's loop and wait for its result (or its exception).

        Raises:
            RuntimeError: called from the engine's own thread (it would wait on itself).
            TimeoutError: ``timeout_s`` seconds passed (the coroutine is cancelled).
        """
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a blocking tritonserver call was made on the engine's own loop")
        future = self.submit(coroutine)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout_s} s") from None

    def close(self) -> None:
        """Stop the loop and join its thread (idempotent). Call after the engine stopped."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


__all__ = ["EngineLoop"]
