"""A draining `workbench serve` (SIGINT / SIGTERM) stops its gRPC service as tritonserver's
``GracefulStop`` does: new connections are refused, and so is a new RPC on a connection opened
before the signal (L0_lifecycle ``test_shutdown_dynamic`` / ``_sequence`` / ``_ensemble``:
"CANCELLED", or "failed to connect to all addresses ... Connection refused" once the client read
the GOAWAY), while RPCs in flight finish (``tests/e2e/test_cli.py``)."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from workbench.testing.process import ServerProcess
from workbench.testing.reload import write_add_sub


@pytest.fixture
def server(tmp_path: Path):
    write_add_sub(tmp_path)
    process = ServerProcess([f"--model-repository={tmp_path}", "--allow-metrics=false"])
    yield process
    process.stop(signal.SIGKILL)


def infer(client: grpcclient.InferenceServerClient) -> np.ndarray:
    inputs = [grpcclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    return client.infer("add_sub", inputs, client_timeout=20).as_numpy("OUTPUT0")


def test_new_rpc_on_an_open_connection_during_drain_is_refused(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert infer(client).tolist() == [[2.0] * 16]  # the connection is open
        since = len(server.lines)
        server.process.send_signal(signal.SIGINT)
        server.wait_for_log("received SIGINT", since=since)
        with pytest.raises(InferenceServerException) as refused:
            infer(client)  # Triton: refused, never run
        message = refused.value.message()
        assert "CANCELLED" in message or "Connection refused" in message, message
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5).close()
    finally:
        client.close()
    assert server.process.wait(30) == 0
