"""What `workbench serve` prints on its terminal while models load: no line from a library
that forked the server.

OpenVINO's import sent a usage event from a process it forked on the load thread; the fork in
a process whose gRPC threads run printed grpc-core's "Other threads are currently calling into
gRPC, skipping fork() handlers" (:data:`workbench.common.frameworks.WITHOUT`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e

FORK_LINE = "skipping fork() handlers"


def test_loading_openvino_and_python_models_forks_nothing(sample_repository: Path, tmp_path: Path) -> None:
    """digits_openvino (the fork seen) beside a Python model (its stub is started with
    vfork + exec, which runs no fork handlers)."""
    pytest.importorskip("openvino")
    repo = tmp_path / "repo"
    for model in ("digits_openvino", "postprocessor"):
        shutil.copytree(sample_repository / model, repo / model)
    server = ServerProcess([f"--model-repository={repo}"])  # gRPC on, as by default
    try:
        assert server.grpc_port
        for model in ("digits_openvino", "postprocessor"):
            server.wait_for_log(f"successfully loaded '{model}'")
    finally:
        server.stop()
    assert FORK_LINE not in server.log, server.log
