"""What `workbench serve` prints on its terminal while models load: no line from a library
that forked the server.

OpenVINO's import sent a usage event from a process it forked on the load thread; the fork in
a process whose gRPC threads run printed grpc-core's "Other threads are currently calling into
gRPC, skipping fork() handlers" (:data:`workbench.frameworks.WITHOUT`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e

FORK_LINE = "skipping fork() handlers"


def test_loading_an_openvino_model_forks_nothing(sample_repository: Path, tmp_path: Path) -> None:
    pytest.importorskip("openvino")
    repo = tmp_path / "repo"
    shutil.copytree(sample_repository / "digits_openvino", repo / "digits_openvino")
    server = ServerProcess([f"--model-repository={repo}"])  # gRPC on, as by default
    try:
        assert server.grpc_port
        server.wait_for_log("successfully loaded 'digits_openvino'")
    finally:
        server.stop()
    assert FORK_LINE not in server.log, server.log
