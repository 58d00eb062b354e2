"""The scheduler contract (Triton's ``scheduler.h``: Enqueue, InflightInferenceCount, Stop).

A scheduler owns a model version's request queue and its instances. ``enqueue``
is called on the event loop and resolves when the request's response exists;
instances execute on their own threads, never on the loop.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from workbench.backends.base import BackendRequest, BackendResponse, ExecutionTimes, ModelInstance


@dataclass(slots=True)
class Pending:
    """A queued request: what to run, where to put the answer, and when it arrived.

    ``arrival_ns`` / ``enqueue_ns`` are ``time.monotonic_ns()`` values.
    """

    request: BackendRequest
    future: asyncio.Future
    arrival_ns: int
    enqueue_ns: int


class InstanceRunner:
    """One model instance and the single thread that drives it."""

    def __init__(self, instance: ModelInstance) -> None:
        self.instance = instance
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=instance.name)

    def execute(self, requests: list[BackendRequest]) -> tuple[list[BackendResponse], ExecutionTimes]:
        """Run one execution on the calling (instance) thread and time its phases."""
        import time

        times = ExecutionTimes(start_ns=time.monotonic_ns())
        responses = self.instance.execute(requests, times)
        times.end_ns = time.monotonic_ns()
        if not times.input_done_ns:
            times.input_done_ns = times.start_ns
        if not times.infer_done_ns:
            times.infer_done_ns = times.end_ns
        if len(responses) != len(requests):
            raise RuntimeError(
                f"instance {self.instance.name} returned {len(responses)} responses "
                f"for {len(requests)} requests"
            )
        return responses, times

    def close(self) -> None:
        """Unload the instance on its own thread, then stop the thread."""
        try:
            self.executor.submit(self.instance.unload).result()
        finally:
            self.executor.shutdown(wait=True)


class Scheduler(ABC):
    """Queues requests of one model version and hands batches to free instances."""

    @abstractmethod
    async def enqueue(self, request: BackendRequest, arrival_ns: int) -> BackendResponse:
        """Queue ``request`` and wait for its response.

        Args:
            request: validated inputs (numpy, batch dim first when the model batches).
            arrival_ns: ``time.monotonic_ns()`` when the server received the request.

        Raises:
            Unavailable: the scheduler is stopping.
            WorkbenchError: the execution failed (the error of that request or batch).
        """

    @abstractmethod
    def inflight_count(self) -> int:
        """Requests queued or executing."""

    @abstractmethod
    async def stop(self) -> None:
        """Refuse new requests, finish queued and executing ones, then unload the instances."""
