"""Blocking file-system calls bounded in time: a read on a hung mount (NFS, FUSE, a FIFO
opened for reading) can block a thread forever and cannot be interrupted, so the call runs
on a daemon worker thread and its caller stops waiting after ``timeout_s``.

A call that timed out leaves its worker blocked; that worker is abandoned (it ends once the
call returns, and never keeps the process from exiting) and the next call gets a fresh one.
While it is still blocked, a new call with the same key fails at once instead of blocking
a second thread on the same file, so a file that never answers costs one thread, not one
per poll.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class _Job:
    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args)
        except BaseException as exc:  # noqa: BLE001  # handed to the caller, which may have stopped waiting
            self.error = exc
        finally:
            self.done.set()


class _Worker:
    """One daemon thread running jobs in order until it takes ``None`` (retired): the jobs
    queued before that still run, late, so that every job ends up done."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="workbench-bounded-io", daemon=True).start()

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            job.run()


class BoundedCalls:
    """Runs blocking calls on a daemon worker thread, each bounded to ``timeout_s`` seconds.

    Thread-safe; calls run one at a time, in the order they are made. The worker ends once
    this object is gone (its calls done).

    Args:
        timeout_s: seconds a caller waits for one call.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._stuck: dict[str, _Job] = {}

    def call(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the worker; ``key`` names what it touches (a path), in errors and
        to refuse a second call on a key whose earlier call is still blocked.

        Raises:
            TimeoutError: no answer within ``timeout_s`` ("'<key>' did not answer within Ns"),
                or the previous call for ``key`` still has not returned.
            Exception: whatever ``fn`` raised.
        """
        job = _Job(fn, args)
        with self._lock:
            stuck = self._stuck.get(key)
            if stuck is not None:
                if not stuck.done.is_set():
                    raise TimeoutError(f"'{key}': an earlier call has not returned yet")
                del self._stuck[key]
            if self._worker is None:
                self._worker = _Worker()
                weakref.finalize(self, self._worker.jobs.put, None)  # no caller left: it ends
            worker = self._worker
            worker.jobs.put(job)
        if not job.done.wait(self.timeout_s):
            with self._lock:
                self._stuck[key] = job
                if self._worker is worker:  # abandoned: ends once its calls return
                    worker.jobs.put(None)
                    self._worker = None
            raise TimeoutError(f"'{key}' did not answer within {self.timeout_s:g}s")
        if job.error is not None:
            raise job.error
        return job.result


__all__ = ["BoundedCalls"]
