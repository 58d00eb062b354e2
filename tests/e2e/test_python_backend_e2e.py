"""A decoupled Triton Python model in the real `workbench serve` process, streamed to by the
unmodified ``tritonclient.grpc`` client (and add_sub through ``tritonclient.http``)."""

from __future__ import annotations

import os
import queue
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from workbench.serving.stderr_filter import DROPPED_LINES
from workbench.testing.process import ServerProcess
from workbench.testing.python_backend import copy_python_model

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def python_server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("python_e2e")
    copy_python_model(repo, "repeat", parameters={"DELAY_MS": "20"})
    copy_python_model(repo, "add_sub")
    process = ServerProcess([f"--model-repository={repo}"])
    yield process
    process.stop()


def test_grpc_stream_to_a_decoupled_python_model(python_server: ServerProcess) -> None:
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(python_server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for request_id, values in (("1", [3, 1, 4]), ("2", [1, -5])):
                tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
                tensor.set_data_from_numpy(np.array(values, np.int32))
                client.async_stream_infer("repeat", [tensor], request_id=request_id,
                                          enable_empty_final_response=True)
            received = [results.get(timeout=30) for _ in range(6)]
        finally:
            client.stop_stream()
    by_id: dict[str, list] = {"1": [], "2": []}
    errors = []
    for result, error in received:
        if error is not None:
            errors.append(str(error))
            continue
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        out = result.as_numpy("OUT")
        by_id[response.id].append((None if out is None else int(out[0]), final))
    assert by_id["1"] == [(3, False), (1, False), (4, False), (None, True)]
    assert by_id["2"] == [(1, False)]  # an error response ends the request's stream
    assert errors == ["negative value -5 at 1"]


def test_http_add_sub(python_server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(python_server.url) as client:
        inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
        inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
        inputs[1].set_data_from_numpy(np.ones(4, dtype=np.float32))
        result = client.infer("add_sub", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]
        assert result.as_numpy("OUTPUT1").tolist() == [-1, 0, 1, 2]
        assert client.is_model_ready("add_sub")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_stub_processes_end_with_the_server(tmp_path: Path, sig: int) -> None:
    copy_python_model(tmp_path, "add_sub")
    copy_python_model(tmp_path, "identity")
    process = ServerProcess([f"--model-repository={tmp_path}"])
    try:
        tasks = Path(f"/proc/{process.process.pid}/task")  # stubs are children of the load threads
        children = [int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()]
        # the other child: the stderr filter (workbench.serving.stderr_filter), which must end too
        filters = [pid for pid in children if DROPPED_LINES[0] in Path(f"/proc/{pid}/cmdline").read_text()]
    finally:
        process.stop(sig)
    assert len(filters) == 1 and len(children) == 3
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in children)


def test_sigterm_to_the_process_group_finalizes_stubs_without_restarting_them(tmp_path: Path) -> None:
    """``make serve`` + Ctrl-C / ``kill -- -PGID``: the stubs get the signal too, ignore it, and
    the server drains and finalizes each one once (no 'killed by signal' restart)."""
    markers = tmp_path / "markers"
    markers.mkdir()
    copy_python_model(tmp_path / "repo", "lifecycle", parameters={"MARKER_DIR": str(markers), "FINALIZE_SLEEP_S": "0"})
    process = ServerProcess([f"--model-repository={tmp_path / 'repo'}"], new_session=True)
    try:
        with httpclient.InferenceServerClient(process.url) as client:
            assert client.is_server_ready()
        os.killpg(process.process.pid, signal.SIGTERM)
        assert process.process.wait(60) == 0
    finally:
        process.stop(signal.SIGKILL)
    marks = sorted(p.name.split("-")[0] for p in markers.iterdir())
    assert marks == ["finalize", "initialize"], process.log
    assert "restarting" not in process.log


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
