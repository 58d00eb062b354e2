"""Continuous load counted per answering version, for tests that change a model's rollout or
version policy under load and assert that no request failed (``tests/test_rollouts*.py``).

``send(n)`` sends the ``n``-th request (in-process ``Server.infer``, a gRPC ``ModelInfer``, ...)
and returns the version that answered it; :class:`VersionLoad` runs ``loops`` of them until
:meth:`VersionLoad.stop`, counting answers per version and keeping every failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from workbench.testing.waits import until


class VersionLoad:
    """``loops`` concurrent request loops of ``send`` (module docstring).

    Attributes:
        answered: version -> requests it answered. failures: the exceptions requests raised.
        sent: requests sent so far.
    """

    def __init__(self, send: Callable[[int], Awaitable[str]], loops: int = 4) -> None:
        self.send = send
        self.answered: dict[str, int] = {}
        self.failures: list[BaseException] = []
        self.sent = 0
        self._stopping = asyncio.Event()
        self._loops = [asyncio.ensure_future(self._loop()) for _ in range(loops)]

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            self.sent += 1
            try:
                version = await self.send(self.sent)
            except Exception as exc:  # noqa: BLE001 - kept: the tests assert there is none
                self.failures.append(exc)
            else:
                self.answered[version] = self.answered.get(version, 0) + 1

    def total(self) -> int:
        """Requests answered so far."""
        return sum(self.answered.values())

    async def more_answers(self, count: int = 40, timeout_s: float = 30.0) -> dict[str, int]:
        """Wait for ``count`` more answers (or a failure); version -> answers it gave meanwhile.

        Raises:
            TimeoutError: fewer than ``count`` answers within ``timeout_s`` seconds.
        """
        before = dict(self.answered)
        target = self.total() + count
        await until(lambda: self.total() >= target or bool(self.failures), "answers under load", timeout_s)
        return {v: n - before.get(v, 0) for v, n in self.answered.items() if n > before.get(v, 0)}

    async def stop(self) -> None:
        """End the loops once their requests in flight are answered."""
        self._stopping.set()
        await asyncio.gather(*self._loops)


__all__ = ["VersionLoad"]
