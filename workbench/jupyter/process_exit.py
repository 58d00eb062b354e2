"""The Jupyter server process ends as soon as Jupyter's own shutdown is over.

With the engine's frameworks imported (ONNX Runtime, torch, TensorFlow, OpenVINO, DALI: the
sample models), the interpreter's finalization after Jupyter's shutdown (a full garbage
collection, the modules' teardown, the frameworks' native destructors) is where a stop's time
went: 12-28 s of silence after "all models unloaded; exiting" (measured on the 18 sample
models; the drain itself took 0.2 s). Nothing is left for it to release: the engine has
unloaded every model and stopped every Python stub, Jupyter has shut its kernels and closed
its sockets. So the extension's stop registers :func:`_exit_at_once` with ``atexit`` (it runs
first: registered last), which ends the process with ``os._exit`` once the logs are flushed,
as ``workbench serve`` ends (:func:`workbench.hosts.serve.run`).

From that stop on, grpc-core's "Closing acceptor" line (printed when the v2 gRPC port stops
accepting: expected, not a fault) is kept off the terminal as ``workbench serve`` keeps it:
descriptor 2 passes through :func:`~workbench.serving.stderr_filter.filter_stderr`'s child.

Both only in a process whose :class:`~jupyter_server.serverapp.ServerApp` is stopping
(:func:`server_stopping`: ``ServerApp.stop()``, from a signal or the no-activity timeout, and
``POST /api/shutdown``, which ``jupyter server stop`` sends), never where a test or an
embedding application stops the extensions itself; the exit only with
``c.Workbench.exit_at_once`` (the default). Beyond Triton (a C++ binary: its stop ends there,
and its listener is its own).
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import logging
import os
import sys
from types import FrameType

from workbench.serving.stderr_filter import restore_stderr


def server_stopping(serverapp: object) -> bool:
    """Whether ``serverapp`` (a ``ServerApp``) is stopping its process: its ``_stopping``
    trait, set by ``ServerApp.stop()`` (a signal, the no-activity timeout), or a clean-up that
    runs on the loop ``ServerApp.start_ioloop`` runs, which is only ever the last one of a
    Jupyter server process (``POST /api/shutdown``, ``jupyter server stop``: Jupyter's
    ``ShutdownHandler`` cleans up and stops the loop without setting ``_stopping``). A test or
    an application that runs the loop itself and stops the extensions is not stopping its
    process. Both private names are checked by tests/test_library_internals.py."""
    if getattr(serverapp, "_stopping", False):
        return True
    start_ioloop = getattr(getattr(type(serverapp), "start_ioloop", None), "__code__", None)
    frame: FrameType | None = inspect.currentframe()
    while frame is not None:
        if frame.f_code is start_ioloop:
            return True
        frame = frame.f_back
    return False


def exit_at_once_after() -> None:
    """Register :func:`_exit_at_once` with ``atexit`` (it then runs before every hook
    registered earlier)."""
    atexit.register(_exit_at_once)


def _exit_at_once() -> None:
    """``os._exit``: 1 when an uncaught exception ended the program (``sys.last_value``),
    else 0 (Jupyter's status after a stop), once the logs and standard streams are flushed."""
    status = 1 if getattr(sys, "last_value", None) is not None else 0
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing to flush
            stream.flush()
    restore_stderr()  # the filter's child passes on the last lines first
    os._exit(status)


__all__ = ["exit_at_once_after", "server_stopping"]
