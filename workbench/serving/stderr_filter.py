"""Keep grpc-core's line about the listener a host shuts itself off the terminal (``workbench
serve`` for its whole run, the Jupyter host from its stop on: :mod:`workbench.jupyter.process_exit`).

At a stop, new gRPC connections are refused at once by shutting grpc-core's listening socket
(:func:`workbench.serving.listeners.shut_listeners`: grpc.aio has no call to stop accepting
while RPCs on open connections are still served). grpc-core's accept loop then fails with
EINVAL and logs, at error level and straight to file descriptor 2 (absl logging in its C
core, out of Python's reach), ``Closing acceptor. Failed accept4: Invalid argument``. That
line is expected on every stop, not a fault; ``GRPC_VERBOSITY=NONE`` would hide grpc-core's
real errors with it. TensorFlow's lines about its own build are dropped the same way
(:data:`DROPPED_LINES`).

:func:`filter_stderr` routes descriptor 2 through a small child process that drops exactly
that line and passes everything else (log lines, native libraries' errors, a crash's last
words) on unchanged, line by line. The child is a separate process, not a thread, so that
nothing is lost when the server dies abruptly (it drains the pipe to its end), and runs in
its own session, ignoring SIGINT / SIGTERM / SIGHUP: a terminal's Ctrl-C or a group signal
stops the server, and the child ends when the last writer (the server, its Python-backend
stubs) has closed the pipe. Not Triton's concern: tritonserver shuts its own listener.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

#: lines containing one of these texts are dropped: grpc-core's acceptor line (above), and
#: what TensorFlow's native libraries print about their build when a TensorFlow model loads,
#: at INFO level through absl before any absl::InitializeLog (so ``TF_CPP_MIN_LOG_LEVEL``,
#: which :func:`workbench.config.tensorflow_signature.import_tensorflow` sets to 1, does not
#: reach them), or as a duplicate registration in a GPU build whose CUDA libraries another
#: framework (PyTorch) registered first: none is a fault or the user's concern. TensorFlow's
#: warnings and errors, and absl's, pass.
DROPPED_LINES = (
    "Closing acceptor. Failed accept4: Invalid argument",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on. You may see slightly different numerical results",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "rebuild TensorFlow with the appropriate compiler flags.",
    "Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN",
    "Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT",
    "Unable to register cuBLAS factory: Attempting to register factory for plugin cuBLAS",
)

#: seconds :func:`restore_stderr` waits for the child to pass on the last lines
RESTORE_WAIT_S = 2.0

# the child: no imports beyond the standard library's, started with -I -S (~20 ms)
_CHILD = r"""
import signal, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
dropped = [text.encode() for text in sys.argv[1:]]
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if any(text in line for text in dropped):
        continue
    try:
        out.write(line)
        out.flush()
    except OSError:  # the terminal went away: keep draining so writers never block
        pass
"""

_active: tuple[int, subprocess.Popen] | None = None


def filter_stderr() -> bool:
    """Route this process's descriptor 2 (and its children's, inherited) through the filter
    child. Idempotent; returns whether the filter is in place (False where the child could
    not be started: stderr then stays as it was)."""
    global _active
    if _active is not None:
        return True
    original = os.dup(2)  # not inheritable: children write to the pipe
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD, *DROPPED_LINES],
                                 stdin=read_end, stdout=original, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
    except OSError:
        os.close(original)
        return False
    finally:
        os.close(read_end)
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    _active = (original, child)
    return True


def restore_stderr() -> None:
    """Point descriptor 2 back at the original stderr and wait (up to
    :data:`RESTORE_WAIT_S` seconds) until the child has passed on every line written so far,
    so the shell's prompt comes after the server's last line. Idempotent."""
    global _active
    if _active is None:
        return
    original, child = _active
    _active = None
    with contextlib.suppress(ValueError, OSError):
        sys.stderr.flush()
    os.dup2(original, 2)  # closes this process's write end: the child sees the end of input
    os.close(original)
    with contextlib.suppress(subprocess.TimeoutExpired):  # a stub still alive holds the pipe
        child.wait(RESTORE_WAIT_S)


__all__ = ["DROPPED_LINES", "filter_stderr", "restore_stderr"]
