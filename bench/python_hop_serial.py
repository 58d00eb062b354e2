"""The Python backend's hop alone: one model instance driven directly, one execute at a time.

    PYTHONPATH=. .venv/bin/python bench/python_hop_serial.py [--batches 1,8,16] [--seconds 3] [--rounds 3]

Loads the harness's identity model (``../shared/bench/peers/triton_python_identity_model.py`` through
``workbench/testing/python_models/identity``'s config shape: INPUT0 FP32 [-1,64] -> OUTPUT0, max_batch_size 32)
as a :class:`~workbench.backends.python.instance.PythonInstance` (no server, no front end, no scheduler) and calls
``execute`` with B requests of one [1,64] FP32 row each, back to back, for ``--seconds``. Prints per batch size:
executions per second, wall µs per execute, and CPU µs per *request* of this process (the calling thread and the
stub's reader thread) and of the stub process (``/proc``). With ``--tree DIR`` the instance is imported from
another source tree (before/after in one sitting: run twice, alternating, under the benchmark lock).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")
cpu_s = proc_cpu.process_cpu_s

CONFIG = """
name: "identity"
backend: "python"
max_batch_size: 32
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                                                            pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", help="import workbench from this source tree")
    a = ap.parse_args()
    if a.tree:
        sys.path.insert(0, str(Path(a.tree).resolve()))
    import numpy as np

    import workbench
    from workbench.backends.base import BackendRequest, ExecutionTimes, InstanceSpec
    from workbench.backends.python.instance import PythonInstance
    from workbench.config.model_config import parse_model_config
    print(f"workbench from {Path(workbench.__file__).parent}")
    with tempfile.TemporaryDirectory() as folder:
        version = Path(folder) / "identity" / "1"
        version.mkdir(parents=True)
        (version / "model.py").write_text(MODEL)
        (version.parent / "config.pbtxt").write_text(CONFIG)
        config = parse_model_config(CONFIG)
        instance = PythonInstance(config, version, InstanceSpec("identity_0", "identity", "KIND_CPU"), None)
        stub_pid = instance._stub.pid  # type: ignore[union-attr]
        try:
            rows: dict[int, list[tuple[float, float, float]]] = {}
            for _ in range(a.rounds):
                for batch in (int(b) for b in a.batches.split(",")):
                    requests = [BackendRequest({"INPUT0": np.full((1, 64), i, np.float32)}, ["OUTPUT0"])
                                for i in range(batch)]
                    for _ in range(50):
                        instance.execute(requests, ExecutionTimes())
                    count, own0, stub0, t0 = 0, cpu_s(os.getpid()), cpu_s(stub_pid), time.perf_counter()
                    deadline = t0 + a.seconds
                    while time.perf_counter() < deadline:
                        instance.execute(requests, ExecutionTimes())
                        count += 1
                    wall = time.perf_counter() - t0
                    own, stub = cpu_s(os.getpid()) - own0, cpu_s(stub_pid) - stub0
                    rows.setdefault(batch, []).append((wall * 1e6 / count, own * 1e6 / (count * batch),
                                                       stub * 1e6 / (count * batch)))
            print(f"{'batch':>5} {'exec/s':>8} {'wall us/exec':>12} {'server us/req':>13} {'stub us/req':>11}")
            for batch, samples in rows.items():
                wall = statistics.median(s[0] for s in samples)
                print(f"{batch:5d} {1e6 / wall:8.0f} {wall:12.0f} {statistics.median(s[1] for s in samples):13.1f} "
                      f"{statistics.median(s[2] for s in samples):11.1f}")
        finally:
            instance.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
