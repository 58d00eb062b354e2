"""Run `workbench serve` as a real process on a free port (the end-to-end test tier)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

_STARTED = re.compile(r"Started HTTPService at (\S+):(\d+)")
_METRICS_STARTED = re.compile(r"Started Metrics Service at (\S+):(\d+)")
_GRPC_STARTED = re.compile(r"Started GRPCInferenceService at (\S+):(\d+)")


class ServerProcess:
    """``workbench serve ... --http-port 0 --grpc-port 0 --metrics-port 0``; bound ports are
    read from its log.

    ``metrics_port`` / ``grpc_port`` are 0 when the process serves no metrics / gRPC
    (``--allow-metrics=false``, ``--allow-grpc=false``): both lines are logged before the
    HTTP one, so they are known once the process is up.

    Args:
        args: flags after ``serve`` (``--http-port=0`` / ``--grpc-port=0`` /
            ``--metrics-port=0`` added unless given).
        timeout_s: seconds to wait for the "Started HTTPService" line.
        new_session: start the server in its own session and process group (its process id
            is the group id), so a test can signal the group as a shell or ``make`` does.

    Raises:
        RuntimeError: the process exited or did not start in time (its log is in the message).
    """

    def __init__(self, args: Sequence[str], timeout_s: float = 120.0, new_session: bool = False) -> None:
        command = [sys.executable, "-m", "workbench.hosts.cli", "serve", *args]
        if not any(a.startswith("--http-port") for a in args):
            command.append("--http-port=0")
        if not any(a.startswith("--metrics-port") for a in args):
            command.append("--metrics-port=0")
        if not any(a.startswith("--grpc-port") for a in args):
            command.append("--grpc-port=0")
        self.lines: list[str] = []
        self._port_found = threading.Event()
        self.port = 0
        self.metrics_port = 0
        self.grpc_port = 0
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=new_session,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        while not self._port_found.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("workbench serve did not start:\n" + self.log)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            metrics = _METRICS_STARTED.search(line)
            if metrics and not self.metrics_port:
                self.metrics_port = int(metrics.group(2))
            grpc_started = _GRPC_STARTED.search(line)
            if grpc_started and not self.grpc_port:
                self.grpc_port = int(grpc_started.group(2))
            match = _STARTED.search(line)
            if match and not self._port_found.is_set():
                self.port = int(match.group(2))
                self._port_found.set()

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    @property
    def url(self) -> str:
        """``localhost:<port>``, the form tritonclient takes."""
        return f"localhost:{self.port}"

    @property
    def grpc_url(self) -> str:
        """``localhost:<grpc port>``, the form ``tritonclient.grpc`` takes."""
        return f"localhost:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """``http://localhost:<metrics port>/metrics``."""
        return f"http://localhost:{self.metrics_port}/metrics"

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit status (SIGKILL after ``timeout_s``)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return self.process.returncode
