"""What Ray Serve adds per request over `workbench serve` (issue 37): digits_mlp, HTTP
binary tensors, a fixed concurrency, alternating rounds.

    flock /tmp/bench.lock .venv/bin/python bench/ray_overhead.py [--rounds 3] [--seconds 8] [--concurrency 8]

One `workbench serve` (ports 19710-19712) and one single-node Ray cluster (`ray start --head`,
Ray's ports 19750-19759 and 20200-20299) running `workbench ray-serve` with one replica
(Serve's HTTP proxy on 19700) serve the same repository (sample_models/repository/digits_mlp,
copied). Each round measures each side for --seconds with --concurrency tritonclient.http.aio
loops: infer/s, and CPU µs per inference of all the side's processes (/proc utime+stime of the
server, or of every process of the Ray session: GCS, raylet, agents, Serve's controller,
proxy and replica, their threads included), the client excluded. Prints one line per round and
side, then the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.http.aio as httpclient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.testing.process import RayServeProcess, ServerProcess  # noqa: E402

RAY = str(Path(sys.executable).with_name("ray"))
MODEL = ROOT / "sample_models" / "repository" / "digits_mlp"


TICK = os.sysconf("SC_CLK_TCK")


def proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, utime + stime in seconds) of every process, from /proc/PID/stat."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    return table


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` and all their descendants (all threads), seconds."""
    table = proc_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    seen: set[int] = set()
    stack = list(pids)
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in table:
            continue
        seen.add(pid)
        stack.extend(children.get(pid, []))
    return sum(table[pid][1] for pid in seen)


async def measure(port: int, seconds: float, concurrency: int, pids: list[int]) -> tuple[float, float]:
    """infer/s and CPU µs per inference of ``pids`` over ``seconds`` of load."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", conn_limit=concurrency)
    data = np.random.rand(1, 64).astype(np.float32)
    tensor = httpclient.InferInput("pixels", [1, 64], "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    count = 0
    stop = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal count
        while time.monotonic() < stop:
            await client.infer("digits_mlp", [tensor])
            count += 1

    try:
        await asyncio.gather(*(client.infer("digits_mlp", [tensor]) for _ in range(concurrency)))  # warm
        before, started = cpu_seconds(pids), time.monotonic()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        elapsed, used = time.monotonic() - started, cpu_seconds(pids) - before
    finally:
        await client.close()
    return count / elapsed, used / count * 1e6


def ray_session_pids(temp: Path) -> list[int]:
    """The Ray session's daemons (their command lines name ``temp``); workers are their children."""
    out = subprocess.run(["pgrep", "-f", str(temp)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="wbrayb", dir="/tmp"))
    repo = temp / "models"
    shutil.copytree(MODEL, repo / "digits_mlp")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": str(temp)}
    serve = ServerProcess([f"--model-repository={repo}", "--http-port=19710", "--grpc-port=19711",
                           "--metrics-port=19712"])
    ray_proc = None
    try:
        for _ in range(5):
            started = subprocess.run([RAY, "start", "--head", "--port=19750", "--num-cpus=2",
                                      "--include-dashboard=false", f"--temp-dir={temp}", "--node-manager-port=19751",
                                      "--object-manager-port=19752", "--dashboard-agent-listen-port=19753",
                                      "--dashboard-agent-grpc-port=19754", "--metrics-export-port=19755",
                                      "--runtime-env-agent-port=19756", "--ray-client-server-port=19759",
                                      "--dashboard-port=19757",
                                      "--min-worker-port=20200", "--max-worker-port=20299",
                                      "--node-ip-address=127.0.0.1", "--disable-usage-stats"],
                                     env=env, capture_output=True, text=True, timeout=300)
            if started.returncode == 0:
                break
            kill(ray_session_pids(temp))
        else:
            raise RuntimeError("ray start failed 5 times")
        ray_proc = RayServeProcess(["--ray-address=127.0.0.1:19750", "--http-port=19700", "--grpc-port=19701",
                                    f"--model-repository={repo}", "--replica-cpus=1"], env=env)
        results: dict[str, list[tuple[float, float]]] = {"serve": [], "ray": []}
        for index in range(args.rounds):
            for side, port, pids in (("serve", 19710, [serve.process.pid]),
                                     ("ray", 19700, ray_session_pids(temp))):
                rate, cpu_us = asyncio.run(measure(port, args.seconds, args.concurrency, pids))
                results[side].append((rate, cpu_us))
                print(f"round {index + 1} {side:5s} {rate:8.0f} infer/s {cpu_us:8.0f} CPU µs/inference", flush=True)
        for side, rows in results.items():
            print(f"median {side:5s} {statistics.median(r for r, _ in rows):8.0f} infer/s "
                  f"{statistics.median(c for _, c in rows):8.0f} CPU µs/inference")
        print(f"load average {os.getloadavg()}")
    finally:
        serve.stop()
        if ray_proc is not None:
            ray_proc.stop(timeout_s=120)
        kill(ray_session_pids(temp))
        shutil.rmtree(temp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
