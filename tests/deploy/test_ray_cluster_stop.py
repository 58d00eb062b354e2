"""The Ray test cluster's ends (workbench/testing/ray_cluster.py), without Ray: plain processes
stand in for a node's. A killed worker node's ``ray::DashboardAgent`` carries neither the
cluster's token nor ``RAY_TMPDIR`` and held its ports for a minute or more, so the next
cluster's start refused them: ``stop`` and ``kill_node`` end the holders of the cluster's ports
too, and wait for them to be free. Ports 19915-19949."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.testing.ray_cluster import RayCluster, RayPorts, check_ports_free, port_holders

PORTS = RayPorts(19915, (19945, 19949))
#: listens on port argv[1], says so, then sleeps (argv[2:]: for its command line only)
LISTENER = """
import socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("listening", flush=True)
time.sleep(600)
"""
#: starts LISTENER (argv[1]) on port argv[2] in a session of its own, without RAY_AUTH_TOKEN
PARENT = """
import os, subprocess, sys, time
env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env, start_new_session=True)
time.sleep(600)
"""


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts: SIGKILLed after it with whatever holds the ports, reaped."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for pid in [p.pid for p in procs] + [p for p in port_holders(PORTS.all()) if p != os.getpid()]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for proc in procs:
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def cluster() -> RayCluster:
    return RayCluster(PORTS, 1, Path("/nonexistent"), {"RAY_AUTH_TOKEN": secrets.token_hex(8)})


def listen(port: int, env: dict[str, str], spawned: list[subprocess.Popen[str]], *extra: str,
           child: bool = False) -> None:
    """A process listening on ``port`` (with ``child``: the child of a process with ``env``,
    started without its token); returns once it listens."""
    args = [PARENT, LISTENER, str(port)] if child else [LISTENER, str(port), *extra]
    proc = subprocess.Popen([sys.executable, "-c", *args], env={**os.environ, **env}, stdout=subprocess.PIPE,
                            text=True)
    spawned.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == "listening\n"


def test_stop_ends_holders_of_its_ports_without_its_token(spawned: list[subprocess.Popen[str]]) -> None:
    ray = cluster()
    # an agent: a child of a process of the cluster, its token dropped; and an unrelated process
    listen(PORTS.base + 2, {"RAY_AUTH_TOKEN": ray.env["RAY_AUTH_TOKEN"]}, spawned, child=True)
    listen(PORTS.workers[1], {}, spawned)
    holders = port_holders(PORTS.all())
    assert sorted(p for held in holders.values() for p in held) == [PORTS.base + 2, PORTS.workers[1]]
    ray.stop(timeout_s=10)
    assert port_holders(PORTS.all()) == {}
    check_ports_free(PORTS)
    for pid in holders:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_kill_node_ends_its_raylet_and_agents_only(spawned: list[subprocess.Popen[str]]) -> None:
    ray = cluster()
    node = PORTS.node(1, 2)
    # a stand-in raylet (found by its command line) on node 1's manager port, its agent on another
    listen(PORTS.node_manager(1), {}, spawned, "raylet", f"--node_manager_port={PORTS.node_manager(1)}")
    listen(node[2], {}, spawned)
    listen(PORTS.base, {}, spawned)  # the head's GCS port: not node 1's
    assert ray.raylet_pid(1) is not None
    ray.kill_node(1, timeout_s=10)
    assert port_holders(node) == {}
    assert list(port_holders(PORTS.all()).values()) == [{PORTS.base}]


def test_stop_names_a_holder_it_cannot_end() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", PORTS.base + 5))
        sock.listen()
        with pytest.raises(RuntimeError, match=rf"ports \[{PORTS.base + 5}\] by pid {os.getpid()} \("):
            cluster().stop(timeout_s=0.5)
