"""Python backend isolation and lifecycle: stub crashes, restarts, finalize, hung stubs,
shared memory left behind. Each test runs its own real Server (crashes change state)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, InternalError, InvalidArgument, Server, ServerOptions, Tensor
from workbench.backends.python.instance import PythonInstance
from workbench.backends.python.transport import SHM_DIR, SHM_PREFIX, remove_stale_segments
from workbench.scheduling.dispatcher import Dispatcher
from workbench.testing.python_backend import copy_python_model, python_backend_segments

UNHEALTHY = ("Failed to process the request(s) for model instance 'crasher_0', message: "
             "Stub process 'crasher_0' is not healthy.")
BATCHING = "max_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 100000 }\n"


def options(repo: Path, **more) -> ServerOptions:
    return ServerOptions(model_repository=[str(repo)], **more)


def mode_request(mode: int, batched: bool = False) -> InferenceRequest:
    data = np.array([[mode]] if batched else [mode], np.int32)
    return InferenceRequest("crasher", [Tensor("MODE", "INT32", data)])


async def stub_pid(server: Server, batched: bool = False) -> int:
    response = await server.infer(mode_request(0, batched))
    return int(response.outputs[0].data.flatten()[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("mode", [1, 2], ids=["os._exit", "SIGKILL"])
async def test_crash_fails_in_flight_requests_then_the_stub_restarts(tmp_path: Path, mode: int) -> None:
    copy_python_model(tmp_path, "crasher", extra=BATCHING)
    async with Server(options(tmp_path)) as server:
        first_pid = await stub_pid(server, batched=True)
        batch = [mode_request(mode, batched=True), mode_request(0, batched=True), mode_request(0, batched=True)]
        results = await asyncio.gather(*(server.infer(r) for r in batch), return_exceptions=True)
        assert all(isinstance(r, InternalError) and r.message == UNHEALTHY for r in results), results
        second_pid = await stub_pid(server, batched=True)  # initialize ran again in a new process
        assert await server.model_ready("crasher")  # NOT READY while the stub was down: see below
        assert second_pid != first_pid and not alive(first_pid)
        stats = (await server.statistics("crasher"))["model_stats"][0]["inference_stats"]
        assert stats["fail"]["count"] == 3
    assert python_backend_segments() == []


async def test_a_stub_killed_while_idle_is_not_ready_until_a_request_fails_and_restarts_it(tmp_path: Path) -> None:
    """Triton (L0_backend_python restart and model_readiness): a stub killed with nothing in
    flight leaves the model NOT READY; the next request fails ("... is not healthy.") and
    restarts it; the one after is served. Before: the stub restarted at once (READY) and the
    next request was served."""
    copy_python_model(tmp_path, "crasher")
    async with Server(options(tmp_path)) as server:
        first_pid = await stub_pid(server)
        os.kill(first_pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while await server.model_ready("crasher"):  # until the server has seen the exit
            assert time.monotonic() < deadline, "the killed stub was never noticed"
            await asyncio.sleep(0.02)
        with pytest.raises(InternalError) as caught:
            await server.infer(mode_request(0))
        assert caught.value.message == UNHEALTHY
        assert await stub_pid(server) != first_pid
        assert await server.model_ready("crasher")


async def test_crash_cleans_up_the_stubs_shared_memory(tmp_path: Path) -> None:
    copy_python_model(tmp_path, "crasher")
    async with Server(options(tmp_path)) as server:
        with pytest.raises(InternalError, match="is not healthy"):
            await server.infer(mode_request(4))  # leaves a segment file, then SIGKILL
        await stub_pid(server)  # served by the restarted stub
        # what is left is the restarted stub's call link (its two message buffers), nothing of the dead one's
        left = python_backend_segments()
        assert len(left) == 2 and {name.rsplit("_", 1)[1] for name in left} == {"call", "reply"}
        assert len({name.rsplit("_", 1)[0] for name in left}) == 1
    assert python_backend_segments() == []


async def test_a_failing_restart_is_retried_by_the_next_request_and_the_model_is_not_ready_meanwhile(
        tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    repo = tmp_path / "repo"
    copy_python_model(repo, "crasher", parameters={"FAIL_INIT_IF_EXISTS": str(blocker)})
    async with Server(options(repo)) as server:
        blocker.write_text("initialize fails while this file exists")
        with pytest.raises(InternalError, match="is not healthy"):
            await server.infer(mode_request(1))
        with pytest.raises(InternalError) as caught:
            await server.infer(mode_request(0))
        assert caught.value.message.startswith(
            "Failed to process the request(s) for model instance 'crasher_0', message: Stub process "
            "'crasher_0' is not healthy; restarting it failed: ")
        assert f"TritonModelException: {blocker} exists" in caught.value.message
        # Triton's ModelInstanceReady: the stub is down, so the model is NOT READY (it said
        # READY before, issue 33), and READY again once a restart succeeded
        assert not await server.model_ready("crasher")
        blocker.unlink()
        await stub_pid(server)
        assert await server.model_ready("crasher")


async def test_a_crash_ends_open_decoupled_streams_with_the_error(tmp_path: Path) -> None:
    copy_python_model(tmp_path, "repeat", parameters={"DELAY_MS": "100"})
    async with Server(options(tmp_path)) as server:
        request = InferenceRequest("repeat", [Tensor("IN", "INT32", np.arange(20, dtype=np.int32))])
        seen = []
        with pytest.raises(InternalError, match="Stub process 'repeat_0' is not healthy"):
            async with contextlib.aclosing(server.infer_stream(request)) as stream:
                async for response in stream:
                    seen.append(int(response.outputs[0].data[0]))
                    if len(seen) == 2:
                        os.kill(_stub_pids(server, "repeat")[0], 9)
        assert seen[:2] == [0, 1] and len(seen) < 20
        again = InferenceRequest("repeat", [Tensor("IN", "INT32", np.array([5], np.int32))])
        responses = [r async for r in server.infer_stream(again)]
        assert int(responses[0].outputs[0].data[0]) == 5


async def test_finalize_runs_on_unload(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = tmp_path / "repo"
    copy_python_model(repo, "lifecycle", parameters={"MARKER_DIR": str(markers)},
                      extra="instance_group [ { count: 2 kind: KIND_CPU } ]\n")
    async with Server(options(repo, model_control_mode="explicit", load_model=["lifecycle"])) as server:
        pids = _stub_pids(server, "lifecycle")
        assert sorted(p.name for p in markers.iterdir()) == sorted(f"initialize-{p}" for p in pids)
        await server.unload_model("lifecycle")
        assert sorted(p.name for p in markers.glob("finalize-*")) == sorted(f"finalize-{p}" for p in pids)
        assert not any(alive(p) for p in pids)


async def test_a_hung_finalize_is_killed_after_the_stub_timeout(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = tmp_path / "repo"
    copy_python_model(repo, "lifecycle", parameters={
        "MARKER_DIR": str(markers), "FINALIZE_SLEEP_S": "60", "stub-timeout-seconds": "0.5"})
    async with Server(options(repo)) as server:
        (pid,) = _stub_pids(server, "lifecycle")
        start = time.monotonic()
    assert time.monotonic() - start < 10
    assert not alive(pid)
    assert not list(markers.glob("finalize-*"))  # killed in the middle of finalize


async def test_a_model_can_be_loaded_again_after_unload(tmp_path: Path) -> None:
    copy_python_model(tmp_path, "add_sub")
    async with Server(options(tmp_path, model_control_mode="explicit")) as server:
        for _ in range(2):
            await server.load_model("add_sub")
            response = await server.infer(InferenceRequest("add_sub", [
                Tensor(f"INPUT{i}", "FP32", np.ones(4, np.float32)) for i in (0, 1)]))
            assert response.outputs[0].data.tolist() == [2, 2, 2, 2]
            await server.unload_model("add_sub")
    assert python_backend_segments() == []


def test_segments_of_dead_servers_are_removed() -> None:
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    stale = Path(SHM_DIR) / f"{SHM_PREFIX}wb{dead_pid}_1_0_s0"
    mine = Path(SHM_DIR) / f"{SHM_PREFIX}wb{os.getpid()}_999_0_s0"
    stale.write_bytes(b"x")
    mine.write_bytes(b"x")
    try:
        assert remove_stale_segments() >= 1
        assert not stale.exists() and mine.exists()
    finally:
        mine.unlink()
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def _stub_pids(server: Server, model: str) -> list[int]:
    """The pids of a model's stub processes (read from the engine's own objects)."""
    loaded = server.lifecycle.models[model].latest_ready
    assert loaded is not None and isinstance(loaded.scheduler, Dispatcher)
    pids = []
    for runner in loaded.scheduler.runners:
        assert isinstance(runner.instance, PythonInstance) and runner.instance._stub is not None
        pids.append(runner.instance._stub.pid)
    return pids


async def test_sequence_flags_and_correlation_id_reach_the_model(tmp_path: Path) -> None:
    copy_python_model(tmp_path, "add_sub", extra="max_batch_size: 1\nsequence_batching { }\n")
    async with Server(options(tmp_path)) as server:
        seen = []
        for params in ({"sequence_id": 42, "sequence_start": True}, {"sequence_id": 42},
                       {"sequence_id": 42, "sequence_end": True}):
            request = InferenceRequest("add_sub", [
                Tensor(f"INPUT{i}", "FP32", np.ones((1, 4), np.float32)) for i in (0, 1)], id="s", parameters=params)
            info = json.loads((await server.infer(request)).parameters["info"])
            seen.append((info["request_id"], info["correlation_id"], info["flags"], info["parameters"]))
    assert seen == [("s", 42, 1, {}), ("s", 42, 0, {}), ("s", 42, 2, {})]


async def test_an_output_of_another_datatype_than_configured_is_passed_on_as_triton_does(tmp_path: Path) -> None:
    """Triton's python_backend adds an output with its tensor's datatype (NVIDIA's in-model
    unittest models answer FP16 for an FP32 output); before: refused with a 500."""
    folder = copy_python_model(tmp_path, "identity")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace(
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32', 'output [ { name: "OUTPUT0" data_type: TYPE_FP64'))
    async with Server(options(tmp_path)) as server:
        response = await server.infer(InferenceRequest("identity", [Tensor("INPUT0", "FP32", np.ones(3, np.float32))]))
    [output] = response.outputs
    assert (output.datatype, str(output.data.dtype), output.data.tolist()) == ("FP32", "float32", [1, 1, 1])


async def test_auto_complete_helper_errors_fail_the_load_with_triton_texts(tmp_path: Path, asgi_client) -> None:
    copy_python_model(tmp_path, "auto_complete", "small_batch", extra="max_batch_size: 8\n")
    shape_tensor = tmp_path / "shape_tensor"
    (shape_tensor / "1").mkdir(parents=True)
    (shape_tensor / "config.pbtxt").write_text('backend: "python"\n')
    (shape_tensor / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        "        config.add_input({'name': 'S', 'data_type': 'TYPE_INT32', 'dims': [1], 'is_shape_tensor': True})\n"
        "        return config\n")
    expected = {
        "small_batch": "ValueError: configuration specified max_batch_size 8, but in auto-complete-config "
                       "function for model 'small_batch' specified max_batch_size 4",
        "shape_tensor": "ValueError: input 'S' in auto-complete-config function for model 'shape_tensor' "
                        "contains property other than 'name', 'data_type', 'dims' and 'optional'.",
    }
    async with Server(options(tmp_path, model_control_mode="explicit")) as server:
        with pytest.raises(InvalidArgument) as caught:
            await server.load_model("small_batch")
        assert str(caught.value).split("\n\nAt:\n")[0] == (
            "load failed for model 'small_batch': " + expected["small_batch"])
        async with asgi_client(server) as http:
            reply = await http.post("/v2/repository/models/shape_tensor/load")
        assert reply.status_code == 400
        assert reply.json()["error"].split("\n\nAt:\n")[0] == (
            "load failed for model 'shape_tensor': " + expected["shape_tensor"])
