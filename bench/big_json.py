"""What a big JSON infer body costs the server: peak RSS and health-check latency meanwhile.

Starts ``workbench serve`` (the code on PYTHONPATH) on the test repository's ``identity_fp32``
and sends JSON bodies of about ``--mib`` MiB (FP32 values such as ``0.123456``), once alone
and ``--concurrency`` at once, with binary or JSON outputs, while a thread polls
``/v2/health/ready`` on a keep-alive connection. Prints one Markdown table row per scenario:
status codes, peak RSS growth of the server (``VmHWM`` from /proc), RSS left after, and the
slowest health check during the request(s). Not a pass/fail test.

    PYTHONPATH=$PWD python bench/big_json.py --mib 60 --concurrency 8
"""

from __future__ import annotations

import argparse
import concurrent.futures
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from workbench.testing.models import build_test_repository
from workbench.testing.process import ServerProcess, memory_kib, reset_peak_memory


def body(mib: float) -> bytes:
    """A JSON infer body of about ``mib`` MiB for identity_fp32 ([1, n] FP32)."""
    n = int(mib * 2**20 / 9)  # "0.123456," is 9 bytes
    values = ",".join(f"{v:.6f}" for v in np.random.default_rng(0).random(n))
    return (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],"data":[' % n
            + values.encode() + b"]}]}")


class HealthPoller(threading.Thread):
    """Polls /v2/health/ready back to back; ``worst`` is the slowest answer while running."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.worst = 0.0
        self.failures = 0

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(self.url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.failures += not ok
                self.worst = max(self.worst, time.perf_counter() - started)
                time.sleep(0.01)


def scenario(server: ServerProcess, payload: bytes, concurrency: int, binary_out: bool) -> str:
    url = f"http://127.0.0.1:{server.port}"
    headers = {"content-type": "application/json"}
    if binary_out:  # ask for binary outputs through the request parameter
        payload = payload[:-1] + b',"parameters":{"binary_data_output":true}}'
    before = memory_kib(server.process.pid)["VmRSS"]
    reset_peak_memory(server.process.pid)
    poller = HealthPoller(f"{url}/v2/health/ready")
    poller.start()
    started = time.perf_counter()
    with httpx.Client(timeout=600) as client, concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        codes = list(pool.map(lambda _: client.post(f"{url}/v2/models/identity_fp32/infer", content=payload,
                                                     headers=headers).status_code, range(concurrency)))
    took = time.perf_counter() - started
    poller.stop.set()
    poller.join()
    after = memory_kib(server.process.pid)
    return (f"| {len(payload) / 2**20:.0f} MiB x {concurrency} | {'binary' if binary_out else 'JSON'} "
            f"| {','.join(map(str, sorted(set(codes))))} | {took:.2f} s "
            f"| {(after['VmHWM'] - before) / 1024:.0f} MB | {(after['VmRSS'] - before) / 1024:.0f} MB "
            f"| {poller.worst * 1000:.0f} ms | {poller.failures} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("flags", nargs="*", help="extra `workbench serve` flags")
    args = parser.parse_args()
    payload = body(args.mib)
    with tempfile.TemporaryDirectory() as tmp:
        repo = build_test_repository(Path(tmp))
        server = ServerProcess([f"--model-repository={repo}", "--allow-grpc=false", "--allow-metrics=false",
                                "--http-max-input-size=1073741824", *args.flags])
        try:
            print("| body x requests | outputs | status | wall | peak RSS growth | RSS left | "
                  "slowest health check | failed health checks |")
            print("|---|---|---|---|---|---|---|---|")
            print(scenario(server, payload, 1, binary_out=True), flush=True)
            print(scenario(server, payload, 1, binary_out=False), flush=True)
            print(scenario(server, payload, args.concurrency, binary_out=True), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
