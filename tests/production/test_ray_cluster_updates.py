"""Model updates across a real Ray cluster in explicit mode (issue 37): the repository and
rollout APIs sent to the cluster's ingress apply to every replica (docs/ray.md, "Model
updates across the cluster").

A head (no CPUs) and two one-CPU worker nodes; ``workbench ray-serve`` with two replicas of
one CPU (one per worker node), ``--model-control-mode=explicit``, nothing loaded at start.

- a load through the ingress loads on both replicas (``GET /v2/cluster/replicas``); a bad
  load's error names the replicas;
- a 1:1 split set through the ingress: over N requests both versions answer, and each
  replica serves both (before, the split reached the one replica that took the request);
- a new version loaded through the ingress under load: zero failed requests, then every
  replica serves it;
- a replica killed is replaced by one that replays the cluster's state (the models loaded
  through the ingress and the rollout).

Ports: Serve's proxies 19900 (HTTP) / 19901 (gRPC); Ray's 20200-20229, workers 20230-20299.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("ray", reason="the ray extra (make test-production installs it)")

import tritonclient.http.aio as httpclient

from workbench.testing.process import RayServeProcess
from workbench.testing.ray_cluster import RayPorts, ray_serve_cluster
from workbench.testing.reload import Tally, add_sub_config, add_sub_model_bytes, atomic_write, run_clients

HTTP, GRPC = 19900, 19901
URL = f"http://127.0.0.1:{HTTP}"
PORTS = RayPorts(20200, (20230, 20299))

pytestmark = pytest.mark.production


@pytest.fixture(scope="module")
def repository() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="wb-ray-") as folder:
        repo = Path(folder)
        atomic_write(repo / "add_sub" / "config.pbtxt",
                     add_sub_config("add_sub", 8, 1) + "version_policy: { all {} }\n")
        for version in (1, 2):
            atomic_write(repo / "add_sub" / str(version) / "model.onnx", add_sub_model_bytes(version))
        yield repo


@pytest.fixture(scope="module")
def cluster(repository: Path) -> Iterator[RayServeProcess]:
    root = str(Path(__file__).resolve().parents[2])
    with ray_serve_cluster(PORTS, 2, [f"--http-port={HTTP}", f"--grpc-port={GRPC}",
                                      f"--model-repository={repository}", "--model-control-mode=explicit",
                                      "--min-replicas=2", "--replica-cpus=1", "--exit-timeout-secs=30"],
                           root) as serve:
        yield serve


def replicas() -> list[dict]:
    """``GET /v2/cluster/replicas``: each replica's id and model statistics."""
    response = httpx.get(f"{URL}/v2/cluster/replicas", timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["replicas"]


def successes(row: dict, model: str = "add_sub") -> dict[str, int]:
    """version -> successful requests of ``model`` on one replica's row."""
    return {s["version"]: s["inference_stats"]["success"]["count"] for s in row["stats"]["model_stats"]
            if s["name"] == model}


def inputs() -> list:
    tensors = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32), binary_data=True)
    return tensors


def test_load_applies_on_every_replica_and_errors_name_them(cluster: RayServeProcess) -> None:
    response = httpx.post(f"{URL}/v2/repository/models/add_sub/load", timeout=300)
    assert response.status_code == 200, response.text
    rows = replicas()
    assert len(rows) == 2, rows
    for row in rows:
        assert row["status"] == 200 and set(successes(row)) == {"1", "2"}, row
    bad = httpx.post(f"{URL}/v2/repository/models/no_such_model/load", timeout=300)
    assert bad.status_code == 400, bad.text
    for row in rows:
        assert f"replica {row['replica']}:" in bad.json()["error"], bad.text


async def test_split_set_through_the_ingress_is_cluster_wide(cluster: RayServeProcess) -> None:
    httpx.post(f"{URL}/v2/repository/models/add_sub/load", timeout=300).raise_for_status()
    before = {row["replica"]: successes(row) for row in replicas()}
    response = httpx.post(f"{URL}/v2/models/add_sub/rollout", json={"weights": {"1": 50, "2": 50}}, timeout=60)
    assert response.status_code == 200, response.text
    versions: collections.Counter[str] = collections.Counter()
    async with httpclient.InferenceServerClient(f"127.0.0.1:{HTTP}", conn_limit=16) as client:
        async def one(_: int) -> None:
            result = await client.infer("add_sub", inputs())
            versions[result.get_response()["model_version"]] += 1

        for _ in range(25):
            await asyncio.gather(*(one(i) for i in range(8)))
    after = {row["replica"]: successes(row) for row in replicas()}
    print(f"1:1 split over 200 requests: {dict(versions)}; per replica: "
          f"{ {r: {v: after[r][v] - before[r].get(v, 0) for v in after[r]} for r in after} }")
    assert set(versions) == {"1", "2"} and min(versions.values()) >= 50, versions
    for replica, counts in after.items():  # each replica splits: both versions served by both
        served = {v for v, n in counts.items() if n > before[replica].get(v, 0)}
        assert served == {"1", "2"}, (replica, counts, before[replica])
    assert httpx.delete(f"{URL}/v2/models/add_sub/rollout", timeout=60).status_code == 200


async def test_load_broadcast_rolls_a_new_version_with_no_failure(cluster: RayServeProcess,
                                                                   repository: Path) -> None:
    httpx.post(f"{URL}/v2/repository/models/add_sub/load", timeout=300).raise_for_status()
    httpx.delete(f"{URL}/v2/models/add_sub/rollout", timeout=60).raise_for_status()
    client = httpclient.InferenceServerClient(f"127.0.0.1:{HTTP}", conn_limit=16)
    seen: collections.Counter[str] = collections.Counter()

    async def send(_: int) -> None:
        result = await client.infer("add_sub", inputs())
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2.0, np.float32))
        seen[result.get_response()["model_version"]] += 1

    stop = asyncio.Event()
    tally = Tally()
    try:
        load = asyncio.ensure_future(run_clients(send, 4, stop, tally))
        while tally.ok < 20:
            await asyncio.sleep(0.1)
        atomic_write(repository / "add_sub" / "3" / "model.onnx", add_sub_model_bytes(3))
        async with httpx.AsyncClient(timeout=300) as control:
            response = await control.post(f"{URL}/v2/repository/models/add_sub/load")
        assert response.status_code == 200, response.text
        loaded = tally.ok
        seen.clear()
        while tally.ok < loaded + 100:
            await asyncio.sleep(0.1)
        stop.set()
        await load
    finally:
        stop.set()
        await client.close()
    print(f"load broadcast of version 3 under load: {tally.ok} requests, {tally.failed} failed; "
          f"after the load answered: {dict(seen)}")
    assert tally.failed == 0, tally.errors
    assert set(seen) == {"3"}, seen  # every replica serves the new version once the load answers
    for row in replicas():
        assert "3" in successes(row), row


def test_a_new_replica_takes_the_cluster_state(cluster: RayServeProcess) -> None:
    httpx.post(f"{URL}/v2/repository/models/add_sub/load", timeout=300).raise_for_status()
    httpx.post(f"{URL}/v2/models/add_sub/rollout", json={"weights": {"1": 50, "3": 50}},
               timeout=60).raise_for_status()
    old = {row["replica"] for row in replicas()}
    victim = int(subprocess.run(["pgrep", "-f", "ServeReplica:workbench:workbench"], capture_output=True,
                                text=True).stdout.split()[0])
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 240
    while True:
        rows = [row for row in replicas() if row["status"] == 200]
        new = [row for row in rows if row["replica"] not in old]
        if new and len(rows) == 2:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(1)
    rollout = httpx.get(f"{URL}/v2/models/add_sub/rollout", timeout=60)  # any replica: the same rollout
    assert rollout.status_code == 200, rollout.text
    assert set(successes(new[0])) >= {"1", "2", "3"}, new[0]
    for _ in range(10):
        body = httpx.get(f"{URL}/v2/models/add_sub/rollout", timeout=60).json()
        assert body["rollout"] is not None and set(body["rollout"]["weights"]) == {"1", "3"}, body
