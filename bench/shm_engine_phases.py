"""Issue 20, target 4: where a 64 MiB shared-memory round trip spends its time, in process (no client, no wire).

``engine.infer`` of the test repository's ONNX ``identity_fp32`` with a 64 MiB FP32 input and output in one
system shared-memory object; the median of ``REPS`` calls, and of the Region.read / Region.write inside them.
``pvm``: the process_vm path (workbench.engine.shm_copy), ``fd``: pread / pwrite forced. Under the lock::

    flock /tmp/bench.lock bash -c 'for m in pvm fd pvm fd; do PYTHONPATH=$PWD .venv/bin/python \
        bench/shm_engine_phases.py $m 9; done'
"""
import asyncio, os, statistics, sys, time, uuid, tempfile
from pathlib import Path
import numpy as np
from workbench import InferenceRequest, RequestedOutput, Server, ServerOptions, tensor_from_shared_memory
from workbench.testing.models import build_test_repository
from workbench.engine import shm_copy, shared_memory

phase = {}
def timed(name, fn):
    def w(*a, **k):
        t = time.perf_counter()
        try: return fn(*a, **k)
        finally: phase.setdefault(name, []).append((time.perf_counter() - t) * 1e3)
    return w
shared_memory.Region.read = timed("read", shared_memory.Region.read)
shared_memory.Region.write = timed("write", shared_memory.Region.write)

async def main(mode):
    shm_copy.USE_PROCESS_VM = mode == "pvm"
    repo = build_test_repository(Path(tempfile.mkdtemp()))
    n = 16 << 20
    data = np.random.default_rng(0).random(n, dtype=np.float32)
    key = f"/wb_e2e_{uuid.uuid4().hex}"
    path = f"/dev/shm/{key[1:]}"
    with open(path, "wb") as f:
        f.write(data.tobytes()); f.write(bytes(data.nbytes))
    async with Server(ServerOptions(model_repository=[str(repo)], allow_client_shm=True)) as engine:
        await engine.shared_memory.register_system_shared_memory("in", key, 0, data.nbytes)
        await engine.shared_memory.register_system_shared_memory("out", key, data.nbytes, data.nbytes)
        req = InferenceRequest("identity_fp32", [tensor_from_shared_memory("INPUT0", "FP32", [1, n], {"shared_memory_region": "in", "shared_memory_byte_size": data.nbytes}, model="identity_fp32")],
            outputs=[RequestedOutput("OUTPUT0", {"shared_memory_region": "out", "shared_memory_byte_size": data.nbytes})])
        ts = []
        for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 9):
            t = time.perf_counter(); await engine.infer(req); ts.append((time.perf_counter() - t) * 1e3)
    out = np.fromfile(path, np.float32, count=n, offset=data.nbytes)
    assert np.array_equal(out, data)
    os.unlink(path)
    print(mode, "infer", f"{statistics.median(ts):.1f}", "read", f"{statistics.median(phase['read']):.1f}", "write", f"{statistics.median(phase['write']):.1f}", "min infer", f"{min(ts):.1f}")
asyncio.run(main(sys.argv[1]))
