"""`workbench serve` as a process: start-up errors, graceful shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import gevent  # type: ignore[import-untyped]  # gevent ships no types (types-gevent is not installed)
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


def run_cli(*args: str) -> subprocess.CompletedProcess:
    for flag in ("--metrics-port", "--grpc-port"):  # never depend on 8002 / 8001 being free
        if args[:1] == ("serve",) and not any(a.startswith(flag) for a in args):
            args = (*args, f"{flag}=0")
    return subprocess.run(
        [sys.executable, "-m", "workbench.hosts.cli", *args],
        capture_output=True, text=True, timeout=120,
    )


def test_missing_repository_is_one_clear_line(tmp_path: Path) -> None:
    result = run_cli("serve", f"--model-repository={tmp_path / 'absent'}", "--http-port=0")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("E")]
    assert len(errors) == 1 and "does not exist or is not a directory" in errors[0]


def test_busy_port_is_one_clear_line(test_repository: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", f"--model-repository={test_repository}",
                         "--http-address=127.0.0.1", f"--http-port={port}")
    assert result.returncode == 1
    assert f"failed to start HTTP service: Unavailable - Socket '127.0.0.1:{port}' already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_exit_on_error_with_a_broken_model(mixed_repository: Path) -> None:
    result = run_cli("serve", f"--model-repository={mixed_repository}", "--http-port=0")
    assert result.returncode == 1
    assert "failed to load all models" in result.stderr and "broken_syntax" in result.stderr
    assert "Traceback" not in result.stderr


def test_broken_models_served_beside_good_ones(mixed_repository: Path) -> None:
    server = ServerProcess([f"--model-repository={mixed_repository}", "--exit-on-error=false"])
    try:
        client = httpclient.InferenceServerClient(server.url)
        assert client.is_server_live() and not client.is_server_ready()
        assert client.is_model_ready("add_sub") and not client.is_model_ready("broken_onnx")
        index = {r["name"]: r for r in client.get_model_repository_index()}
        assert index["broken_syntax"]["state"] == "UNAVAILABLE"
        a = np.ones((1, 16), np.float32)
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        assert client.infer("add_sub", inputs).as_numpy("OUTPUT0")[0, 0] == 2
    finally:
        assert server.stop() == 0


#: the draining tests' exit budget: four 16 x 256-token minilm requests take ~10 s on an idle
#: 2-core machine but can pass the default 30 s on a loaded one, and a drain cut short by the
#: exit timeout is not what these tests are about
DRAIN_BUDGET = "--exit-timeout-secs=300"


def slow_requests_in_flight(client: httpclient.InferenceServerClient, count: int = 4) -> list:
    """Send ``count`` long minilm_encoder requests (16 x 256 tokens: each computes for a while)
    and let them reach the server; returns tritonclient's async handles."""
    tokens = np.full((16, 256), 1000, np.int64)
    inputs = []
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        tensor = httpclient.InferInput(name, [16, 256], "INT64")
        tensor.set_data_from_numpy(tokens if name == "input_ids" else np.ones_like(tokens))
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput("sentence_embedding")]
    handles = [client.async_infer("minilm_encoder", inputs, outputs=outputs) for _ in range(count)]
    gevent.sleep(1.0)  # yield to tritonclient's greenlets: the requests go out and queue in the server
    return handles


def pending_requests(server: ServerProcess, model: str) -> float:
    """Triton's ``nv_inference_pending_request_count`` of ``model`` on ``server`` (0 if absent)."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("nv_inference_pending_request_count") and f'model="{model}"' in line)


def test_sigterm_finishes_in_flight_requests(sample_repository: Path) -> None:
    server = ServerProcess([f"--model-repository={sample_repository}", DRAIN_BUDGET])
    client = httpclient.InferenceServerClient(server.url, concurrency=4)
    handles = slow_requests_in_flight(client)
    assert server.stop(signal.SIGTERM) == 0
    results = [h.get_result().as_numpy("sentence_embedding") for h in handles]
    assert all(r.shape == (16, 384) for r in results)
    assert "stopping: waiting for in-flight requests" in server.log
    client.close()


def test_exit_timeout_ends_the_process_with_status_1_not_an_abort(sample_repository: Path) -> None:
    """Requests still executing when --exit-timeout-secs runs out: the process exits at once
    with status 1 (finalizing the interpreter under ONNX Runtime's running threads used to
    abort it: SIGABRT, "terminate called without an active exception")."""
    server = ServerProcess([f"--model-repository={sample_repository}", "--exit-timeout-secs=1"])
    # 16 requests on 16 connections: several seconds of compute even on a quiet machine, so some
    # are still executing when the 1 s runs out (4 of them took ~2 s there and finished in time)
    client = httpclient.InferenceServerClient(server.url, concurrency=16)
    slow_requests_in_flight(client, count=16)
    assert server.stop(signal.SIGTERM) == 1
    assert "exit timeout reached; exiting with requests still in flight" in server.log
    assert "terminate called" not in server.log
    client.close()


def test_sigint_exits_once_drained_without_finalizing_the_interpreter(
        sample_repository: Path, tmp_path: Path) -> None:
    """Ctrl-C: once every model unloaded the process exits (status 0, logs flushed) without
    the interpreter's finalization, which ran atexit handlers and native destructors for 3-15
    s of silence after "all models unloaded; exiting". An atexit handler planted through
    ``sitecustomize`` shows whether finalization ran."""
    hook = tmp_path / "hook"
    hook.mkdir()
    marker = tmp_path / "finalized"
    (hook / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(hook), env.get("PYTHONPATH", "")) if p)
    server = ServerProcess([f"--model-repository={sample_repository}", "--model-control-mode=explicit",
                            "--load-model=digits_mlp"], env=env)
    assert server.stop(signal.SIGINT) == 0
    assert "all models unloaded; exiting" in server.log  # flushed before the exit
    assert not marker.exists()


def test_a_second_sigterm_during_the_drain_does_not_kill_the_server(sample_repository: Path) -> None:
    """A supervisor's repeated SIGTERM while the engine drains (after the HTTP listener
    stopped): the server still finishes its requests and exits 0. The signal handlers were
    put back to the default once uvicorn stopped, so the second SIGTERM killed the process
    (-15) with gRPC requests executing (seen in CI as a flaky -15)."""
    server = ServerProcess([f"--model-repository={sample_repository}", DRAIN_BUDGET])
    tokens = np.full((16, 256), 1000, np.int64)
    inputs = []
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        tensor = grpcclient.InferInput(name, [16, 256], "INT64")
        tensor.set_data_from_numpy(tokens if name == "input_ids" else np.ones_like(tokens))
        inputs.append(tensor)
    results: list = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for _ in range(4):
            client.async_infer("minilm_encoder", inputs, lambda result, error: results.append((result, error)))
        deadline = time.monotonic() + 60  # the requests are queued in the engine (one instance)
        while not pending_requests(server, "minilm_encoder") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending_requests(server, "minilm_encoder")
        server.process.send_signal(signal.SIGTERM)
        server.wait_for_log("stopping: waiting for in-flight requests", timeout_s=60)
        server.process.send_signal(signal.SIGTERM)  # the second one, while the engine drains
        assert server.stop(signal.SIGTERM) == 0
    assert "received SIGTERM again" in server.log
    assert len(results) == 4 and all(error is None for _, error in results)


def test_sigterm_stops_grpc_accepting_while_http_requests_finish(sample_repository: Path) -> None:
    server = ServerProcess([f"--model-repository={sample_repository}", DRAIN_BUDGET])
    client = httpclient.InferenceServerClient(server.url, concurrency=4)
    handles = slow_requests_in_flight(client)
    server.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while "no new requests accepted" not in server.log and time.monotonic() < deadline:
        gevent.sleep(0.05)  # tritonclient.http runs on gevent: let its greenlets and our log reader run
    assert "received SIGTERM: no new requests accepted" in server.log
    pixels = grpcclient.InferInput("pixels", [1, 64], "FP32")
    pixels.set_data_from_numpy(np.zeros((1, 64), np.float32))
    with (grpcclient.InferenceServerClient(server.grpc_url) as grpc_client,
          pytest.raises(InferenceServerException)):  # refused: the gRPC server no longer accepts
        grpc_client.infer("digits_mlp", [pixels], client_timeout=10)
    results = [h.get_result().as_numpy("sentence_embedding") for h in handles]
    assert all(r.shape == (16, 384) for r in results)  # in-flight HTTP requests still finished
    assert server.stop(signal.SIGTERM) == 0
    client.close()


def test_out_of_range_port_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli("serve", f"--model-repository={tmp_path}", "--http-port=70000")
    assert result.returncode == 2
    assert "port must be in 0..65535, got 70000" in result.stderr and "Traceback" not in result.stderr


def test_sigint_stop_prints_no_grpc_acceptor_error_but_real_errors(tmp_path: Path) -> None:
    """Refusing new gRPC connections at the stop shuts grpc-core's listening socket, and
    grpc-core logged "Closing acceptor. Failed accept4: Invalid argument" at error level on
    every Ctrl-C: that one line stays off the terminal; a real error (a model that fails to
    load) and the drain's lines still reach stderr, in order, before the exit."""
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')  # no model.onnx
    server = ServerProcess([f"--model-repository={tmp_path}", "--exit-on-error=false",
                            "--strict-readiness=false"])
    assert server.grpc_port  # gRPC served: its listener is shut at the stop
    assert server.stop(signal.SIGINT) == 0
    assert "Failed accept4" not in server.log
    assert any(line.startswith("E") and "broken" in line for line in server.lines)
    assert server.lines[-1].endswith("all models unloaded; exiting")


#: what TensorFlow's native libraries printed on the terminal while a TensorFlow model loaded
TENSORFLOW_NOISE = ("oneDNN custom operations are on", "absl::InitializeLog()",
                    "This TensorFlow binary is optimized", "rebuild TensorFlow")


def test_a_tensorflow_model_loads_without_tensorflows_build_lines_on_the_terminal(
        tmp_path: Path, sample_repository: Path) -> None:
    """Issue 35 (a new user's finding): `workbench serve` on the sample repository printed
    TensorFlow's INFO lines about its build ("oneDNN custom operations are on", the CPU
    instructions it could use) and absl's line about logging before its initialisation, from
    the digits_savedmodel load. They stay off the terminal; a real error (a model that fails
    to load) still reaches it."""
    pytest.importorskip("tensorflow")
    shutil.copytree(sample_repository / "digits_savedmodel", tmp_path / "digits_savedmodel")
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')  # no model.onnx
    quiet_unset = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    server = ServerProcess([f"--model-repository={tmp_path}", "--exit-on-error=false",
                            "--strict-readiness=false"], env=quiet_unset)
    try:
        assert "successfully loaded 'digits_savedmodel'" in server.log
    finally:
        assert server.stop(signal.SIGINT) == 0
    noise = [line for line in server.lines if any(text in line for text in TENSORFLOW_NOISE)]
    assert noise == []
    assert any(line.startswith("E") and "broken" in line for line in server.lines)
