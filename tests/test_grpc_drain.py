"""A draining `workbench serve` (SIGTERM) behind a gRPC proxy (nginx ``grpc_pass``): the gRPC
listener refuses new connections at once (the proxy tries another replica: nothing was sent),
while an RPC arriving on a connection opened before the signal is still served. Stopping the
gRPC server at the signal instead made grpc-core cancel such an RPC (nginx passed CANCELLED or
a 502 to its client, and cannot retry: the request was sent)."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

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
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0")


def test_rpc_on_open_connection_during_drain_is_served_new_connections_refused(
        server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert infer(client).tolist() == [[2.0] * 16]  # the connection is open
        since = len(server.lines)
        server.process.send_signal(signal.SIGTERM)
        server.wait_for_log("received SIGTERM", since=since)
        # the drain began on the loop thread before it reads this RPC
        assert infer(client).tolist() == [[2.0] * 16]  # the proxy's open connection still works
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5).close()
    finally:
        client.close()
    assert server.process.wait(30) == 0
