"""A draining `workbench serve` (SIGINT / SIGTERM) stops its gRPC service as tritonserver's
``GracefulStop`` does, 0.2 s later: new connections are refused at once; RPCs on connections
opened before the signal are served meanwhile (beyond Triton, which stops at
once: grpc-core's stop cancels an RPC that a proxy sent on its open connection at that moment,
and ends a connection it accepted but had not set up yet with a GOAWAY carrying INTERNAL_ERROR,
which nginx answers with 502); then a new RPC on an open connection is refused as Triton's
(L0_lifecycle ``test_shutdown_dynamic`` / ``_sequence`` / ``_ensemble``: "CANCELLED", or
"failed to connect to all addresses ... Connection refused" once the client read the GOAWAY),
while RPCs in flight finish (``tests/e2e/test_cli.py``)."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from workbench.testing.grpc_wire import RawGrpcConnection, frame
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


MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def raw_infer(connection: RawGrpcConnection) -> tuple[int | None, str]:
    """One add_sub ModelInfer on ``connection``: its grpc-status and grpc-message."""
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
    reply = connection.call(MODEL_INFER, frame(request.SerializeToString()))
    return reply.status, reply.message


def drain_to_the_end(server: ServerProcess, connection: RawGrpcConnection) -> None:
    """Read ``connection`` until the server closes it: every GOAWAY (grpc-core's two)
    says NO_ERROR, never INTERNAL_ERROR; then wait for a clean exit."""
    while not connection.eof:
        connection.receive()
    assert connection.goaway_errors and set(connection.goaway_errors) == {0}, connection.goaway_errors
    assert server.process.wait(30) == 0


@pytest.mark.parametrize("used", [True, False], ids=["pooled-connection", "new-connection"])
def test_rpc_on_a_connection_open_at_the_signal_is_served(server: ServerProcess, used: bool) -> None:
    """A proxy's RPC on a connection it opened before the signal, written as the signal is
    sent: served. ``used``: the connection carried an RPC before (a pooled one); else it
    carries its first (nginx opens one connection per gRPC request). Before, grpc-core's
    immediate stop sent its GOAWAY and cancelled the RPC (and a connection it had accepted
    but not set up yet got a GOAWAY with INTERNAL_ERROR: nginx's 502)."""
    with RawGrpcConnection(server.grpc_port) as connection:
        if used:
            assert raw_infer(connection) == (0, "")
        else:
            connection.settings()  # grpc-core set the connection up
        server.process.send_signal(signal.SIGTERM)
        assert raw_infer(connection) == (0, "")
        drain_to_the_end(server, connection)


def test_new_rpc_on_an_open_connection_once_grpc_stopped_is_refused(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert infer(client).tolist() == [[2.0] * 16]  # the connection is open
        since = len(server.lines)
        server.process.send_signal(signal.SIGINT)
        server.wait_for_log("received SIGINT", since=since)
        server.wait_for_log("gRPC: stopping", since=since)
        with pytest.raises(InferenceServerException) as refused:
            infer(client)  # Triton: refused, never run
        message = refused.value.message()
        assert "CANCELLED" in message or "Connection refused" in message, message
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5).close()
    finally:
        client.close()
    assert server.process.wait(30) == 0


SLOW_MODEL = '''
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_info("slow: executing")
        time.sleep(3)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(
            r, "IN").as_numpy())]) for r in requests]
'''
SLOW_CONFIG = '''name: "slow"
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
'''


def test_grpc_stop_logs_tritons_count_of_inference_calls_in_flight(tmp_path: Path) -> None:
    """While inference RPCs are in flight, the stopping gRPC service logs tritonserver's
    ``Timeout N: Found M gRPC service connections and inference handlers`` once a second
    (L0_lifecycle ``test_shutdown_dynamic`` / ``_ensemble`` grep it); the RPC is answered."""
    (tmp_path / "slow" / "1").mkdir(parents=True)
    (tmp_path / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (tmp_path / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    server = ServerProcess([f"--model-repository={tmp_path}", "--allow-metrics=false", "--exit-timeout-secs=30"])
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([7.0], np.float32))
        answers: list = []
        client.async_infer("slow", [tensor], lambda result, error: answers.append((result, error)))
        server.wait_for_log("slow: executing")
        since = len(server.lines)
        server.process.send_signal(signal.SIGINT)
        server.wait_for_log("Timeout 30: Found 1 gRPC service connections and inference handlers", since=since)
        assert server.process.wait(30) == 0
        [(result, error)] = answers
        assert error is None and result.as_numpy("OUT").tolist() == [7.0]
    finally:
        client.close()
        server.stop(signal.SIGKILL)
