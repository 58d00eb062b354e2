"""The attach tests' shared parts: a Triton-style python ``add_sub`` model repository (Triton's
tutorial model, with dynamic batching: it runs on ``workbench serve`` and on a real
``tritonserver`` alike), the flags both servers get, and traffic over HTTP."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from workbench.testing.process import ServerProcess, TritonProcess

#: the tritonserver venv (``scripts/triton_venv.sh`` makes it; ``make test-attach-triton`` runs it)
TRITON_VENV = Path(os.environ.get("WORKBENCH_TRITON_VENV", Path.home() / ".cache/workbench/triton-2.51"))
#: the servers the attach tests run against
KINDS = ("workbench", "triton")
#: the ``model-repository`` API is restricted to this header (Triton's ``--http-restricted-api``)
ADMIN_HEADER = {"admin-key": "s3cret"}

ADD_SUB_CONFIG = """name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ADD_SUB_MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's add_sub tutorial)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32))]))
        return responses
'''


def write_python_add_sub(repo: Path) -> Path:
    """``repo/add_sub`` (version 1) as above; returns the repository."""
    folder = repo / "add_sub"
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(ADD_SUB_CONFIG)
    (folder / "1" / "model.py").write_text(ADD_SUB_MODEL)
    return repo


def server_flags(repo: Path) -> list[str]:
    """The flags of the attached server (workbench serve and tritonserver take the same):
    explicit model control with add_sub loaded, the repository API behind
    :data:`ADMIN_HEADER`, latency summaries on ``/metrics``."""
    name, value = next(iter(ADMIN_HEADER.items()))
    return [f"--model-repository={repo}", "--model-control-mode=explicit", "--load-model=add_sub",
            f"--http-restricted-api=model-repository:{name}={value}",
            "--metrics-config=summary_latencies=true"]


def triton_missing() -> str | None:
    """Why the real tritonserver cannot run here (its venv is not made), or None."""
    if (TRITON_VENV / ".workbench_ok").is_file():
        return None
    return (f"no tritonserver venv at {TRITON_VENV}: `make test-attach-triton` makes it (pip from PyPI) "
            "and runs the attach tests against the real tritonserver 2.51")


def start_server(kind: str, flags: list[str]) -> ServerProcess | TritonProcess:
    """``workbench serve`` or the real ``tritonserver`` (``kind``: one of :data:`KINDS`) with
    ``flags``, on free ports.

    Raises:
        RuntimeError: it did not start (its log in the message).
    """
    return TritonProcess(TRITON_VENV, flags) if kind == "triton" else ServerProcess(flags)


async def send_add_sub(url: str, count: int) -> None:
    """``count`` add_sub requests (batch 1) to ``url`` (``http://host:port``).

    Raises:
        AssertionError: a request failed (its answer in the message).
    """
    body = {"inputs": [{"name": name, "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}
                       for name in ("INPUT0", "INPUT1")]}
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(count):
            response = await client.post(f"{url}/v2/models/add_sub/infer", json=body)
            assert response.status_code == 200, response.text


__all__ = ["ADD_SUB_CONFIG", "ADD_SUB_MODEL", "ADMIN_HEADER", "KINDS", "TRITON_VENV", "send_add_sub",
           "server_flags", "start_server", "triton_missing", "write_python_add_sub"]
