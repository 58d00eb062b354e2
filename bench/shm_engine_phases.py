"""Issue 20, target 4: where a 64 MiB shared-memory round trip spends its time, in process (no client, no wire).

``engine.infer`` of the test repository's ONNX ``identity_fp32`` with a 64 MiB FP32 input and output in one
system shared-memory object; the median of ``REPS`` calls, and of the Region.read / Region.write inside them.
``pvm``: the process_vm path (workbench.engine.shm.shm_copy), ``fd``: pread / pwrite forced. Under the lock::

    flock /tmp/bench.lock bash -c 'for m in pvm fd pvm fd; do PYTHONPATH=$PWD .venv/bin/python \
        bench/shm_engine_phases.py $m 9; done'
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from workbench import InferenceRequest, RequestedOutput, Server, ServerOptions, tensor_from_shared_memory
from workbench.engine.shm import shared_memory, shm_copy
from workbench.testing.models import build_test_repository

PHASES: dict[str, list[float]] = {}


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with each call's duration (ms) appended to ``PHASES[name]``."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES.setdefault(name, []).append((time.perf_counter() - start) * 1e3)
    return wrapper


async def main(mode: str, reps: int) -> None:
    shared_memory.Region.read = timed("read", shared_memory.Region.read)  # type: ignore[method-assign]
    shared_memory.Region.write = timed("write", shared_memory.Region.write)  # type: ignore[method-assign]
    if mode == "fd":
        shm_copy.USE_PROCESS_VM = False
    repo = Path(tempfile.mkdtemp()) / "repo"
    build_test_repository(repo)
    n = 16 << 20
    data = np.random.default_rng(0).random(n, dtype=np.float32)
    key = f"/wb_phase_{uuid.uuid4().hex}"
    path = f"/dev/shm/{key[1:]}"
    with open(path, "wb") as f:
        f.write(data.tobytes())
        f.write(bytes(data.nbytes))
    shm_in = {"shared_memory_region": "in", "shared_memory_byte_size": data.nbytes}
    shm_out = {"shared_memory_region": "out", "shared_memory_byte_size": data.nbytes}
    async with Server(ServerOptions(model_repository=[str(repo)], allow_client_shm=True)) as engine:
        await engine.shared_memory.register_system_shared_memory("in", key, 0, data.nbytes)
        await engine.shared_memory.register_system_shared_memory("out", key, data.nbytes, data.nbytes)
        request = InferenceRequest(
            "identity_fp32", [tensor_from_shared_memory("INPUT0", "FP32", [1, n], shm_in, model="identity_fp32")],
            outputs=[RequestedOutput("OUTPUT0", shm_out)])
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            await engine.infer(request)
            times.append((time.perf_counter() - start) * 1e3)
    out = np.fromfile(path, np.float32, count=n, offset=data.nbytes)
    assert np.array_equal(out, data)
    os.unlink(path)
    print(mode, "infer ms", f"{statistics.median(times):.1f}", "read", f"{statistics.median(PHASES['read']):.1f}",
          "write", f"{statistics.median(PHASES['write']):.1f}", "min infer", f"{min(times):.1f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 9))
