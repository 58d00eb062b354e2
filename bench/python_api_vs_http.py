"""Triton's in-process Python API (``workbench.tritonserver``) next to the v2 HTTP route, on the
same model, the same machine, one run.

In-process: ``CONCURRENCY`` threads each call ``model.infer(inputs=...)`` and read its response
in a closed loop (the next request when the previous one is answered), the engine in this
process. HTTP: the same closed loop with ``tritonclient.http`` (binary tensors) against a
``workbench serve`` process on the same repository. Each figure is the median of ``--rounds``
rounds of ``--seconds`` after a warm-up round; reported: inferences/s and the median
latency in microseconds.

    .venv/bin/python bench/python_api_vs_http.py [--repository sample_models/repository]
        [--model digits_mlp] [--concurrency 1 8] [--seconds 4] [--rounds 3]

Results: bench/RESULTS.md, "Issue 36: Triton's in-process Python API next to HTTP v2".
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

from workbench import tritonserver

Call = Callable[[], object]


def closed_loop(make_call: Callable[[], Call], concurrency: int, seconds: float) -> tuple[float, float]:
    """(inferences/s, median latency in us) of ``concurrency`` threads calling in a loop."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    calls = [make_call() for _ in range(concurrency)]
    until = time.monotonic() + seconds

    def worker(index: int) -> None:
        call, mine = calls[index], latencies[index]
        while time.monotonic() < until:
            started = time.perf_counter()
            call()
            mine.append(time.perf_counter() - started)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    every = [x for mine in latencies for x in mine]
    return len(every) / wall, 1e6 * statistics.median(every)


def rounds(make_call: Callable[[], Call], concurrency: int, seconds: float, count: int) -> tuple[float, float]:
    closed_loop(make_call, concurrency, 1.0)  # warm-up
    results = [closed_loop(make_call, concurrency, seconds) for _ in range(count)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(repository: str, model: str, port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "workbench"), "serve", "--model-repository", repository,
         "--model-control-mode", "explicit", "--load-model", model, "--http-address", "127.0.0.1",
         "--http-port", str(port), "--allow-grpc", "false", "--allow-metrics", "false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("workbench serve did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", default="sample_models/repository")
    parser.add_argument("--model", default="digits_mlp")
    parser.add_argument("--input", default="pixels")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = np.random.default_rng(0).random((1, args.width), dtype=np.float32) * 16
    rows = []

    server = tritonserver.Server(model_repository=args.repository,
                                 model_control_mode=tritonserver.ModelControlMode.EXPLICIT)
    server.start(wait_until_ready=True)
    model = server.load(args.model)

    def in_process() -> Call:
        return lambda: [np.from_dlpack(next(iter(r.outputs.values()))) for r in model.infer(
            inputs={args.input: data})]

    for concurrency in args.concurrency:
        rows.append(("in-process API", concurrency, *rounds(in_process, concurrency, args.seconds, args.rounds)))
    server.stop()

    import tritonclient.http as httpclient

    port = free_port()
    process = serve(args.repository, args.model, port)
    try:
        def over_http() -> Call:
            client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
            tensor = httpclient.InferInput(args.input, list(data.shape), "FP32")
            tensor.set_data_from_numpy(data, binary_data=True)
            return lambda: client.infer(args.model, [tensor]).as_numpy
        for concurrency in args.concurrency:
            rows.append(("HTTP v2 (tritonclient)", concurrency,
                         *rounds(over_http, concurrency, args.seconds, args.rounds)))
    finally:
        process.terminate()
        process.wait(60)

    print(f"model {args.model}, batch 1, {args.rounds} rounds x {args.seconds:g} s, medians")
    print(f"{'path':<24} {'c':>3} {'infer/s':>9} {'p50 us':>8}")
    for path, concurrency, rate, p50 in rows:
        print(f"{path:<24} {concurrency:>3} {rate:>9.0f} {p50:>8.0f}")


if __name__ == "__main__":
    main()
