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

Only in a process whose :class:`~jupyter_server.serverapp.ServerApp` is stopping
(``ServerApp.stop()``: a signal, ``POST /api/shutdown``, the no-activity timeout), never where
a test or an embedding application stops the extensions itself, and only with
``c.Workbench.exit_at_once`` (the default). Beyond Triton (a C++ binary: its stop ends there).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys


def exit_at_once_after(serverapp: object) -> bool:
    """Register :func:`_exit_at_once` when ``serverapp`` is stopping (its ``_stopping``
    trait, set by ``ServerApp.stop()``); returns whether it did."""
    if not getattr(serverapp, "_stopping", False):
        return False
    atexit.register(_exit_at_once)
    return True


def _exit_at_once() -> None:
    """``os._exit``: 1 when an uncaught exception ended the program (``sys.last_value``),
    else 0 (Jupyter's status after a stop), once the logs and standard streams are flushed."""
    status = 1 if getattr(sys, "last_value", None) is not None else 0
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing to flush
            stream.flush()
    os._exit(status)


__all__ = ["exit_at_once_after"]
