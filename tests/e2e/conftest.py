"""End-to-end tier: the real `workbench serve` process on port 0, real tritonclient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from workbench.testing.process import ServerProcess


@pytest.fixture(scope="session")
def shared_sample_server(sample_repository: Path):
    """One `workbench serve` on the sample repository for the whole session (booting it takes
    10-35 s). Shared only by modules that read: inference, metadata, statistics compared with
    ``>=``, sequences they end themselves; never load/unload, settings or shared memory."""
    process = ServerProcess([f"--model-repository={sample_repository}"])
    yield process
    process.stop()


@pytest.fixture
def sample_server(shared_sample_server: ServerProcess):
    """`workbench serve` on the sample repository (digits_mlp, minilm_encoder, ...), shared
    by the read-only modules: checked alive before each test that uses it, so a test that
    broke it fails on its own and not the ones after it."""
    if shared_sample_server.process.poll() is not None:
        pytest.fail("the shared sample server has exited:\n" + shared_sample_server.log[-4000:])
    return shared_sample_server


@pytest.fixture
def triton(sample_server: ServerProcess):
    """The unmodified tritonclient HTTP client pointed at the sample server."""
    client = httpclient.InferenceServerClient(sample_server.url, concurrency=8)
    yield client
    client.close()


@pytest.fixture
def add_sub_regions(shm_segments):
    """``register(client) -> (a, b, in_key, out_handle)``: system shared-memory regions "in"
    (INPUT0 = ``a``, INPUT1 = ``b``, [1, 16] FP32 at offsets 0 and 64) and "out" (128 bytes)
    registered through ``client`` (tritonclient HTTP or gRPC: the same call)."""
    import tritonclient.utils.shared_memory as shm

    def register(client):
        in_key, in_handle = shm_segments(128)
        out_key, out_handle = shm_segments(128)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.full((1, 16), 2, dtype=np.float32)
        shm.set_shared_memory_region(in_handle, [a, b])
        client.register_system_shared_memory("in", in_key, 128)
        client.register_system_shared_memory("out", out_key, 128)
        return a, b, in_key, out_handle

    return register
