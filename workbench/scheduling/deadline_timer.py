"""A wake-up on the event loop at a ``time.monotonic_ns()`` deadline, precise to microseconds.

The dynamic batcher waits out ``max_queue_delay_microseconds`` (and the sequence batcher its
candidate delays) with a timer on the event loop. Both loops the product runs on round a timer to
milliseconds: asyncio's selector loop (the Jupyter host: tornado runs on it) passes epoll a timeout
rounded *up* to the next millisecond, so a 100 µs delay waits ~1.1 ms and 1500 µs waits ~2.1 ms;
uvloop (``workbench serve``) keeps libuv's millisecond clock and rounds to the *nearest*
millisecond, so 100–400 µs fire at once and 600 µs waits ~1.1 ms. Triton's batcher waits on a
condition variable with the delay in microseconds, so a sub-millisecond delay is what a user tunes
(e.g. in the dashboard's Tuning tab) and must mean what it says.

On Linux this timer is a ``timerfd`` (``CLOCK_MONOTONIC``, the clock of ``time.monotonic_ns()``,
absolute expiry) watched by the loop's reader callbacks: the kernel wakes epoll at the deadline
with the timer slack of the process (50 µs by default), never before it, and no thread is
involved. ``os.timerfd_create`` is used where Python has it (3.13+), libc through ctypes before.
Elsewhere (no timerfd) it falls back to ``loop.call_at``, with the loop's rounding; the module
attribute :data:`PRECISE` says which.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import time
import weakref
from collections.abc import Callable

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_timerfd() -> tuple[Callable[[], int], Callable[[int, int], None]] | None:
    """``(create, settime)`` through libc, or None where libc has no timerfd."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create_fn, settime_fn = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None

    def create() -> int:
        fd = create_fn(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        return int(fd)

    def settime(fd: int, due_ns: int) -> None:
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(due_ns, 1_000_000_000)
        if settime_fn(fd, _TFD_TIMER_ABSTIME if due_ns else 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    return create, settime


def _os_timerfd() -> tuple[Callable[[], int], Callable[[int, int], None]] | None:
    """``(create, settime)`` through ``os`` (Python 3.13+), or None."""
    if not hasattr(os, "timerfd_create"):
        return None
    # getattr: the names exist from Python 3.13 on, which the type checker's target predates
    create_fd = getattr(os, "timerfd_create")  # noqa: B009
    settime_ns = getattr(os, "timerfd_settime_ns")  # noqa: B009
    flags = getattr(os, "TFD_NONBLOCK") | getattr(os, "TFD_CLOEXEC")  # noqa: B009
    absolute = getattr(os, "TFD_TIMER_ABSTIME")  # noqa: B009

    def create() -> int:
        return int(create_fd(time.CLOCK_MONOTONIC, flags=flags))

    def settime(fd: int, due_ns: int) -> None:
        settime_ns(fd, flags=absolute if due_ns else 0, initial=due_ns)

    return create, settime


def _probe() -> tuple[Callable[[], int], Callable[[int, int], None]] | None:
    calls = _os_timerfd() or _libc_timerfd()
    if calls is None:
        return None
    try:  # a seccomp profile or an old kernel may refuse it: then the loop's own timer
        os.close(calls[0]())
    except OSError:
        return None
    return calls


_LOG = logging.getLogger(__name__)
#: ``(create, settime)`` of the timerfd in use, or None: the loop's own timer is used instead
TIMERFD = _probe()
#: set once the fallback was warned about (once per process)
fallback_warned = [False]
#: True when :class:`DeadlineTimer` wakes at microsecond precision (a timerfd); False when it
#: falls back to the loop's millisecond timer.
PRECISE = TIMERFD is not None


class DeadlineTimer:
    """Calls ``callback()`` on the running event loop once ``time.monotonic_ns()`` reaches the
    deadline given to :meth:`arm`; one deadline at a time (arming again replaces it).

    Never early; late by the kernel's timer slack (~50 µs) plus however long the loop is busy.
    Use it from the loop's thread only. The file descriptor is watched only while armed and is
    closed by :meth:`close` (or when the timer is garbage-collected).
    """

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._watched = False
        self._handle: asyncio.TimerHandle | None = None
        self._finalizer: weakref.finalize[[int], DeadlineTimer] | None = None
        self._due_ns = 0  # the deadline last armed

    @property
    def armed(self) -> bool:
        """True while a deadline is set and has not fired."""
        return self._watched or self._handle is not None

    @property
    def due_ns(self) -> int:
        """The deadline set while :attr:`armed` (``time.monotonic_ns()`` nanoseconds), else 0."""
        return self._due_ns if self.armed else 0

    def arm(self, due_ns: int) -> None:
        """Fire at ``due_ns`` (``time.monotonic_ns()`` nanoseconds; a past one fires at once)."""
        self._due_ns = due_ns
        loop = asyncio.get_running_loop()
        if TIMERFD is None:
            if not fallback_warned[0]:
                fallback_warned[0] = True
                _LOG.warning("no timerfd on this platform: queue delays and timeouts are rounded "
                             "to the event loop's millisecond timer (sub-millisecond delays are "
                             "not waited as configured)")
            if self._handle is not None:
                self._handle.cancel()
            delay_s = max(0.0, (due_ns - time.monotonic_ns()) / 1e9)
            self._handle = loop.call_at(loop.time() + delay_s, self._fired_fallback)
            return
        if self._fd < 0:
            self._fd = TIMERFD[0]()
            self._finalizer = weakref.finalize(self, os.close, self._fd)
        TIMERFD[1](self._fd, max(1, due_ns))  # 0 would disarm
        if not self._watched:
            loop.add_reader(self._fd, self._fired)
            self._loop, self._watched = loop, True

    def arm_earlier(self, due_ns: int) -> None:
        """:meth:`arm` ``due_ns`` unless the timer is already armed for it or earlier: what a
        batcher needs when several requests each bring a deadline."""
        if self.armed and self._due_ns <= due_ns:
            return
        self.arm(due_ns)

    def cancel(self) -> None:
        """Drop the deadline, if any; the callback will not run for it."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._watched:
            assert TIMERFD is not None
            TIMERFD[1](self._fd, 0)
            self._unwatch()

    def close(self) -> None:
        """Cancel and release the file descriptor; the timer may be armed again afterwards."""
        self.cancel()
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer, self._fd = None, -1

    def _unwatch(self) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self._fd)
        self._watched = False

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed for later between the wake-up and this callback
            return
        self._unwatch()
        self._callback()

    def _fired_fallback(self) -> None:
        self._handle = None
        self._callback()
