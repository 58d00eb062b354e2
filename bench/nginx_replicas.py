"""Throughput through nginx with 1, 2 and 3 `workbench serve` replicas (issue 21, part 2).

    flock /tmp/bench.lock .venv/bin/python bench/nginx_replicas.py [--seconds 5] [--concurrency 8]

Each replica serves the add_sub test model (FP32 [1,16] x2, one instance) from one shared
temporary repository; nginx runs the config `workbench deploy` writes (one worker), on ports
8400/8401; perf_analyzer (PERF_ANALYZER, default /tmp/bench_bin/perf_analyzer, see
../shared/bench/setup.sh) drives HTTP then gRPC at one concurrency, first against one replica
direct (no nginx), then through nginx. Prints one line per
(replicas, protocol): infer/s and p99 (µs) as perf_analyzer reports them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.deploy.nginx import NginxSpec, Replica, nginx_config
from workbench.testing.process import ServerProcess
from workbench.testing.reload import write_add_sub

PERF_ANALYZER = os.environ.get("PERF_ANALYZER", "/tmp/bench_bin/perf_analyzer")
PORTS = [(8410 + 10 * i, 8411 + 10 * i, 8412 + 10 * i) for i in range(3)]


def measure(protocol: str, seconds: float, concurrency: int, port: int | None = None) -> tuple[float, float]:
    """perf_analyzer's infer/s and p99 (µs) against nginx (or ``port``, a replica direct)."""
    port = port or (8400 if protocol == "http" else 8401)
    result = subprocess.run(
        [PERF_ANALYZER, "-m", "add_sub", "-u", f"127.0.0.1:{port}", "-i", protocol,
         "--concurrency-range", str(concurrency), "--measurement-interval", str(int(seconds * 1000)),
         "-r", "5", "-s", "100"],
        capture_output=True, text=True, timeout=300)
    text = result.stdout
    throughput = re.search(r"Throughput: ([\d.]+) infer/sec", text)
    p99 = re.search(r"p99 latency: (\d+) usec", text)
    if result.returncode != 0 or throughput is None or p99 is None:
        raise RuntimeError(f"perf_analyzer failed:\n{text}\n{result.stderr}")
    return float(throughput.group(1)), float(p99.group(1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "models"
        write_add_sub(repo, instances=1)
        direct = ServerProcess([f"--model-repository={repo}", *(f"--{f}-port={p}" for f, p in
                                                             zip(("http", "grpc", "metrics"), PORTS[0], strict=True))])
        try:
            for protocol, port in (("http", PORTS[0][0]), ("grpc", PORTS[0][1])):
                throughput, p99 = measure(protocol, args.seconds, args.concurrency, port)
                print(f"direct     {protocol:4} c={args.concurrency}: {throughput:8.0f} infer/s"
                      f"  p99 {p99 / 1000:6.2f} ms", flush=True)
        finally:
            direct.stop()
        for count in (1, 2, 3):
            replicas = [ServerProcess([f"--model-repository={repo}", f"--http-port={h}",
                                       f"--grpc-port={g}", f"--metrics-port={m}"])
                        for h, g, m in PORTS[:count]]
            prefix = Path(tmp) / f"nginx{count}"
            (prefix / "tmp").mkdir(parents=True)
            spec = NginxSpec(replicas=tuple(Replica("127.0.0.1", h, g) for h, g, _ in PORTS[:count]),
                             http_port=8400, grpc_port=8401, listen_address="127.0.0.1",
                             worker_processes="1")
            (prefix / "nginx.conf").write_text(nginx_config(spec))
            subprocess.run(["nginx", "-p", str(prefix), "-c", "nginx.conf", "-e", "stderr"], check=True)
            time.sleep(0.5)
            try:
                for protocol in ("http", "grpc"):
                    throughput, p99 = measure(protocol, args.seconds, args.concurrency)
                    print(f"replicas={count} {protocol:4} c={args.concurrency}: {throughput:8.0f} infer/s"
                          f"  p99 {p99 / 1000:6.2f} ms", flush=True)
            finally:
                pid = int((prefix / "nginx.pid").read_text())
                os.kill(pid, signal.SIGQUIT)
                for replica in replicas:
                    replica.stop()
                time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
