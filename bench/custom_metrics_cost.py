"""What one ``pb_utils`` custom-metric call costs a Python model (issue 33, cause 10).

Loads a model whose ``execute`` times N ``counter.increment(1)`` calls, N ``gauge.set``
calls and N empty loop turns inside the stub, and prints the mean per call in microseconds,
plus a whole request's latency with and without one increment (median of R requests).

    PYTHONPATH=. python bench/custom_metrics_cost.py [N] [R]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from workbench import InferenceRequest, Server, ServerOptions, Tensor

MODEL = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # the families are kept: a family's metrics end with it (as in Triton)
        self.families = [pb_utils.MetricFamily("bench_c", "c", pb_utils.MetricFamily.COUNTER),
                         pb_utils.MetricFamily("bench_g", "g", pb_utils.MetricFamily.GAUGE)]
        self.counter, self.gauge = (family.Metric() for family in self.families)

    def execute(self, requests):
        out = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            times = []
            if n > 0:
                for work in (lambda: None, lambda: self.counter.increment(1), lambda: self.gauge.set(2.0)):
                    start = time.perf_counter_ns()
                    for _ in range(n):
                        work()
                    times.append((time.perf_counter_ns() - start) / n / 1000)
            elif n < 0:
                self.counter.increment(1)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("T", np.array(times or [0.0]))]))
        return out
'''
CONFIG = '''name: "metric_cost"
backend: "python"
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "T" data_type: TYPE_FP64 dims: [ -1 ] } ]
'''


def request(n: int) -> InferenceRequest:
    return InferenceRequest("metric_cost", [Tensor("N", "INT32", np.array([n], np.int32))])


async def main(n: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "metric_cost"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(CONFIG)
        (model / "1" / "model.py").write_text(MODEL)
        async with Server(ServerOptions(model_repository=[folder])) as server:
            per_call = (await server.infer(request(n))).outputs[0].data
            print(f"per call, mean of {n}: empty loop {per_call[0]:.2f} us, increment {per_call[1]:.1f} us, "
                  f"set {per_call[2]:.1f} us")
            for label, value in (("request without a metric call", 0), ("request with one increment", -1)):
                latencies = []
                for _ in range(rounds):
                    start = time.perf_counter()
                    await server.infer(request(value))
                    latencies.append((time.perf_counter() - start) * 1e6)
                print(f"{label}: median {statistics.median(latencies):.0f} us over {rounds}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, int(sys.argv[2]) if len(sys.argv) > 2 else 300))
