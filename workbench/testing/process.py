"""Run a host as a real process (the end-to-end test tier): `workbench serve` on free ports
(:class:`ServerProcess`), or a Jupyter server with the workbench extension
(:class:`JupyterProcess`). Bound ports are read from the process's log."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_STARTED = re.compile(r"Started HTTPService at (\S+):(\d+)")
_METRICS_STARTED = re.compile(r"Started Metrics Service at (\S+):(\d+)")
_GRPC_STARTED = re.compile(r"Started GRPCInferenceService at (\S+):(\d+)")


def free_ports(count: int) -> list[int]:
    """``count`` different ports of 127.0.0.1 that were free a moment ago (bound at once, then
    released: a small race with other processes, fine for tests)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def memory_kib(pid: int) -> dict[str, int]:
    """``{"VmHWM": peak, "VmRSS": now}`` of process ``pid``, KiB (from ``/proc/PID/status``)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0])
    return fields


def reset_peak_memory(pid: int) -> None:
    """Reset process ``pid``'s ``VmHWM`` to its current RSS (writing 5 to ``clear_refs``,
    Linux >= 4.0)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class _HostProcess:
    """A host process whose stderr is read line by line on a thread: the engine's v2 ports
    come from its ``Started ...`` lines (``port``, ``grpc_port``, ``metrics_port``; 0 until
    seen), and :meth:`_ready` says when it is up.

    Raises:
        RuntimeError: the process exited or was not ready within ``timeout_s`` (its log is
            in the message).
    """

    def __init__(self, command: Sequence[str], timeout_s: float, new_session: bool = False,
                 env: Mapping[str, str] | None = None) -> None:
        self.lines: list[str] = []
        self._new_line = threading.Condition()
        self._up = threading.Event()
        self.port = 0
        self.metrics_port = 0
        self.grpc_port = 0
        self.process = subprocess.Popen(
            list(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=new_session, env=dict(env) if env is not None else None,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        while not self._up.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{' '.join(command[:4])} ... did not start:\n" + self.log)

    def _ready(self, line: str) -> bool:
        """Whether ``line`` shows the process up (called for every line until it does)."""
        raise NotImplementedError

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._new_line:
                self.lines.append(line.rstrip("\n"))
                self._new_line.notify_all()
            metrics = _METRICS_STARTED.search(line)
            if metrics and not self.metrics_port:
                self.metrics_port = int(metrics.group(2))
            grpc_started = _GRPC_STARTED.search(line)
            if grpc_started and not self.grpc_port:
                self.grpc_port = int(grpc_started.group(2))
            http = _STARTED.search(line)
            if http and not self.port:
                self.port = int(http.group(2))
            if not self._up.is_set() and self._ready(line):
                self._up.set()
        with self._new_line:  # end of the log: a waiter stops waiting
            self._new_line.notify_all()

    def wait_for_log(self, pattern: str, timeout_s: float = 30.0, since: int = 0) -> str:
        """The first log line (seen so far or to come; from line ``since`` on, an index into
        :attr:`lines`) that ``re.search`` matches ``pattern``; wakes on each new line, never
        polls.

        Raises:
            TimeoutError: no such line within ``timeout_s`` (the log is in the message).
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        seen = since
        with self._new_line:
            while True:
                for line in self.lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise TimeoutError(f"no log line matching {pattern!r}:\n" + self.log)
                self._new_line.wait(left)

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


class ServerProcess(_HostProcess):
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
        env: the process's environment (default: this one's), e.g. another ``PYTHONPATH``
            to run other code.

    Raises:
        RuntimeError: the process exited or did not start in time (its log is in the message).
    """

    def __init__(self, args: Sequence[str], timeout_s: float = 120.0, new_session: bool = False,
                 env: Mapping[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "workbench.hosts.cli", "serve", *args]
        for flag in ("--http-port", "--metrics-port", "--grpc-port"):
            if not any(a.startswith(flag) for a in args):
                command.append(f"{flag}=0")
        super().__init__(command, timeout_s, new_session, env)

    def _ready(self, line: str) -> bool:
        return _STARTED.search(line) is not None


class RayServeProcess(_HostProcess):
    """``workbench ray-serve ARGS`` (the engine on a Ray cluster, :mod:`workbench.ray.cli`);
    up at its ``workbench ray-serve ready`` line. Ports are Serve's proxies', given in ``args``."""

    def __init__(self, args: Sequence[str], timeout_s: float = 600.0,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__([sys.executable, "-m", "workbench.hosts.cli", "ray-serve", *args], timeout_s, False, env)

    def _ready(self, line: str) -> bool:
        return "workbench ray-serve ready" in line


class TritonProcess(_HostProcess):
    """A real ``tritonserver`` (2.51, from the nvidia-pytriton wheel's venv made by
    ``scripts/triton_venv.sh``) on free ports, with the environment its python backend needs
    (as ``../shared/bench/tritonserver.sh``); its log (stdout too) is read as a
    :class:`ServerProcess`'s.

    Args:
        venv: the venv holding ``pytriton/tritonserver``.
        args: flags after the binary (the ports are added).

    Raises:
        RuntimeError: the process exited or did not start in time (its log is in the message).
    """

    def __init__(self, venv: Path, args: Sequence[str], timeout_s: float = 120.0) -> None:
        site = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        root = Path(site) / "pytriton" / "tritonserver"
        http, grpc, metrics = free_ports(3)
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", "PYTHONPATH": site,
               "LD_LIBRARY_PATH": f"{site}/nvidia_pytriton.libs"}
        command = ["bash", "-c", 'exec "$@" 1>&2', "tritonserver", str(root / "bin" / "tritonserver"),
                   f"--backend-directory={root / 'backends'}", *args,
                   "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1",
                   f"--grpc-port={grpc}", "--metrics-address=127.0.0.1", f"--metrics-port={metrics}"]
        super().__init__(command, timeout_s, env=env)
        self.metrics_port = self.metrics_port or metrics

    def _ready(self, line: str) -> bool:
        return _STARTED.search(line) is not None


class LimitedServerProcess(ServerProcess):
    """``workbench serve`` with its open-file limit lowered to ``nofile`` (as a container's
    ``ulimit -n`` would); otherwise as :class:`ServerProcess`."""

    def __init__(self, args: Sequence[str], nofile: int, timeout_s: float = 120.0) -> None:
        launcher = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
                    f"({nofile}, {nofile})); from workbench.hosts.cli import main; sys.exit(main())")
        command = [sys.executable, "-c", launcher, "serve", *args,
                   "--http-port=0", "--grpc-port=0", "--metrics-port=0"]
        _HostProcess.__init__(self, command, timeout_s)


_JUPYTER_URL = re.compile(r"http://127\.0\.0\.1:(\d+)/")
_ENGINE_UP = re.compile(r"workbench engine (running|did not start)")


class JupyterProcess(_HostProcess):
    """``python -m jupyter_server`` (or, with ``lab``, ``python -m jupyterlab``) on a free port
    with the workbench extension, configured by ``--Workbench.*`` flags; up once the extension
    logged that the engine runs (or did not start). With ``--Workbench.open_ports=True``,
    ``port`` / ``grpc_port`` / ``metrics_port`` are the engine's v2 ports and
    :attr:`jupyter_port` is Jupyter's.

    Jupyter's configuration, data and runtime folders are made under ``home`` (nothing of the
    user's is read or written); the extension is enabled as the package does it, by
    ``jupyter_server_config.d/workbench.json`` (``enable_file``) in that configuration folder.

    Args:
        workbench_args: ``--Workbench.x=...`` flags (and any other Jupyter flag).
        home: an empty folder for Jupyter's files.
        enable_file: the extension's ``jupyter_server_config.d`` JSON.
        token: Jupyter's token (``Authorization: token <token>``).
        timeout_s: seconds to wait for the engine.
        lab: run JupyterLab (``jupyter lab``: the same server, plus Lab's pages at ``/lab``)
            instead of the bare Jupyter server.
        engine: whether the workbench server extension runs in this process; ``False`` (with
            ``--ServerApp.jpserver_extensions=workbench.jupyter=False`` among the flags) makes
            the process up once Jupyter prints its URL.

    Raises:
        RuntimeError: the process exited or the engine was not up in time.
    """

    def __init__(self, workbench_args: Sequence[str], home: os.PathLike, enable_file: os.PathLike,
                 token: str = "workbench-test", timeout_s: float = 180.0, lab: bool = False,
                 engine: bool = True) -> None:
        self.token = token
        self.engine = engine
        self.jupyter_port = 0
        folders = {name: os.path.join(home, name) for name in ("config", "data", "runtime", "root")}
        #: Jupyter's root folder (``ServerApp.root_dir``: the files Lab and notebooks see)
        self.root_dir = folders["root"]
        for folder in folders.values():
            os.makedirs(folder, exist_ok=True)
        enabled = os.path.join(folders["config"], "jupyter_server_config.d")
        os.makedirs(enabled, exist_ok=True)
        with open(enable_file, encoding="utf-8") as source, \
                open(os.path.join(enabled, "workbench.json"), "w", encoding="utf-8") as target:
            target.write(source.read())
        env = {**os.environ, "JUPYTER_CONFIG_DIR": folders["config"], "JUPYTER_DATA_DIR": folders["data"],
               "JUPYTER_RUNTIME_DIR": folders["runtime"], "JUPYTER_PLATFORM_DIRS": "0"}
        app = "jupyterlab" if lab else "jupyter_server"
        command = [sys.executable, "-m", app, "--no-browser", "--allow-root", "--port=0", "--port-retries=0",
                   "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
                   f"--ServerApp.root_dir={folders['root']}", *workbench_args]
        super().__init__(command, timeout_s, env=env)

    def _ready(self, line: str) -> bool:
        jupyter = _JUPYTER_URL.search(line)
        if jupyter and not self.jupyter_port:
            self.jupyter_port = int(jupyter.group(1))
        if not self.engine:
            return bool(self.jupyter_port)
        return _ENGINE_UP.search(line) is not None

    @property
    def api_url(self) -> str:
        """``http://127.0.0.1:<jupyter port>/workbench/api``."""
        return f"http://127.0.0.1:{self.jupyter_port}/workbench/api"

    @property
    def headers(self) -> dict[str, str]:
        """Jupyter's token authentication header."""
        return {"Authorization": f"token {self.token}"}
