"""How a sequence starts, ends, expires and is cancelled, as Triton's sequence batcher does it
(core ``sequence_batch_scheduler.cc``), and the sequence parameters of ensemble responses.

Real engine and schedulers throughout: the ONNX ``accumulator`` (running sum of a sequence's
inputs) or the sequence probe backend (records executions; a gate holds them).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2 as pb

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor, Unavailable
from workbench.backends.registry import register_backend
from workbench.common.errors import Cancelled
from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.models import ACCUMULATOR_CONFIG, accumulator_graph, write_model
from workbench.testing.sequence_probe import PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import queued

ONE_SLOT = "sequence_batching {\n  oldest { max_candidate_sequences: 1 }"


def accumulator(tmp_path: Path, one_slot: bool = False, idle_us: int | None = None) -> Server:
    config = ACCUMULATOR_CONFIG
    if one_slot:
        config = config.replace("sequence_batching {", ONE_SLOT)
    if idle_us is not None:
        config = config.replace("max_sequence_idle_microseconds: 5000000",
                                f"max_sequence_idle_microseconds: {idle_us}")
    write_model(tmp_path, "accumulator", config, accumulator_graph())
    return Server(ServerOptions(model_repository=[str(tmp_path)]))


def step(corr: int | str, value: float, start: bool = False, end: bool = False,
         model: str = "accumulator", **extra: object) -> InferenceRequest:
    params = {"sequence_id": corr, "sequence_start": start, "sequence_end": end, **extra}
    return InferenceRequest(model, [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))],
                            parameters=params)


def total(response) -> float:
    return float(response.outputs[0].data[0, 0])


# ---------------------------------------------------------------------------- item 5: restarts
async def test_start_on_a_live_sequence_ends_it_and_starts_afresh(tmp_path: Path) -> None:
    async with accumulator(tmp_path) as server:
        assert total(await server.infer(step(8, 1.0, start=True))) == 1.0
        assert total(await server.infer(step(8, 2.0))) == 3.0
        # Triton: "the previous sequence did not end before this sequence start": it ends early
        assert total(await server.infer(step(8, 5.0, start=True))) == 5.0  # fresh state
        assert total(await server.infer(step(8, 1.0, end=True))) == 6.0
        with pytest.raises(InvalidArgument, match=r"sequence 8 .* must specify the START flag"):
            await server.infer(step(8, 1.0))


@pytest_asyncio.fixture
async def probe_server(tmp_path: Path):
    """The probe model: one instance, 4 slots (direct strategy)."""
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    write_probe_model(tmp_path, count=1, max_batch_size=4)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        try:
            yield server
        finally:
            PROBE.gate.set()  # a failed test must not leave an execution blocked at shutdown


def probe(corr: int, value: float, start: bool = False, end: bool = False) -> InferenceRequest:
    return step(corr, value, start, end, model="probe")


async def test_queued_restart_runs_after_the_old_sequence_requests(probe_server: Server) -> None:
    PROBE.gate.clear()
    first = asyncio.create_task(probe_server.infer(probe(5, 1.0, start=True)))
    await PROBE.executing(1)
    old = asyncio.create_task(probe_server.infer(probe(5, 2.0)))
    end = asyncio.create_task(probe_server.infer(probe(5, 3.0, end=True)))
    restart = asyncio.create_task(probe_server.infer(probe(5, 4.0, start=True)))  # START after a queued END
    again = asyncio.create_task(probe_server.infer(probe(5, 5.0, start=True, end=True)))  # and a live restart
    await queued(probe_server, "probe", 4)
    PROBE.gate.set()
    answers = await asyncio.wait_for(asyncio.gather(first, old, end, restart, again), 20)
    assert [total(a) for a in answers] == [1.0, 2.0, 3.0, 4.0, 5.0]
    ran = [(row.value, row.start, index) for index, (_, rows) in enumerate(PROBE.executions)
           for row in rows if row.ready]
    assert {value: start for value, start, _ in ran} == {1.0: True, 2.0: False, 3.0: False, 4.0: True, 5.0: True}
    order = {value: index for value, _, index in ran}
    assert order[1.0] < order[2.0] < order[3.0] and order[4.0] < order[5.0]  # each sequence in order


# ---------------------------------------------------------------------------- item 6: time limits
async def test_request_timeout_expires_a_sequence_waiting_in_the_backlog(tmp_path: Path) -> None:
    async with accumulator(tmp_path, one_slot=True) as server:
        assert total(await server.infer(step(1, 1.0, start=True))) == 1.0  # holds the only slot
        waiting = asyncio.create_task(server.infer(step(2, 10.0, start=True, timeout=100_000)))
        follower = asyncio.create_task(server.infer(step(2, 1.0)))  # no timeout of its own
        for task in (waiting, follower):
            with pytest.raises(Unavailable, match=r"^timeout of the corresponding sequence has been expired$"):
                await asyncio.wait_for(task, 10)
        with pytest.raises(InvalidArgument, match=r"sequence 2 .* must specify the START flag"):
            await server.infer(step(2, 1.0))  # the expired sequence is gone
        assert total(await server.infer(step(1, 1.0, end=True))) == 2.0  # the live one was untouched
        stats = (await server.statistics("accumulator"))["model_stats"][0]
        assert stats["inference_stats"]["fail"]["count"] == 2


async def test_a_timeout_counts_only_while_the_sequence_waits_for_a_slot(tmp_path: Path) -> None:
    async with accumulator(tmp_path, one_slot=True) as server:
        # a sequence with a slot: Triton's timeout does not apply to it
        assert total(await server.infer(step(1, 1.0, start=True, timeout=1))) == 1.0
        assert total(await server.infer(step(1, 2.0, end=True, timeout=1))) == 3.0


async def test_idle_sequence_is_released_after_one_idle_period(tmp_path: Path) -> None:
    idle_s = 1.5  # generous: the release must come well before twice this after the last use
    async with accumulator(tmp_path, one_slot=True, idle_us=int(idle_s * 1e6)) as server:
        await server.infer(step(1, 1.0, start=True))  # holds the only slot
        # used again a little later: its idle time counts from here (a timer armed at START
        # and re-armed once per period would release it about 2 x idle_s from now instead)
        await asyncio.sleep(idle_s / 10)
        await server.infer(step(1, 1.0))
        last_use = time.monotonic()
        # sequence 2 waits in the backlog: it runs once sequence 1 is released
        waiting = asyncio.create_task(server.infer(step(2, 7.0, start=True, end=True)))
        assert total(await asyncio.wait_for(waiting, 1.5 * idle_s)) == 7.0
        assert time.monotonic() - last_use >= idle_s * 0.9  # not before the idle time either
        with pytest.raises(InvalidArgument, match=r"sequence 1 .* must specify the START flag"):
            await server.infer(step(1, 1.0))


# ---------------------------------------------------------------------------- item 7: cancellation
async def test_cancelling_one_queued_request_cancels_the_others_of_its_sequence(probe_server: Server) -> None:
    PROBE.gate.clear()
    busy = asyncio.create_task(probe_server.infer(probe(1, 1.0, start=True)))
    await PROBE.executing(1)
    second = asyncio.create_task(probe_server.infer(probe(1, 2.0)))
    third = asyncio.create_task(probe_server.infer(probe(1, 3.0, end=True)))
    other = asyncio.create_task(probe_server.infer(probe(2, 20.0, start=True, end=True)))
    await queued(probe_server, "probe", 3)
    second.cancel()
    await asyncio.wait([second])
    PROBE.gate.set()
    with pytest.raises(Cancelled):
        await asyncio.wait_for(third, 20)
    assert total(await busy) == 1.0
    assert total(await asyncio.wait_for(other, 20)) == 20.0  # another sequence is not touched
    assert [row.value for _, rows in PROBE.executions for row in rows if row.ready and row.corrid == 1] == [1.0]
    with pytest.raises(InvalidArgument, match=r"sequence 1 .* must specify the START flag"):
        await probe_server.infer(probe(1, 4.0))  # the cancelled sequence has ended


async def test_cancelled_backlog_request_cancels_its_sequence(tmp_path: Path) -> None:
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    write_probe_model(tmp_path, count=1, max_batch_size=1)  # one slot
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        await server.infer(probe(1, 1.0, start=True))  # holds the slot
        start = asyncio.create_task(server.infer(probe(2, 20.0, start=True)))
        follower = asyncio.create_task(server.infer(probe(2, 21.0)))
        await queued(server, "probe", 2)  # both in the backlog
        start.cancel()
        await asyncio.wait([start])
        assert total(await server.infer(probe(1, 2.0, end=True))) == 2.0  # frees the slot
        with pytest.raises(Cancelled):
            await asyncio.wait_for(follower, 20)
        stats = (await server.statistics("probe"))["model_stats"][0]
        assert stats["inference_stats"]["fail"]["count"] == 2
        assert [row.corrid for _, rows in PROBE.executions for row in rows if row.ready] == [1, 1]


# ---------------------------------------------------------------------------- item 8: parameters
async def test_ensemble_stream_responses_carry_the_sequence_parameters(tmp_path: Path, stub_for) -> None:
    repo = build_ensemble_repository(tmp_path)
    options = ServerOptions(model_repository=[str(repo)], model_control_mode="explicit",
                            load_model=["ens_sequence"])
    async with Server(options) as server:
        stub = await stub_for(server)
        call = stub.ModelStreamInfer()
        flags = [(True, False), (False, False), (False, True)]
        for i, (start, end) in enumerate(flags):
            request = pb.ModelInferRequest(model_name="ens_sequence", id=str(i), inputs=[
                pb.ModelInferRequest.InferInputTensor(name="IN", datatype="FP32", shape=[1, 1])],
                raw_input_contents=[np.ones((1, 1), np.float32).tobytes()])
            request.parameters["sequence_id"].int64_param = 31
            request.parameters["sequence_start"].bool_param = start
            request.parameters["sequence_end"].bool_param = end
            await call.write(request)
        await call.done_writing()
        responses = [r async for r in call]
        assert await call.code() == grpc.StatusCode.OK
    assert [r.error_message for r in responses] == ["", "", ""]
    params = [r.infer_response.parameters for r in responses]
    assert [(p["sequence_start"].bool_param, p["sequence_end"].bool_param) for p in params] == flags
    assert [p["sequence_id"].int64_param for p in params] == [31, 31, 31]
    assert all(p["triton_final_response"].bool_param for p in params)


async def test_start_ends_the_sequence_it_replaces_on_a_retiring_version(tmp_path: Path) -> None:
    write_model(tmp_path, "accumulator", ACCUMULATOR_CONFIG, accumulator_graph())  # idle 5 s
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["accumulator"])
    async with Server(options) as server:
        first = await server.infer(step(4, 1.0, start=True))
        assert (total(first), first.model_version) == (1.0, "1")
        shutil.copytree(tmp_path / "accumulator" / "1", tmp_path / "accumulator" / "2")
        await server.load_model("accumulator")  # version 1 retires, holding sequence 4
        again = await server.infer(step(4, 2.0, start=True))
        assert (total(again), again.model_version) == (2.0, "2")
        # the START ended sequence 4 on version 1 (Triton's early termination): version 1
        # unloads now, not after the 5 s idle release
        await asyncio.wait_for(server.lifecycle.retiring.finished(), 3)
        assert total(await server.infer(step(4, 3.0, end=True))) == 5.0
