"""Replicas behind a real load balancer (issue 21, part 2): three `workbench serve` processes
sharing one model repository behind Debian's nginx, run unprivileged with the config
`workbench deploy` writes (``nginx/nginx.conf``), under continuous HTTP and gRPC load from
tritonclient loops that count every failed request.

- a rolling restart (SIGTERM one replica, wait until it drained and exited, restart it, wait
  until it is ready, then the next) fails no request;
- a rolling model update (version 2 written into the shared repository, replicas in poll mode)
  fails no request, and every replica ends serving version 2;
- SIGKILL of one replica fails only the requests it was running: nginx's access log names the
  replica each request went to, when it started and how long it took, so the requests in
  flight on the killed replica are those sent to it before the kill and answered after it.

Ports 8400-8439 (nginx 8400/8401; replica i: HTTP 8410+10i, gRPC +1, metrics +2).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from workbench.deploy.nginx import NginxSpec, Replica, nginx_config
from workbench.testing.process import ServerProcess
from workbench.testing.reload import add_sub_model_bytes, atomic_write, write_add_sub

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
NGINX_HTTP, NGINX_GRPC = 8400, 8401
REPLICA_PORTS = [(8410 + 10 * i, 8411 + 10 * i, 8412 + 10 * i) for i in range(3)]
CLIENTS = 3  # per protocol

pytestmark = pytest.mark.skipif(not Path(NGINX).exists(),
                                reason="nginx not installed (apt-get install nginx)")


class Replicas:
    """The three `workbench serve` processes; :meth:`start` / :meth:`restart` one by index."""

    def __init__(self, repository: Path, poll: bool) -> None:
        self.repository = repository
        self.poll = poll
        self.processes: list[ServerProcess | None] = [None] * len(REPLICA_PORTS)

    def args(self, index: int) -> list[str]:
        http, grpc, metrics = REPLICA_PORTS[index]
        args = [f"--model-repository={self.repository}", f"--http-port={http}",
                f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--exit-timeout-secs=30"]
        if self.poll:
            args += ["--model-control-mode=poll", "--repository-poll-secs=0.5"]
        return args

    def start(self, index: int) -> ServerProcess:
        process = ServerProcess(self.args(index), timeout_s=120)
        self.processes[index] = process
        wait_ready(REPLICA_PORTS[index][0])
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process is not None:
                process.stop(signal.SIGKILL)


def wait_ready(port: int, timeout_s: float = 60.0) -> None:
    """Until ``/v2/health/ready`` of ``localhost:port`` answers 200."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica on {port} not ready")
        time.sleep(0.1)


def wait_listening(port: int, timeout_s: float = 10.0) -> None:
    """Until ``127.0.0.1:port`` accepts a connection."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {port}") from None
            time.sleep(0.05)


@dataclass
class Nginx:
    """nginx started unprivileged from ``prefix`` with the generated config."""

    prefix: Path
    process: subprocess.Popen = field(init=False)

    def __post_init__(self) -> None:
        spec = NginxSpec(replicas=tuple(Replica("127.0.0.1", h, g) for h, g, _ in REPLICA_PORTS),
                         http_port=NGINX_HTTP, grpc_port=NGINX_GRPC, listen_address="127.0.0.1",
                         worker_processes="1")
        (self.prefix / "tmp").mkdir(parents=True)
        config = nginx_config(spec).replace("worker_processes 1;",
                                            "worker_processes 1;\ndaemon off;").replace(
            "error_log stderr warn;", "error_log stderr info;")
        (self.prefix / "nginx.conf").write_text(config)
        self.process = subprocess.Popen(
            [NGINX, "-p", str(self.prefix), "-c", "nginx.conf", "-e", "stderr"],
            stderr=subprocess.PIPE, text=True)
        try:
            wait_listening(NGINX_HTTP)
            wait_listening(NGINX_GRPC)
        except TimeoutError:
            raise RuntimeError(f"nginx did not start: {self.stop()}") from None

    @property
    def access_log(self) -> list[list[str]]:
        return [line.split("|") for line in (self.prefix / "access.log").read_text().splitlines()]

    def stop(self) -> str:
        self.process.send_signal(signal.SIGQUIT)
        try:
            _, stderr = self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate()
        return stderr


@dataclass
class Outcome:
    """One request through nginx: protocol, start/end (``time.time()``), the version that
    answered, the error (None = answered correctly)."""

    protocol: str
    start: float
    end: float
    version: str
    error: str | None


class Load:
    """``CLIENTS`` HTTP and ``CLIENTS`` gRPC tritonclient loops through nginx, back to back,
    every request checked (OUTPUT0 = INPUT0 + INPUT1) and recorded as an :class:`Outcome`."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _loop(self, protocol: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        module = httpclient if protocol == "http" else grpcclient
        port = NGINX_HTTP if protocol == "http" else NGINX_GRPC
        client = module.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            while not self._stop.is_set():
                a = rng.random((1, 16), dtype=np.float32)
                b = rng.random((1, 16), dtype=np.float32)
                inputs = [module.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_data_from_numpy(b)
                start = time.time()
                try:
                    result = await client.infer("add_sub", inputs)
                    assert np.allclose(result.as_numpy("OUTPUT0"), a + b)
                    version = result.get_response()["model_version"] if protocol == "http" \
                        else result.get_response().model_version
                    self.outcomes.append(Outcome(protocol, start, time.time(), version, None))
                except Exception as exc:  # noqa: BLE001 - every failure is counted
                    self.outcomes.append(Outcome(protocol, start, time.time(), "",
                                                 f"{type(exc).__name__}: {exc}"))
                    await asyncio.sleep(0.01)
        finally:
            await client.close()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(asyncio.wait(
            [asyncio.ensure_future(self._loop(p, i)) for p in ("http", "grpc") for i in range(CLIENTS)]))

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]

    def count(self, protocol: str) -> int:
        return sum(1 for o in self.outcomes if o.protocol == protocol and o.error is None)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    folder = write_add_sub(repo, max_batch_size=8, instances=1)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text() + "version_policy: { latest { num_versions: 1 } }\n")
    return repo


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    balancer = Nginx(tmp_path / "nginx")
    yield balancer
    print("nginx's error log:\n" + balancer.stop()[-3000:])


def run_with_load(replicas: Replicas, steps, settle_s: float = 1.0) -> Load:
    """Start the load, wait until both protocols answered, run ``steps(load)`` (a coroutine
    function), keep the load on ``settle_s`` more, stop it."""

    async def main() -> Load:
        load = Load()
        load.start()
        while load.count("http") < 20 or load.count("grpc") < 20:
            await asyncio.sleep(0.05)
        await steps(load)
        await asyncio.sleep(settle_s)
        await load.stop()
        return load

    return asyncio.run(main())


def routed_to(nginx: Nginx, index: int, since: int) -> bool:
    """Whether nginx's access log, from row ``since`` on, shows replica ``index`` answering
    both an HTTP and a gRPC request (nginx sends it traffic again)."""
    http, grpc, _ = REPLICA_PORTS[index]
    answered = {row[5] for row in nginx.access_log[since:] if row[3] == "200"}
    return {f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"} <= answered


def retried(nginx: Nginx) -> int:
    """Requests nginx passed to more than one replica (``$upstream_addr`` lists them)."""
    return sum(1 for row in nginx.access_log if "," in row[5])


def describe(failures: list[Outcome]) -> str:
    return "\n".join(f"{o.protocol} {o.start:.3f}-{o.end:.3f}: {o.error}" for o in failures[:10])


def test_rolling_restart_fails_no_request(repository: Path, nginx: Nginx) -> None:
    replicas = Replicas(repository, poll=False)
    events: list[tuple[float, str]] = []
    try:
        for index in range(3):
            replicas.start(index)

        async def roll(load: Load) -> None:
            for index in range(3):
                process = replicas.processes[index]
                assert process is not None
                before = len(load.outcomes)
                events.append((time.time(), f"SIGTERM {index}"))
                status = await asyncio.to_thread(process.stop, signal.SIGTERM)
                events.append((time.time(), f"exited {index}"))
                assert status == 0, process.log
                await asyncio.to_thread(replicas.start, index)
                events.append((time.time(), f"ready {index}"))
                since = len(nginx.access_log)
                while not routed_to(nginx, index, since):  # nginx sends it traffic again: next one
                    await asyncio.sleep(0.05)
                while len(load.outcomes) < before + 60:  # traffic meanwhile and after
                    await asyncio.sleep(0.05)

        load = run_with_load(replicas, roll)
    finally:
        replicas.stop_all()
    failures = load.failures()
    print(f"rolling restart: {load.count('http')} HTTP + {load.count('grpc')} gRPC answered, "
          f"{len(failures)} failed; nginx retried {retried(nginx)} on the next replica")
    assert not failures, (f"{len(failures)} failed of {len(load.outcomes)}:\n{describe(failures)}\n"
                          + "\n".join(f"{t:.3f} {e}" for t, e in events))
    assert load.count("http") > 100 and load.count("grpc") > 100
    served = {row[5] for row in nginx.access_log if row[2] == "POST"}
    assert {f"127.0.0.1:{h}" for h, _, _ in REPLICA_PORTS} <= served


def replica_versions(port: int) -> list[str]:
    """The versions of add_sub that the replica on HTTP ``port`` serves (its metadata)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/add_sub", timeout=5) as r:
        return json.loads(r.read())["versions"]


def test_rolling_model_update_fails_no_request(repository: Path, nginx: Nginx) -> None:
    replicas = Replicas(repository, poll=True)
    try:
        for index in range(3):
            replicas.start(index)

        async def update(load: Load) -> None:
            staging = repository / "add_sub" / "staging"  # not a version folder: polls skip it
            atomic_write(staging / "model.onnx", add_sub_model_bytes(2))
            staging.rename(repository / "add_sub" / "2")  # version 2 appears at once, whole
            for process in replicas.processes:
                assert process is not None
                await asyncio.to_thread(process.wait_for_log, r"successfully loaded 'add_sub' version 2",
                                        60.0)
            while not all(replica_versions(h) == ["2"] for h, _, _ in REPLICA_PORTS):
                await asyncio.sleep(0.1)
            switched = len(load.outcomes)
            while len(load.outcomes) < switched + 60:
                await asyncio.sleep(0.05)

        load = run_with_load(replicas, update)
    finally:
        replicas.stop_all()
    failures = load.failures()
    versions = {(o.protocol, o.version) for o in load.outcomes if o.error is None}
    print(f"rolling model update: {load.count('http')} HTTP + {load.count('grpc')} gRPC answered, "
          f"{len(failures)} failed; versions answered {sorted(versions)}")
    assert not failures, f"{len(failures)} failed of {len(load.outcomes)}:\n{describe(failures)}"
    assert {("http", "1"), ("http", "2"), ("grpc", "1"), ("grpc", "2")} <= versions
    last = load.outcomes[-2 * CLIENTS * 3:]  # the last requests: every replica serves version 2
    assert {o.version for o in last} == {"2"}


def test_sigkill_fails_only_the_requests_in_flight(repository: Path, nginx: Nginx) -> None:
    replicas = Replicas(repository, poll=False)
    killed = f"127.0.0.1:{REPLICA_PORTS[1][0]}"
    killed_grpc = f"127.0.0.1:{REPLICA_PORTS[1][1]}"
    kill_time = death_time = 0.0
    try:
        for index in range(3):
            replicas.start(index)

        async def kill(load: Load) -> None:
            nonlocal kill_time, death_time
            process = replicas.processes[1]
            assert process is not None
            kill_time = time.time()
            process.process.kill()
            await asyncio.to_thread(process.process.wait)
            death_time = time.time()  # reaped: its sockets are closed
            after = len(load.outcomes)
            while len(load.outcomes) < after + 200:
                await asyncio.sleep(0.05)

        load = run_with_load(replicas, kill)
    finally:
        replicas.stop_all()
    failures = load.failures()
    # nginx's log: $msec (end) $request_time ... $status ... $upstream_addr (tried replicas)
    rows = [row for row in nginx.access_log if row[2] == "POST"]
    on_killed = [row for row in rows if row[5].split(", ")[-1] in (killed, killed_grpc)]

    def in_flight(row: list[str]) -> bool:
        """Sent to the killed replica before its sockets closed, not answered before the
        kill (nginx's $msec has millisecond resolution: 2 ms of slack)."""
        end, duration = float(row[0]), float(row[1])
        return end - duration - 0.002 <= death_time and end + 0.002 >= kill_time

    flying = [row for row in on_killed if in_flight(row)]
    failed_rows = [row for row in rows if row[3] != "200"]
    print(f"SIGKILL: {len(load.outcomes)} requests, {len(failures)} failed "
          f"({sum(o.protocol == 'http' for o in failures)} HTTP, "
          f"{sum(o.protocol == 'grpc' for o in failures)} gRPC); {len(flying)} were in flight on "
          f"the killed replica (sent before it was reaped {1000 * (death_time - kill_time):.0f} ms "
          f"after SIGKILL, not answered before SIGKILL); nginx retried {retried(nginx)} "
          "on the next replica")
    assert len(failed_rows) == len(failures), describe(failures)
    assert all(row in flying for row in failed_rows), (failed_rows, kill_time)
    assert len(failures) <= 2 * CLIENTS  # one request per client at a time, at most
