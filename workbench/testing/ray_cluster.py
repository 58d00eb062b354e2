"""A Ray cluster of several nodes on this machine for the production and browser tiers:
``ray start --head`` with no CPUs (Serve's controller, proxies and the cluster state actor)
plus worker nodes of one CPU each (and a resource ``node_<i>`` of their own), then
``workbench ray-serve`` on it; all its processes ended after.

What made starts fail on a loaded 2-core machine (read from Ray's logs, ``<temp>/session_*/logs``):

- processes of an earlier cluster still alive: Serve replicas and idle workers rename
  themselves (``ray::ServeReplica...``), so a search of command lines for the cluster's folder
  missed them; they held Ray's ports (``gcs_server.out``: "Failed to start the grpc server. The
  specified port is ...", ``dashboard_agent.log``: "address already in use") and kept calling
  the new GCS ("Wrong cluster ID token"). A cluster's processes are ended by its environment
  (its own ``RAY_AUTH_TOKEN``, below), then by its ports (a worker node's agents carry neither
  that token nor ``RAY_TMPDIR``), waiting until the ports are free; a start refuses ports that
  are taken, naming their holder;
- Ray 2.60's raylet waits a fixed 15 s for its dashboard agent's port files (``raylet.err``:
  "Timed out waiting for file .../dashboard_agent_listen_port_...", not configurable in 2.60)
  and the agent imports ~2 s of CPU (all dashboard modules; jsonschema's rfc3987 grammar), so
  a start in a CPU queue can miss it: such a start is ended (its processes by the node's
  ports) and retried, with the raylet's fatal line kept for the error;
- token authentication: ``ray start --head`` turns it on when ``~/.ray/auth_token`` exists
  (a local ``ray.init()`` writes one: ``workbench ray-serve --ray-address=local``) while ``ray start
  --address`` does not read it, so the worker nodes were refused ("InvalidAuthToken") and the
  worker start failed. Every node and driver of a cluster now gets ``RAY_AUTH_MODE=token``
  and a token of the cluster's own (``RAY_AUTH_TOKEN``), whatever the home folder holds;
- the GCS's health checks of the raylets are widened (``--system-config``) so that a raylet
  starved for a few seconds is not declared dead.

The cluster is up when the GCS reports all its nodes alive (waited on, not slept).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workbench.testing.process import RayServeProcess

RAY = str(Path(sys.executable).with_name("ray"))
#: GCS health checks of the raylets: every 3 s, dead after 10 misses of 10 s each (Ray's
#: defaults: 5 misses), so a starved raylet survives while a killed one is found in ~30 s
SYSTEM_CONFIG = {"health_check_failure_threshold": 10, "health_check_timeout_ms": 10000}


@dataclass(frozen=True)
class RayPorts:
    """Ray's ports from ``base`` (30 of them: GCS ``base``, node ``i`` at ``base + 1 + 6 i``,
    client server ``base + 28``, dashboard ``base + 29``) and the worker ports
    ``workers`` (a range split between the nodes)."""

    base: int
    workers: tuple[int, int]

    def node_manager(self, index: int) -> int:
        return self.base + 1 + 6 * index

    def worker_ports(self, index: int, nodes: int) -> range:
        """Node ``index``'s share of the worker ports (of ``nodes`` nodes)."""
        low, high = self.workers
        size = (high - low + 1) // nodes
        return range(low + index * size, low + (index + 1) * size)

    def node_args(self, index: int, nodes: int) -> list[str]:
        base = self.node_manager(index)
        workers = self.worker_ports(index, nodes)
        return [f"--node-manager-port={base}", f"--object-manager-port={base + 1}",
                f"--dashboard-agent-listen-port={base + 2}", f"--dashboard-agent-grpc-port={base + 3}",
                f"--metrics-export-port={base + 4}", f"--runtime-env-agent-port={base + 5}",
                f"--min-worker-port={workers[0]}", f"--max-worker-port={workers[-1]}",
                "--node-ip-address=127.0.0.1", "--disable-usage-stats"]

    def node(self, index: int, nodes: int) -> list[int]:
        """The ports of node ``index`` alone (its raylet's and agents' six, its worker ports)."""
        base = self.node_manager(index)
        return [*range(base, base + 6), *self.worker_ports(index, nodes)]

    def all(self) -> list[int]:
        return [*range(self.base, self.base + 30), *range(self.workers[0], self.workers[1] + 1)]


def _pids_with_env(marker: str) -> list[int]:
    """The processes whose environment holds ``marker`` (``NAME=value``), this one excepted."""
    found = []
    needle = marker.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
    return found


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _holder(port: int) -> str:
    out = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    return out.strip() or "unknown holder"


def _socket_inodes(ports: Sequence[int]) -> dict[int, int]:
    """Socket inode -> local port of the TCP sockets (any state, IPv4 and IPv6) whose local
    port is one of ``ports``, from ``/proc/net/tcp{,6}``; sockets with no inode left (TIME_WAIT)
    are skipped."""
    wanted, found = set(ports), {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                port, inode = int(fields[1].rsplit(":", 1)[1], 16), int(fields[9])
                if port in wanted and inode:
                    found[inode] = port
    return found


def port_holders(ports: Sequence[int]) -> dict[int, set[int]]:
    """pid -> the ones of ``ports`` it holds (a TCP socket listening on, bound to or accepted
    on that local port, read from ``/proc/*/fd``), this process included."""
    inodes = _socket_inodes(ports)
    holders: dict[int, set[int]] = {}
    if not inodes:
        return holders
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:[") and (port := inodes.get(int(link[8:-1]))) is not None:
                        holders.setdefault(int(entry.name), set()).add(port)
    return holders


def _describe(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                or Path(f"/proc/{pid}/comm").read_text().strip())[:200]
    return "(gone)"


def end_port_holders(ports: Sequence[int], timeout_s: float = 30.0) -> None:
    """SIGKILL every process (this one excepted) that holds one of ``ports``, and return
    once no process holds any of them (polled every 0.1 s).

    Raises:
        RuntimeError: a port still held after ``timeout_s``, naming the port, pid and
            command line of each holder (this process, or one that cannot be killed).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        holders = port_holders(ports)
        if not holders:
            return
        if time.monotonic() > deadline:
            held = "; ".join(f"ports {sorted(held)} by pid {pid} ({_describe(pid)})" for pid, held in holders.items())
            raise RuntimeError(f"Ray ports still held after {timeout_s} s: {held}")
        _kill([pid for pid in holders if pid != os.getpid()])
        time.sleep(0.1)


def check_ports_free(ports: RayPorts) -> None:
    """Raises RuntimeError naming the first of ``ports`` that a process listens on (an earlier
    cluster left running: its processes would answer the new nodes with another cluster's id)."""
    for port in ports.all():
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError as exc:
                raise RuntimeError(f"Ray port {port} is taken ({exc}): {_holder(port)}") from exc


@dataclass
class RayCluster:
    """A head and ``workers`` worker nodes started by :func:`start_cluster`; ``env`` is the
    environment every one of its processes has (give it to a driver such as ``ray-serve``)."""

    ports: RayPorts
    workers: int
    temp: Path
    env: dict[str, str] = field(repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ports.base}"

    @property
    def marker(self) -> str:
        # the cluster's own token: every process has it (the dashboard agent lacks RAY_TMPDIR)
        return f"RAY_AUTH_TOKEN={self.env['RAY_AUTH_TOKEN']}"

    def raylet_pid(self, index: int) -> int | None:
        """The raylet of node ``index`` (0: the head), found by its node manager port, or None."""
        found = subprocess.run(["pgrep", "-f", f"raylet.*--node_manager_port={self.ports.node_manager(index)}"],
                               capture_output=True, text=True).stdout.split()
        return int(found[0]) if found else None

    def node_of_raylet(self, pid: int) -> int | None:
        return next((i for i in range(self.workers + 1) if self.raylet_pid(i) == pid), None)

    def wait_for_nodes(self, count: int, timeout_s: float = 120.0) -> None:
        """Returns when the GCS reports ``count`` nodes alive (asked from a process with the
        cluster's environment: its token).

        Raises:
            RuntimeError: not within ``timeout_s`` (Ray's fatal log lines in the message).
        """
        done = subprocess.run([sys.executable, "-c", _WAIT_FOR_NODES, self.address, str(count), str(timeout_s)],
                              env=self.env, capture_output=True, text=True, timeout=timeout_s + 120)
        if done.returncode != 0:
            raise RuntimeError(f"Ray nodes not all alive: {done.stdout[-500:]}{done.stderr[-1500:]}\n"
                               f"{self.fatal_lines()}")

    def fatal_lines(self) -> str:
        """The fatal (``C``/``F``) and error lines of the Ray logs of every session (at most 20)."""
        lines: list[str] = []
        for log in sorted(self.temp.glob("session_2*/logs/*")):
            if log.suffix in (".out", ".err", ".log") and log.is_file():
                with contextlib.suppress(OSError):
                    lines += [f"{log.name}: {line[:400]}" for line in log.read_text(errors="replace").splitlines()
                              if " C " in line[:40] or " F " in line[:40] or "Check failed" in line]
        return "\n".join(lines[-20:])

    def kill_node(self, index: int, timeout_s: float = 30.0) -> None:
        """SIGKILL node ``index`` as a host dies: its raylet, then every process that holds
        one of its ports (its agents and workers); returns once those ports are free.

        Raises:
            RuntimeError: no raylet for the node, or a port still held after ``timeout_s``.
        """
        raylet = self.raylet_pid(index)
        if raylet is None:
            raise RuntimeError(f"no raylet of Ray node {index}")
        _kill([raylet])
        end_port_holders(self.ports.node(index, self.workers + 1), timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """End every process of this cluster: by its environment, twice (a process may fork
        while the first pass runs), then every holder of one of its ports; returns once the
        ports are free.

        Raises:
            RuntimeError: a port still held after ``timeout_s`` (its holder named).
        """
        for _ in range(2):
            _kill(_pids_with_env(self.marker))
            time.sleep(0.2)
        end_port_holders(self.ports.all(), timeout_s)


_WAIT_FOR_NODES = """
import sys, time
from ray._raylet import GcsClient
address, count, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline, alive = time.monotonic() + timeout_s, 0
while time.monotonic() < deadline:
    try:
        nodes = GcsClient(address=address).get_all_node_info(timeout=10)
        alive = sum(1 for info in nodes.values() if info.state == 0)  # GcsNodeInfo.ALIVE
    except Exception:
        alive = 0
    if alive >= count:
        sys.exit(0)
    time.sleep(0.5)
sys.exit(f"{alive} of {count} nodes alive after {timeout_s} s")
"""


def _ray_start(cluster: RayCluster, args: list[str], index: int, tries: int) -> None:
    """``ray start ARGS`` for node ``index``; a failed start's processes (its raylet and the
    holders of its ports; all of the cluster's for the head) are ended and it is tried again."""
    for attempt in range(tries):
        done = subprocess.run([RAY, "start", *args], env=cluster.env, capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return
        print(f"ray start of node {index} failed (try {attempt + 1}/{tries}):\n{cluster.fatal_lines()}",
              file=sys.stderr)
        if index == 0:
            cluster.stop()
        else:
            port = cluster.ports.node_manager(index)
            _kill([int(p) for p in subprocess.run(["pgrep", "-f", f"node.manager.port={port}"],
                                                  capture_output=True, text=True).stdout.split()])
            end_port_holders(cluster.ports.node(index, cluster.workers + 1))
        if attempt == tries - 1:
            raise RuntimeError(f"ray start {args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}\n"
                               f"{cluster.fatal_lines()}")


def start_cluster(ports: RayPorts, workers: int, pythonpath: str, tries: int = 3) -> RayCluster:
    """Start a head (no CPUs) and ``workers`` worker nodes (one CPU and resource ``node_<i>``
    each); returns when the GCS reports them all alive.

    Raises:
        RuntimeError: a port is taken, a start failed ``tries`` times or the nodes did not
            all come up (Ray's fatal log lines are in the message); nothing is left running.
    """
    check_ports_free(ports)
    temp = Path(tempfile.mkdtemp(prefix="wbray", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": pythonpath, "RAY_TMPDIR": str(temp),
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    cluster = RayCluster(ports, workers, temp, env)
    nodes = workers + 1
    try:
        _ray_start(cluster, ["--head", f"--port={ports.base}", "--num-cpus=0", "--include-dashboard=false",
                             f"--ray-client-server-port={ports.base + 28}", f"--dashboard-port={ports.base + 29}",
                             f"--temp-dir={temp}", f"--system-config={json.dumps(SYSTEM_CONFIG)}",
                             *ports.node_args(0, nodes)], 0, tries)
        for index in range(1, nodes):
            _ray_start(cluster, [f"--address={cluster.address}", "--num-cpus=1",
                                 f"--resources={json.dumps({f'node_{index}': 1})}", *ports.node_args(index, nodes)],
                       index, tries)
        cluster.wait_for_nodes(nodes)
    except BaseException:
        cluster.stop()
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return cluster


@contextlib.contextmanager
def ray_cluster(ports: RayPorts, workers: int, pythonpath: str) -> Iterator[RayCluster]:
    """:func:`start_cluster`, and every process of the cluster ended after."""
    cluster = start_cluster(ports, workers, pythonpath)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.temp, ignore_errors=True)


@contextlib.contextmanager
def ray_serve_cluster(ports: RayPorts, workers: int, serve_args: Sequence[str],
                      pythonpath: str) -> Iterator[RayServeProcess]:
    """A head and ``workers`` one-CPU worker nodes, ``workbench ray-serve SERVE_ARGS`` on
    them (``--ray-address`` and ``--proxy-location=HeadOnly`` added); everything ended after."""
    with ray_cluster(ports, workers, pythonpath) as cluster:
        serve = RayServeProcess([f"--ray-address={cluster.address}", "--proxy-location=HeadOnly", *serve_args],
                                env=cluster.env)
        try:
            yield serve
        finally:
            serve.stop(timeout_s=120)


__all__ = ["RayCluster", "RayPorts", "check_ports_free", "end_port_holders", "port_holders", "ray_cluster",
           "ray_serve_cluster", "start_cluster"]
