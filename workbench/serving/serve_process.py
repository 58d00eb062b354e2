"""A ``workbench serve`` child process started from the dashboard: start, health, log, stop.

The process runs the same Python as the notebook or Jupyter server
(``sys.executable -m workbench.hosts.cli serve``) on the repository and ports the user picks;
its stdout and stderr are read by a daemon thread into a bounded log tail. Health is
``GET /v2/health/ready`` and ``/v2/health/live`` with httpx.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence

import httpx

from workbench.serving.sockets import bind_socket

#: log lines kept
LOG_LINES = 500


#: the v2 ports a `workbench serve` takes by default (HTTP, gRPC, metrics), as Triton's
DEFAULT_PORTS = (8000, 8001, 8002)


def _free(port: int) -> bool:
    """Whether `workbench serve` could listen on ``port`` now, whatever the address it is
    given: a socket on every IPv6 and IPv4 interface (``::``, dual-stack) opened and closed
    (:func:`workbench.serving.sockets.bind_socket`), or on every IPv4 one where the machine
    has no IPv6. (``0.0.0.0`` alone missed a server listening on ``::1``, as one bound to
    ``localhost`` may be, and proposed its port.)"""
    for address in ("::", "0.0.0.0"):
        try:
            bind_socket(address, port).close()
        except OSError as exc:
            if address == "::" and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue  # no IPv6 here: the IPv4 probe says
            return False
        return True
    return False


def taken_ports(ports: Sequence[int]) -> list[int]:
    """Those of ``ports`` another listener holds now (see :func:`suggested_ports`)."""
    return [port for port in ports if not _free(port)]


def suggested_ports(tries: int = 20) -> tuple[int, int, int]:
    """HTTP, gRPC and metrics ports for a new `workbench serve`: Triton's 8000/8001/8002 when
    all three are free, else the first of 8100/8101/8102, 8200/... that is (the engine hosting
    the dashboard, e.g. ``make jupyter``, often holds 8000-8002 itself); Triton's if none of
    ``tries`` triples is free (the start then reports the busy port)."""
    for offset in range(0, 100 * tries, 100):
        ports = tuple(port + offset for port in DEFAULT_PORTS)
        if all(_free(port) for port in ports):
            return ports  # type: ignore[return-value]
    return DEFAULT_PORTS


async def ready_code(address: str, port: int, timeout_s: float = 5.0) -> int:
    """The HTTP status of ``GET /v2/health/ready`` at ``address:port`` on a fresh connection
    (closed after it); 0 when no answer came within ``timeout_s`` seconds."""
    host = f"[{address}]" if ":" in address else address
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=timeout_s) as client:
            return (await client.get("/v2/health/ready", headers={"Connection": "close"})).status_code
    except httpx.HTTPError:
        return 0


class ServeProcess:
    """One ``workbench serve`` process.

    Args:
        repositories: model repository folders (``--model-repository``, one per entry).
        http_port, grpc_port, metrics_port: the ports it binds (0 = any free port; the bound
            ones are not read back, so health needs a fixed ``http_port``).
        model_control_mode: ``none``, ``explicit`` (then every model is loaded at start,
            ``--load-model=*``) or ``poll``.
        extra_args: more ``workbench serve`` flags.
        http_address: the address to bind and to poll (default loopback).
        command: the whole command line to run instead of the one built from the other
            arguments (``http_address`` and ``http_port`` must still say where it serves).
        env: environment variables added to this process's for it (secrets that must not be
            on a command line: ``WORKBENCH_HTTP_RESTRICTED_API``, ...).

    Raises:
        OSError: the process could not be started.
    """

    def __init__(self, repositories: Sequence[str], http_port: int = 8000, grpc_port: int = 8001,
                 metrics_port: int = 8002, model_control_mode: str = "none",
                 extra_args: Sequence[str] = (), http_address: str = "127.0.0.1",
                 command: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> None:
        self.http_address = http_address
        self.http_port = http_port
        self.command = list(command) if command is not None else [sys.executable, "-m", "workbench.hosts.cli", "serve",
                        *(f"--model-repository={r}" for r in repositories),
                        f"--model-control-mode={model_control_mode}",
                        f"--http-address={http_address}", f"--http-port={http_port}",
                        f"--grpc-address={http_address}", f"--grpc-port={grpc_port}",
                        f"--metrics-address={http_address}", f"--metrics-port={metrics_port}",
                        *(["--load-model=*"] if model_control_mode == "explicit" else []),
                        *extra_args]
        self.lines: deque[str] = deque(maxlen=LOG_LINES)
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        text=True, errors="replace",
                                        env={**os.environ, **env} if env else None)
        self._reader = threading.Thread(target=self._read, daemon=True, name="serve-log")
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:  # closed at the end of its output (the process exited)
            for line in self.process.stdout:
                self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        """True until the process has exited."""
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        """Its exit status once it has exited (negative: killed by that signal), else None."""
        return self.process.poll()

    def printed(self, fragment: str) -> bool:
        """Whether a line it printed (of the last :data:`LOG_LINES`) contains ``fragment``."""
        return any(fragment in line for line in list(self.lines))

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines it printed."""
        return "\n".join(list(self.lines)[-lines:])

    async def health(self, timeout_s: float = 1.0) -> str:
        """``READY``, ``LIVE`` (live, not ready: loading, draining, or a model failed with
        strict readiness), ``STARTING`` (running, not answering yet) or ``EXITED (status)``."""
        if not self.running:
            return f"EXITED ({self.returncode})"
        base = f"http://{self.http_address}:{self.http_port}"
        try:
            async with httpx.AsyncClient(base_url=base, timeout=timeout_s) as client:
                if (await client.get("/v2/health/ready")).status_code == 200:
                    return "READY"
                if (await client.get("/v2/health/live")).status_code == 200:
                    return "LIVE"
        except httpx.HTTPError:
            pass
        return "STARTING" if self.running else f"EXITED ({self.returncode})"

    async def health_code(self) -> int:
        """:func:`ready_code` of its HTTP port."""
        return await ready_code(self.http_address, self.http_port)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (the server drains in-flight requests, then exits); SIGKILL if it is still
        running after ``timeout_s`` seconds. Blocking; returns the exit status."""
        if self.running:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        return self.process.returncode


__all__ = ["DEFAULT_PORTS", "LOG_LINES", "ServeProcess", "ready_code", "suggested_ports", "taken_ports"]
