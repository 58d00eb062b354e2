"""The async load loops: a closed loop at fixed concurrency, an open loop at a request rate.

Both send prepared requests round-robin through a :class:`~workbench.perf.PerfClient` and
record every request (:class:`RequestRecord`, monotonic nanoseconds) until stopped; the
measurement (:mod:`workbench.perf.measure`) picks the records of its window. They run
until :meth:`Load.stop`, which stops sending and waits for the requests in flight.

Request-rate sends follow perf_analyzer's ``RequestRateWorker``: a schedule of send times
(constant spacing ``1/rate``, or exponential gaps for ``poisson``), and a send that goes
out after its time is *delayed*. perf_analyzer's threads count any lateness; an event loop's
timers fire up to a millisecond late by design (epoll's resolution) and later on a busy
machine without the rate suffering (the schedule catches up), so here a send is delayed
when it leaves more than :func:`delay_tolerance_ns` after its time: the in-flight cap was
reached, or the loop fell behind by more than half a gap.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.perf.clients import PerfClient
from workbench.perf.errors import error_text
from workbench.perf.options import LoadLevel

#: the least lateness that counts as delayed, ns (the event loop's timer resolution)
MIN_DELAY_TOLERANCE_NS = 1_000_000


def delay_tolerance_ns(rate: float) -> int:
    """How late a send at ``rate`` requests/s may leave and still be on schedule: half the
    mean gap between sends, at least :data:`MIN_DELAY_TOLERANCE_NS`."""
    return max(MIN_DELAY_TOLERANCE_NS, int(0.5e9 / rate))


@dataclass(slots=True)
class RequestRecord:
    """One request, timed on the client (``time.monotonic_ns()``).

    Attributes:
        start_ns: when the load loop began the request (before picking its data).
        call_ns: when the client call was issued; ``call_ns - start_ns`` is the client's
            own preparation ("Client Send").
        return_ns: when the client call returned (response received and decoded by the
            client library).
        end_ns: when the load loop was done with it; ``end_ns - return_ns`` is "Client Recv".
        ok: the request succeeded.
        delayed: request-rate mode: sent later than scheduled.
        error: the failure's message (``""`` when ok).
    """

    start_ns: int
    call_ns: int
    return_ns: int
    end_ns: int
    ok: bool
    delayed: bool = False
    error: str = ""


class Load:
    """Sends requests and records them; subclasses decide when to send.

    Args:
        client: the target.
        requests: prepared requests (:meth:`PerfClient.prepare`), sent round-robin.
    """

    def __init__(self, client: PerfClient, requests: Sequence[object]) -> None:
        if not requests:
            raise ValueError("a load needs at least one prepared request")
        self._client = client
        self._requests = requests
        self._next = 0
        self.records: list[RequestRecord] = []
        #: requests sent, with the monotonic ns of each send (for the send rate)
        self.send_times_ns: list[int] = []
        #: set by the first failed request
        self.failed = asyncio.Event()
        self.first_error = ""
        self._stopping = False
        self._tasks: set[asyncio.Task] = set()

    def start(self) -> None:
        """Begin sending (on the running event loop)."""
        raise NotImplementedError

    async def stop(self, drain_timeout_s: float) -> None:
        """Stop sending; wait up to ``drain_timeout_s`` seconds for the requests in flight,
        then cancel what is left (cancelled requests are not recorded)."""
        self._stopping = True
        tasks = set(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=drain_timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, delayed: bool = False) -> None:
        start = time.monotonic_ns()
        request = self._requests[self._next]
        self._next = (self._next + 1) % len(self._requests)
        call = time.monotonic_ns()
        self.send_times_ns.append(call)
        error = ""
        try:
            await self._client.infer(request)
        except Exception as exc:  # noqa: BLE001  (the target's error, whatever its client raises: counted, never raised)
            error = error_text(exc)
        returned = time.monotonic_ns()
        self.records.append(RequestRecord(start, call, returned, time.monotonic_ns(),
                                          not error, delayed, error))
        if error:
            if not self.failed.is_set():
                self.first_error = error
                self.failed.set()
            await asyncio.sleep(0)  # a target failing at once must not starve the loop


class ConcurrencyLoad(Load):
    """``concurrency`` workers, each sending its next request as soon as the last one
    returned (perf_analyzer's concurrency mode: a closed loop)."""

    def __init__(self, client: PerfClient, requests: Sequence[object], concurrency: int) -> None:
        super().__init__(client, requests)
        self.concurrency = concurrency

    def start(self) -> None:
        for _ in range(self.concurrency):
            self._spawn(self._worker())

    async def _worker(self) -> None:
        while not self._stopping:
            await self._send()


class RateLoad(Load):
    """Requests sent at ``rate`` per second whatever the responses do (an open loop).

    Args:
        rate: requests per second.
        distribution: ``"constant"`` (gaps of ``1/rate`` s) or ``"poisson"`` (exponential
            gaps with mean ``1/rate`` s).
        max_inflight: requests in flight at most; a send waits for a free slot (and is then
            delayed).
        seed: seed of the Poisson gaps.
    """

    def __init__(self, client: PerfClient, requests: Sequence[object], rate: float,
                 distribution: str = "constant", max_inflight: int = 1024,
                 seed: int | None = None) -> None:
        super().__init__(client, requests)
        self.rate = rate
        self.distribution = distribution
        self._slots = asyncio.Semaphore(max_inflight)
        self._random = random.Random(seed)

    def start(self) -> None:
        self._scheduler = asyncio.get_running_loop().create_task(self._schedule())

    async def stop(self, drain_timeout_s: float) -> None:
        self._stopping = True
        self._scheduler.cancel()
        await asyncio.gather(self._scheduler, return_exceptions=True)
        await super().stop(drain_timeout_s)

    def _gap_ns(self) -> int:
        mean_s = 1.0 / self.rate
        gap_s = self._random.expovariate(self.rate) if self.distribution == "poisson" else mean_s
        return int(gap_s * 1e9)

    async def _schedule(self) -> None:
        due = time.monotonic_ns()
        tolerance_ns = delay_tolerance_ns(self.rate)
        while not self._stopping:
            wait_ns = due - time.monotonic_ns()
            # behind schedule: still yield once per send, so catching up never starves the loop
            await asyncio.sleep(max(wait_ns, 0) / 1e9)
            await self._slots.acquire()
            delayed = time.monotonic_ns() - due > tolerance_ns
            self._spawn(self._send_in_slot(delayed))
            due += self._gap_ns()

    async def _send_in_slot(self, delayed: bool) -> None:
        try:
            await self._send(delayed)
        finally:
            self._slots.release()


def make_load(level: LoadLevel, client: PerfClient, requests: Sequence[object], *,
              distribution: str = "constant", max_inflight: int = 1024,
              seed: int | None = None) -> Load:
    """The load loop for ``level`` (not started)."""
    if level.mode == "concurrency":
        return ConcurrencyLoad(client, requests, int(level.value))
    return RateLoad(client, requests, level.value, distribution, max_inflight, seed)
