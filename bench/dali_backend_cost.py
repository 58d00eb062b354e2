"""The dali backend's own cost per execution: ``DaliInstance.execute`` on 1 or 16 requests
against the same pipeline's ``feed_input`` + ``run`` + output arrays directly, alternating,
1.5 s each, two rounds (bench/RESULTS.md, "Issue 22: DALI").

    PYTHONPATH=. .venv/bin/python bench/dali_backend_cost.py [SAMPLE_REPOSITORY]
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from nvidia.dali.pipeline import Pipeline
from PIL import Image
from sklearn.datasets import load_digits
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import BackendRequest, ExecutionTimes, InstanceSpec
from workbench.backends.dali import DaliInstance


def jpeg(pixels: np.ndarray) -> np.ndarray:
    gray = np.clip(np.round(pixels.reshape(8, 8) * 255 / 16), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(gray, mode="L").resize((32, 32), Image.Resampling.NEAREST).save(
        buffer, format="JPEG", quality=90)
    return np.frombuffer(buffer.getvalue(), np.uint8).reshape(1, -1)


def main() -> None:
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else "sample_models/repository") / "digits_jpeg_preprocess"
    config = text_format.Parse((repo / "config.pbtxt").read_text(), ModelConfig())
    instance = DaliInstance(config, repo / "1", InstanceSpec("bench_0", "bench", "KIND_CPU"))
    jpegs = [jpeg(row) for row in load_digits().data[:16]]
    pipe = Pipeline.deserialize(filename=str(repo / "1" / "model.dali"), batch_size=64, num_threads=1,
                                device_id=None, exec_async=False, exec_pipelined=False,
                                prefetch_queue_depth=1)
    pipe.build()

    def direct(batch: int) -> None:
        pipe.feed_input("IMAGE", [jpegs[i % 16][0] for i in range(batch)])
        (out,) = pipe.run()
        [np.array(out[i]) for i in range(batch)]

    for round_ in range(2):
        for batch in (1, 16):
            requests = [BackendRequest({"IMAGE": jpegs[i % 16]}, ["PIXELS"]) for i in range(batch)]
            runs = (("DALI directly", lambda b=batch: direct(b)),
                    ("DaliInstance.execute",
                     lambda r=requests: instance.execute(r, ExecutionTimes())))
            for name, run in runs:
                for _ in range(50):
                    run()
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < 1.5:
                    run()
                    n += 1
                print(f"round {round_} batch {batch:2d} {name:22s} "
                      f"{(time.perf_counter() - start) / n * 1000:.3f} ms")


if __name__ == "__main__":
    main()
