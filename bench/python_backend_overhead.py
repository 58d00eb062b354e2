"""Round-trip overhead of the Python backend per request, in microseconds, in-process.

    .venv/bin/python bench/python_backend_overhead.py [--requests N] [--large-mb 16]

Runs ``Server.infer`` one request at a time (no concurrency) against two identity models
that share everything except the backend:

* ``inproc``: a backend class in this process whose ``execute`` returns its inputs
  ("calling nothing": the engine's own cost: validation, scheduling, thread hand-off);
* ``python``: a Triton Python model (``workbench/testing/python_models/identity``) in its
  stub process (control message over a Unix socket, tensors inline up to 128 KiB or
  through reusable /dev/shm segments).

for a small tensor (16 x FP32 = 64 B) and a large one (``--large-mb``, FP32). Prints the
median and p90 latency of each and the median difference (the Python backend's overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.backends.base import Backend, BackendResponse, ModelInstance
from workbench.backends.registry import register_backend
from workbench.testing.python_backend import copy_python_model

INPROC_CONFIG = """
name: "inproc"
backend: "inproc_identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


class InprocIdentity(ModelInstance):
    def execute(self, requests, times):
        times.mark_input_done()
        times.mark_infer_done()
        return [BackendResponse({"OUTPUT0": r.inputs["INPUT0"]}) for r in requests]


class InprocBackend(Backend):
    names = ("inproc_identity",)

    def load_instance(self, config, version_dir, spec):
        return InprocIdentity(spec)


async def measure(server: Server, model: str, data: np.ndarray, count: int) -> list[float]:
    request = InferenceRequest(model, [Tensor("INPUT0", "FP32", data)])
    for _ in range(min(20, count)):  # warm up
        await server.infer(request)
    samples = []
    for _ in range(count):
        start = time.perf_counter_ns()
        response = await server.infer(request)
        samples.append((time.perf_counter_ns() - start) / 1000)
        del response
    return samples


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.9)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per small-tensor run")
    parser.add_argument("--large-requests", type=int, default=50, help="requests per large-tensor run")
    parser.add_argument("--large-mb", type=int, default=16)
    args = parser.parse_args()
    register_backend("inproc_identity", InprocBackend)
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        (repo / "inproc" / "1").mkdir(parents=True)
        (repo / "inproc" / "config.pbtxt").write_text(INPROC_CONFIG)
        copy_python_model(repo, "identity", "python")
        async with Server(ServerOptions(model_repository=[str(repo)])) as server:
            small = np.arange(16, dtype=np.float32)
            large = np.random.default_rng(0).random(args.large_mb * 2**20 // 4, dtype=np.float32)
            print(f"{'tensor':>10} {'model':>7} {'median us':>10} {'p90 us':>10}")
            for label, data, count in (("64 B", small, args.requests),
                                       (f"{args.large_mb} MB", large, args.large_requests)):
                medians = {}
                for model in ("inproc", "python"):
                    median, p90 = summary(await measure(server, model, data, count))
                    medians[model] = median
                    print(f"{label:>10} {model:>7} {median:10.1f} {p90:10.1f}")
                print(f"{label:>10} overhead of the Python backend: {medians['python'] - medians['inproc']:.1f} us")


if __name__ == "__main__":
    asyncio.run(main())
