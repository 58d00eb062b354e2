"""The engine on a real 3-node Ray cluster on this machine (issue 37): ``ray start --head``
(no CPUs: Serve's controller and proxies only) plus two ``ray start --address`` workers with
one CPU and a resource of their own each, then ``workbench ray-serve`` (replicas of half a
CPU, 1..3, autoscaled on queue time, the repository in poll mode).

- tritonclient's HTTP (binary tensors), gRPC and gRPC stream answers through Serve's proxies
  equal those of a local ``workbench serve`` of the same repository, errors included;
- a load ramp on a model that queues (``sleeper``: 50 ms per batch) scales 1 -> N -> 1
  replicas with no failed request (a replica removed drains first);
- a new version of add_sub written into the repository while 2-3 replicas run rolls through
  them (poll mode) with no failed request;
- perf_analyzer (the production tier's) measures through the proxies: HTTP, gRPC, gRPC
  ``--streaming``;
- SIGKILL of a worker node that hosts a replica (its raylet, then its agents and workers by
  their ports), under load: only the requests in flight there may fail (each counted, at most
  one per client loop), then all succeed.

Ports: Serve's proxies 19904 (HTTP) / 19905 (gRPC), local serve 19910-19912; Ray's own
20200-20229 and worker ports 20230-20299 (workbench/testing/ray_cluster.py, which says why
a start can fail on a loaded machine and what it does about it).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray", reason="the ray extra (make test-production installs it)")

import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

from workbench.testing.process import RayServeProcess, ServerProcess
from workbench.testing.python_backend import copy_python_model
from workbench.testing.ray_cluster import RayCluster, RayPorts, ray_cluster
from workbench.testing.reload import Tally, add_sub_model_bytes, atomic_write, run_clients, write_add_sub

HTTP, GRPC = 19904, 19905
LOCAL = (19910, 19911, 19912)
PORTS = RayPorts(20200, (20230, 20299))

pytestmark = pytest.mark.production


@pytest.fixture(scope="module")
def repository() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="wb-ray-") as folder:
        repo = Path(folder)
        write_add_sub(repo, instances=1)
        copy_python_model(repo, "sleeper", parameters={"SLEEP_MS": "50"})
        config = repo / "sleeper" / "config.pbtxt"
        config.write_text(config.read_text().replace("max_queue_delay_microseconds: 100000", ""))
        yield repo


@pytest.fixture(scope="module")
def ray_nodes() -> Iterator[RayCluster]:
    with ray_cluster(PORTS, 2, str(Path(__file__).resolve().parents[2])) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def cluster(ray_nodes: RayCluster, repository: Path) -> Iterator[RayServeProcess]:
    """Three Ray nodes and ``workbench ray-serve`` on them; everything stopped after."""
    serve = RayServeProcess([f"--ray-address={ray_nodes.address}",
                             "--proxy-location=HeadOnly", f"--http-port={HTTP}", f"--grpc-port={GRPC}",
                             f"--model-repository={repository}", "--model-control-mode=poll",
                             "--repository-poll-secs=1", "--min-replicas=1", "--max-replicas=3",
                             "--replica-cpus=0.5", "--target-queue-us=10000", "--downscale-delay-s=5",
                             "--exit-timeout-secs=30"], env=ray_nodes.env)
    try:
        yield serve
    finally:
        serve.stop(timeout_s=120)


def replica_pids() -> list[int]:
    """The Serve replica processes of the ``workbench`` deployment (their process title)."""
    out = subprocess.run(["pgrep", "-f", "ServeReplica:workbench:workbench"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def add_sub_inputs(module) -> tuple[list, np.ndarray, np.ndarray]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.0, dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [1, 16], "FP32"), module.InferInput("INPUT1", [1, 16], "FP32")]
    for tensor, data in zip(inputs, (a, b), strict=True):
        if module is httpclient:
            tensor.set_data_from_numpy(data, binary_data=True)
        else:
            tensor.set_data_from_numpy(data)
    return inputs, a + b, a - b


async def answers(http_url: str, grpc_url: str) -> dict[str, object]:
    """What tritonclient gets from one server: metadata, infer outputs over HTTP and gRPC,
    a gRPC stream's answer, and the errors of an unknown model."""
    result: dict[str, object] = {}
    async with httpclient.InferenceServerClient(http_url) as http:
        result["http_meta"] = await http.get_model_metadata("add_sub")
        inputs, _, _ = add_sub_inputs(httpclient)
        response = await http.infer("add_sub", inputs)
        result["http_out"] = [response.as_numpy("OUTPUT0").tolist(), response.as_numpy("OUTPUT1").tolist()]
        try:
            await http.infer("no_such_model", inputs)
        except Exception as exc:  # noqa: BLE001 (the error itself is compared)
            result["http_error"] = str(exc)
    async with grpcclient.InferenceServerClient(grpc_url) as grpc:
        meta = await grpc.get_model_metadata("add_sub", as_json=True)
        result["grpc_meta"] = meta
        inputs, _, _ = add_sub_inputs(grpcclient)
        response = await grpc.infer("add_sub", inputs)
        result["grpc_out"] = [response.as_numpy("OUTPUT0").tolist(), response.as_numpy("OUTPUT1").tolist()]
        try:
            await grpc.infer("no_such_model", inputs)
        except Exception as exc:  # noqa: BLE001
            result["grpc_error"] = str(exc)

        async def requests():
            yield {"model_name": "add_sub", "inputs": inputs}

        async for streamed, error in grpc.stream_infer(requests()):
            assert error is None, error
            result["stream_out"] = [streamed.as_numpy("OUTPUT0").tolist(), streamed.as_numpy("OUTPUT1").tolist()]
            break
    return result


async def test_tritonclient_answers_equal_local_serve(cluster: RayServeProcess, repository: Path) -> None:
    http_port, grpc_port, metrics_port = LOCAL
    local = ServerProcess([f"--model-repository={repository}", f"--http-port={http_port}",
                           f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}"])
    try:
        expected = await answers(f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}")
    finally:
        local.stop()
    got = await answers(f"127.0.0.1:{HTTP}", f"127.0.0.1:{GRPC}")
    assert got == expected
    assert "StatusCode.NOT_FOUND" in str(got["grpc_error"])


async def _send(model: str, tally_check: bool = True):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{HTTP}", conn_limit=64)
    inputs, total, difference = add_sub_inputs(httpclient)

    async def send(_: int) -> None:
        response = await client.infer(model, inputs)
        np.testing.assert_array_equal(response.as_numpy("OUTPUT0"), total)
        np.testing.assert_array_equal(response.as_numpy("OUTPUT1"), difference)

    return client, send


async def test_load_ramp_scales_out_and_back_with_no_failure(cluster: RayServeProcess) -> None:
    client, send = await _send("sleeper")
    stop = asyncio.Event()
    tally = Tally()
    try:
        load = asyncio.ensure_future(run_clients(send, 24, stop, tally))
        await asyncio.to_thread(wait_until, lambda: len(replica_pids()) >= 2, 180, "a second replica")
        peak = len(replica_pids())
        await asyncio.sleep(5)
        peak = max(peak, len(replica_pids()))
        stop.set()
        await load
        stopped = time.monotonic()
        await asyncio.to_thread(wait_until, lambda: len(replica_pids()) == 1, 180, "back to one replica")
        print(f"ramp: peak {peak} replicas, back to 1 in {time.monotonic() - stopped:.0f} s after the load, "
              f"{tally.ok} requests, {tally.failed} failed")
    finally:
        stop.set()
        await client.close()
    assert peak >= 2
    assert tally.failed == 0, tally.errors
    assert tally.ok > 0


async def test_rolling_model_update_with_no_failure(cluster: RayServeProcess, repository: Path) -> None:
    """Version 2 of add_sub written while the deployment is scaled out (a sleeper load holds
    2-3 replicas): every replica loads it at its next poll, none fails a request."""
    sleeper_client, sleeper_send = await _send("sleeper")
    client, send = await _send("add_sub")
    stop = asyncio.Event()
    tally, sleeper_tally = Tally(), Tally()
    try:
        scale_out = asyncio.ensure_future(run_clients(sleeper_send, 24, stop, sleeper_tally))
        await asyncio.to_thread(wait_until, lambda: len(replica_pids()) >= 2, 180, "a second replica")
        load = asyncio.ensure_future(run_clients(send, 4, stop, tally))
        replicas = len(replica_pids())
        atomic_write(repository / "add_sub" / "2" / "model.onnx", add_sub_model_bytes(2))

        async def on_version_2() -> bool:
            stats = await client.get_inference_statistics("add_sub")
            return {s["version"] for s in stats["model_stats"]} == {"2"}

        deadline = time.monotonic() + 120
        in_a_row = 0
        while in_a_row < 20:  # twenty answers in a row (from any replica) serving version 2 only
            in_a_row = in_a_row + 1 if await on_version_2() else 0
            assert time.monotonic() < deadline, "a replica still serves version 1"
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        stop.set()
        await asyncio.gather(load, scale_out)
    finally:
        stop.set()
        await client.close()
        await sleeper_client.close()
    print(f"rolling update over {replicas} replicas: {tally.ok} add_sub requests, {tally.failed} failed; "
          f"{sleeper_tally.ok} sleeper requests, {sleeper_tally.failed} failed")
    assert replicas >= 2
    assert tally.failed == 0 and sleeper_tally.failed == 0, tally.errors + sleeper_tally.errors
    assert tally.ok > 0


def perf_analyzer() -> Path:
    """perf_analyzer of the production tier's Model Analyzer folder (made when missing, as
    tests/production/test_model_analyzer.py does), or skip without libb64."""
    probe = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False)
    if "libb64.so.0d" not in probe.stdout:
        pytest.skip("libb64-0d (perf_analyzer's) not installed (apt-get install libb64-0d)")
    root = Path(__file__).resolve().parents[2]
    folder = Path(os.environ.get("MODEL_ANALYZER_ENV", root / ".venv-production" / "model-analyzer"))
    made = subprocess.run(["bash", str(root / "scripts" / "model_analyzer_env.sh"), str(folder)],
                          capture_output=True, text=True, timeout=1200, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    return folder / "bin" / "perf_analyzer"


@pytest.mark.parametrize(("protocol", "port", "extra"), [("http", HTTP, []), ("grpc", GRPC, []),
                                                          ("grpc", GRPC, ["--streaming"])],
                         ids=["http", "grpc", "grpc-streaming"])
def test_perf_analyzer_against_the_cluster(cluster: RayServeProcess, protocol: str, port: int,
                                           extra: list[str]) -> None:
    """Unmodified perf_analyzer measures add_sub through Serve's proxies (its gRPC
    ``--streaming`` mode over the bidirectional ModelStreamInfer). Its stability bound is
    loose (100 %, up to 10 windows): on 2 shared cores a 50 % bound failed a run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(perf_analyzer()), "-m", "add_sub", "-u", f"127.0.0.1:{port}", "-i", protocol,
                           *extra, "--concurrency-range", "4", "--measurement-interval", "2000", "-r", "10",
                           "-s", "100"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", done.stdout)
    assert throughput is not None and float(throughput.group(1)) > 0, done.stdout[-3000:]
    print(f"perf_analyzer {protocol} {' '.join(extra)}: {throughput.group(1)} infer/s")


async def test_worker_node_killed_only_in_flight_requests_fail(cluster: RayServeProcess,
                                                               ray_nodes: RayCluster) -> None:
    pids = replica_pids()
    assert pids
    parents = subprocess.run(["ps", "-o", "ppid=", "-p", str(pids[0])], capture_output=True, text=True).stdout
    raylet = int(parents.split()[0])
    node = ray_nodes.node_of_raylet(raylet)
    assert node, f"replica {pids[0]}'s parent {raylet} is no worker node's raylet"
    clients = 4
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{GRPC}")
    inputs, total, _ = add_sub_inputs(grpcclient)

    async def send(_: int) -> None:
        response = await grpc.infer("add_sub", inputs, client_timeout=120)
        np.testing.assert_array_equal(response.as_numpy("OUTPUT0"), total)

    stop = asyncio.Event()
    tally = Tally()
    try:
        load = asyncio.ensure_future(run_clients(send, clients, stop, tally))
        await asyncio.sleep(3)
        before, killed_at = tally.ok, tally.failed
        # as a host dies: the raylet and every process on the node's ports (its agents too)
        await asyncio.to_thread(ray_nodes.kill_node, node)
        # Serve replaces the lost replica on the surviving node; requests then succeed again
        await asyncio.to_thread(wait_until, lambda: tally.ok > before + 50, 240, "answers after the kill")
        stop.set()
        await load
    finally:
        stop.set()
        await grpc.close()
    print(f"node {node} killed: {tally.failed - killed_at} failed of {tally.ok + tally.failed} "
          f"(errors: {tally.errors})")
    # only the requests in flight on the killed node may fail: at most one per client loop
    assert tally.failed <= clients, tally.errors
    assert all(re.search(r"UNAVAILABLE|INTERNAL|died|unexpected|Actor", e, re.I) for e in tally.errors), tally.errors
