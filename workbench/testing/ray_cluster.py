"""A Ray cluster of several nodes on this machine for the production and browser tiers:
``ray start --head`` with no CPUs (Serve's controller, proxies and the cluster state actor)
plus worker nodes of one CPU each, then ``workbench ray-serve`` on it; all its processes
ended after (found by the cluster's temporary folder, never by a broad name).

Slow on a loaded 2-core machine: each ``ray start`` takes 10-60 s, and Ray's raylet waits a
fixed 15 s for its dashboard agent, so a start that misses it is retried.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.testing.process import RayServeProcess

RAY = str(Path(sys.executable).with_name("ray"))


@dataclass(frozen=True)
class RayPorts:
    """Ray's ports from ``base`` (30 of them: GCS ``base``, node ``i`` at ``base + 1 + 6 i``,
    client server ``base + 28``, dashboard ``base + 29``) and the worker ports
    ``workers`` (a range split between the nodes)."""

    base: int
    workers: tuple[int, int]

    def node_args(self, index: int, nodes: int) -> list[str]:
        base = self.base + 1 + 6 * index
        low, high = self.workers
        size = (high - low + 1) // nodes
        return [f"--node-manager-port={base}", f"--object-manager-port={base + 1}",
                f"--dashboard-agent-listen-port={base + 2}", f"--dashboard-agent-grpc-port={base + 3}",
                f"--metrics-export-port={base + 4}", f"--runtime-env-agent-port={base + 5}",
                f"--min-worker-port={low + index * size}", f"--max-worker-port={low + (index + 1) * size - 1}",
                "--node-ip-address=127.0.0.1", "--disable-usage-stats"]


def _end(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stop_cluster(temp: Path, ports: RayPorts, nodes: int) -> None:
    """End this cluster's processes only: its raylets (by node manager port), then every
    process whose command line names its temporary folder."""
    for index in range(nodes):
        found = subprocess.run(["pgrep", "-f", f"raylet.*--node_manager_port={ports.base + 1 + 6 * index}"],
                               capture_output=True, text=True).stdout.split()
        _end([int(p) for p in found])
    found = subprocess.run(["pgrep", "-f", str(temp)], capture_output=True, text=True).stdout.split()
    _end([int(p) for p in found])


def ray_start(args: list[str], env: dict[str, str], on_failure: Sequence[str], tries: int = 5) -> None:
    """``ray start ARGS``, retried (a failed start's raylet, matched by ``on_failure``
    patterns, is ended first)."""
    for attempt in range(tries):
        done = subprocess.run([RAY, "start", *args], env=env, capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return
        for pattern in on_failure:
            found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
            _end([int(p) for p in found])
        if attempt == tries - 1:
            raise RuntimeError(f"ray start {args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@contextlib.contextmanager
def ray_serve_cluster(ports: RayPorts, workers: int, serve_args: Sequence[str],
                      pythonpath: str) -> Iterator[RayServeProcess]:
    """A head and ``workers`` one-CPU worker nodes, ``workbench ray-serve SERVE_ARGS`` on
    them (``--ray-address`` and ``--proxy-location=HeadOnly`` added); everything ended after."""
    temp = Path(tempfile.mkdtemp(prefix="wbray", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": pythonpath, "RAY_TMPDIR": str(temp)}
    nodes = workers + 1
    try:
        ray_start(["--head", f"--port={ports.base}", "--num-cpus=0", "--include-dashboard=false",
                   f"--ray-client-server-port={ports.base + 28}", f"--dashboard-port={ports.base + 29}",
                   f"--temp-dir={temp}", *ports.node_args(0, nodes)], env, [str(temp)])
        for index in range(1, nodes):
            manager = f"raylet.*--node_manager_port={ports.base + 1 + 6 * index}"
            ray_start([f"--address=127.0.0.1:{ports.base}", "--num-cpus=1", *ports.node_args(index, nodes)],
                      env, [manager])
        serve = RayServeProcess([f"--ray-address=127.0.0.1:{ports.base}", "--proxy-location=HeadOnly",
                                 *serve_args], env=env)
        try:
            yield serve
        finally:
            serve.stop(timeout_s=120)
    finally:
        stop_cluster(temp, ports, nodes)
        shutil.rmtree(temp, ignore_errors=True)


__all__ = ["RayPorts", "ray_serve_cluster", "stop_cluster"]
