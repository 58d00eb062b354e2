"""End-to-end tier: the real `workbench serve` process on port 0, real tritonclient."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.http as httpclient

from workbench.testing.process import ServerProcess


@pytest.fixture(scope="module")
def sample_server(sample_repository: Path):
    """`workbench serve` on the sample repository (digits_mlp, minilm_encoder)."""
    process = ServerProcess([f"--model-repository={sample_repository}"])
    yield process
    process.stop()


@pytest.fixture
def triton(sample_server: ServerProcess):
    """The unmodified tritonclient HTTP client pointed at the sample server."""
    client = httpclient.InferenceServerClient(sample_server.url, concurrency=8)
    yield client
    client.close()
