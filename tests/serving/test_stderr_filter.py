"""The descriptor-2 filter (workbench.serving.stderr_filter) on a real process: grpc-core's
acceptor line dropped, other lines passed, and a partial line passed on while its writer still
waits (ipykernel's close writes one NUL byte to descriptor 2 and waits for its reader to see it:
a filter that held partial lines until a newline kept a kernel from shutting down)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import os, sys
from workbench.serving.stderr_filter import filter_stderr
assert filter_stderr()
os.write(2, b"E1203 posix_engine_listener.cc:186] Closing acceptor. Failed accept4: Invalid argument\nkept\n\0tail")
sys.stdin.readline()  # the writer waits, as ipykernel's close waits for its reader
"""


def test_the_acceptor_line_is_dropped_and_a_partial_line_passes_while_its_writer_waits() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env) as process:
        assert process.stderr is not None and process.stdin is not None
        seen = b""
        selector = selectors.DefaultSelector()
        selector.register(process.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 10
        while not seen.endswith(b"\0tail") and time.monotonic() < deadline:
            if selector.select(deadline - time.monotonic()):
                chunk = os.read(process.stderr.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
        # the partial line came out while the writer still waits (not only at its end)
        assert seen == b"kept\n\0tail" and process.poll() is None, seen
        process.stdin.write(b"\n")
        process.stdin.close()
        assert process.stderr.read() == b""
