"""Peak RSS of `workbench serve` answering one HTTP infer request whose binary tensor is SIZE
bytes (identity_fp32 of the test repository, output as binary data).

    PYTHONPATH=<checkout> python bench/http_binary_rss.py SCRATCH_DIR SIZE

Prints VmHWM / VmRSS before and after, the answer (or the refusal) and the exit status.
Results: bench/RESULTS.md, "HTTP binary tensors over --http-max-input-size".
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from workbench.testing.models import build_test_repository
from workbench.testing.process import ServerProcess


def memory(pid: int) -> str:
    with open(f"/proc/{pid}/status") as status:
        return " ".join(line.split(":")[0] + "=" + line.split()[1] + "kB" for line in status
                        if line.startswith(("VmHWM", "VmRSS")))


def main(scratch: Path, size: int) -> None:
    repo = build_test_repository(scratch)
    server = ServerProcess([f"--model-repository={repo}", "--allow-grpc=false", "--allow-metrics=false"])
    print("before:", memory(server.process.pid))
    data = np.zeros((1, size // 4), np.float32)
    client = httpclient.InferenceServerClient(server.url, network_timeout=600, connection_timeout=600)
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    start = time.monotonic()
    try:
        result = client.infer("identity_fp32", [tensor],
                              outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
        print("answered", result.as_numpy("OUTPUT0").shape, f"in {time.monotonic() - start:.1f} s")
    except Exception as exc:  # noqa: BLE001  # the refusal is the figure
        print("refused:", str(exc)[:200])
    print("after:", memory(server.process.pid))
    client.close()
    print("exit status", server.stop(signal.SIGTERM))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
