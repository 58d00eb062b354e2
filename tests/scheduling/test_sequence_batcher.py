"""Sequence batcher on a real stateful ONNX model (implicit state + START control)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor, Unavailable
from workbench.backends.registry import register_backend
from workbench.common.errors import Cancelled, InternalError
from workbench.testing.models import ACCUMULATOR_CONFIG, accumulator_graph, write_model
from workbench.testing.sequence_probe import FAIL_VALUE, PROBE, ProbeBackend, write_probe_model
from workbench.testing.waits import queued


def repository(tmp_path: Path, config: str = ACCUMULATOR_CONFIG) -> Path:
    write_model(tmp_path, "accumulator", config, accumulator_graph())
    return tmp_path


@pytest_asyncio.fixture
async def server(tmp_path: Path):
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path))])) as engine:
        yield engine


def step(sequence_id, value: float, start: bool = False, end: bool = False, batch: int = 1) -> InferenceRequest:
    data = np.full((batch, 1), value, np.float32)
    params = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return InferenceRequest("accumulator", [Tensor("INPUT", "FP32", data)], parameters=params)


async def run(server: Server, sequence_id, values: list[float]) -> list[float]:
    sums = []
    for i, value in enumerate(values):
        request = step(sequence_id, value, start=i == 0, end=i == len(values) - 1)
        response = await server.infer(request)
        assert [t.name for t in response.outputs] == ["OUTPUT"]  # the state output stays inside
        sums.append(float(response.outputs[0].data[0, 0]))
    return sums


async def test_running_sum_of_one_sequence(server: Server) -> None:
    assert await run(server, 42, [1, 2, 3, 4]) == [1, 3, 6, 10]
    assert await run(server, 42, [5, 5]) == [5, 10]  # a new sequence on the same ID starts over


async def test_interleaved_sequences_from_many_clients(server: Server) -> None:
    rng = random.Random(0)
    plans = {corr: [float(rng.randint(1, 9)) for _ in range(rng.randint(2, 12))]
             for corr in [*range(1, 13), "alpha", "beta"]}
    results = await asyncio.gather(*(run(server, corr, values) for corr, values in plans.items()))
    for (corr, values), sums in zip(plans.items(), results, strict=True):
        assert sums == list(np.cumsum(values)), corr
    stats = (await server.statistics("accumulator"))["model_stats"][0]
    sizes = {b["batch_size"] for b in stats["batch_stats"]}
    assert max(sizes) > 1 and max(sizes) <= 8  # sequences shared executions


async def test_errors(server: Server) -> None:
    with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty correlation ID"):
        await server.infer(step(0, 1.0, start=True))
    with pytest.raises(InvalidArgument, match=r"sequence 7 .* must specify the START flag"):
        await server.infer(step(7, 1.0))
    await server.infer(step(8, 1.0, start=True))
    with pytest.raises(InvalidArgument, match="must specify batch-size 1"):
        await server.infer(step(8, 1.0, batch=2))
    # the live sequence was not disturbed by any of this
    assert float((await server.infer(step(8, 2.0, end=True))).outputs[0].data[0, 0]) == 3.0


async def test_idle_sequence_is_released(tmp_path: Path) -> None:
    config = ACCUMULATOR_CONFIG.replace("max_sequence_idle_microseconds: 5000000",
                                        "max_sequence_idle_microseconds: 100000")
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, config))])) as server:
        await server.infer(step(5, 1.0, start=True))
        # past the 100 ms idle timeout: the release is a loop timer due earlier than this one
        await asyncio.sleep(0.5)
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await server.infer(step(5, 1.0))


async def test_backlog_waits_for_a_free_slot(tmp_path: Path) -> None:
    config = ACCUMULATOR_CONFIG.replace("sequence_batching {",
                                        "sequence_batching {\n  oldest { max_candidate_sequences: 1 }")
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, config))])) as server:
        await server.infer(step(1, 1.0, start=True))
        waiting = asyncio.create_task(server.infer(step(2, 10.0, start=True)))
        await queued(server, "accumulator", 1)  # sequence 2 has no slot while sequence 1 is live
        assert not waiting.done()
        assert float((await server.infer(step(1, 1.0, end=True))).outputs[0].data[0, 0]) == 2.0
        assert float((await asyncio.wait_for(waiting, 20)).outputs[0].data[0, 0]) == 10.0


CONTROLS_CONFIG = """
name: "controls"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "OUT_START" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUT_END" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "OUT_READY" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "OUT_CORRID" data_type: TYPE_UINT64 dims: [ 1 ] }
]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
"""


def controls_graph():
    from onnx import TensorProto, helper

    kinds = {"INPUT": TensorProto.FLOAT, "START": TensorProto.INT32, "END": TensorProto.BOOL,
             "READY": TensorProto.FLOAT, "CORRID": TensorProto.UINT64}
    inputs = [helper.make_tensor_value_info(n, t, ["b", 1]) for n, t in kinds.items()]
    names = [n for n in kinds if n != "INPUT"]
    outputs = [helper.make_tensor_value_info(f"OUT_{n}", kinds[n], ["b", 1]) for n in names]
    nodes = [helper.make_node("Identity", [n], [f"OUT_{n}"]) for n in names]
    return helper.make_graph(nodes, "controls", inputs, outputs)


async def test_all_four_control_tensors(tmp_path: Path) -> None:
    write_model(tmp_path, "controls", CONTROLS_CONFIG, controls_graph())
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        seen = []
        for i in range(3):
            params = {"sequence_id": 77, "sequence_start": i == 0, "sequence_end": i == 2}
            data = np.zeros((1, 1), np.float32)
            response = await server.infer(
                InferenceRequest("controls", [Tensor("INPUT", "FP32", data)], parameters=params)
            )
            seen.append({t.name: t.data[0, 0].item() for t in response.outputs})
    assert [s["OUT_START"] for s in seen] == [1, 0, 0]
    assert [s["OUT_END"] for s in seen] == [False, False, True]
    assert [s["OUT_READY"] for s in seen] == [1.0, 1.0, 1.0]
    assert [s["OUT_CORRID"] for s in seen] == [77, 77, 77]


def with_backlog(limit: str) -> str:
    return ACCUMULATOR_CONFIG + f'parameters {{ key: "max_sequence_backlog" value {{ string_value: "{limit}" }} }}\n'


def total(response) -> float:
    return float(response.outputs[0].data[0, 0])


async def test_full_slots_and_backlog_reject_a_new_sequence(tmp_path: Path) -> None:
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, with_backlog("0")))])) as server:
        for corr in range(1, 9):  # the 8 slots of the one instance
            await server.infer(step(corr, float(corr), start=True))
        with pytest.raises(Unavailable, match=(
            r"^inference request for sequence 9 to model 'accumulator' rejected: all 8 sequence "
            r"slots are in use and the sequence backlog \(max_sequence_backlog 0\) is full$"
        )):
            await asyncio.wait_for(server.infer(step(9, 1.0, start=True)), 20)
        ends = [total(await server.infer(step(corr, 1.0, end=True))) for corr in range(1, 9)]
        assert ends == [corr + 1.0 for corr in range(1, 9)]  # live sequences were not disturbed
        assert total(await server.infer(step(9, 5.0, start=True, end=True))) == 5.0  # slots free again
        stats = (await server.statistics("accumulator"))["model_stats"][0]
    assert stats["inference_stats"]["fail"]["count"] == 1


async def test_backlog_bound_counts_waiting_sequences(tmp_path: Path) -> None:
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, with_backlog("1")))])) as server:
        for corr in range(1, 9):
            await server.infer(step(corr, 1.0, start=True))
        waiting = asyncio.create_task(server.infer(step(9, 10.0, start=True)))  # the one backlog place
        await queued(server, "accumulator", 1)
        with pytest.raises(Unavailable, match=r"sequence 10 .* backlog \(max_sequence_backlog 1\) is full"):
            await asyncio.wait_for(server.infer(step(10, 1.0, start=True)), 20)
        assert not waiting.done()
        assert total(await server.infer(step(1, 1.0, end=True))) == 2.0  # frees a slot for sequence 9
        assert total(await asyncio.wait_for(waiting, 20)) == 10.0


@pytest.mark.parametrize("value", ["-1", "many", "1.5", ""])
async def test_max_sequence_backlog_must_be_a_non_negative_integer(tmp_path: Path, value: str) -> None:
    options = ServerOptions(model_repository=[str(repository(tmp_path, with_backlog(value)))], exit_on_error=False)
    async with Server(options) as server:
        row = next(r for r in await server.repository_index() if r["name"] == "accumulator")
    assert row["state"] == "UNAVAILABLE"
    assert "parameter 'max_sequence_backlog' of model 'accumulator' must be a non-negative integer" in row["reason"]
    assert f"got '{value}'" in row["reason"]


@pytest_asyncio.fixture
async def probe_server(tmp_path: Path):
    register_backend("seqprobe", ProbeBackend)
    PROBE.reset()
    write_probe_model(tmp_path, count=1, max_batch_size=4)
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        yield server
    PROBE.gate.set()


def probe_step(sequence_id: int, value: float, start: bool = False, end: bool = False) -> InferenceRequest:
    params = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return InferenceRequest("probe", [Tensor("INPUT", "FP32", np.full((1, 1), value, np.float32))],
                            parameters=params)


def probe_saw(corr: int) -> list[float]:
    return [row.value for _, rows in PROBE.executions for row in rows if row.ready and row.corrid == corr]


async def test_failed_start_fails_the_requests_queued_behind_it(probe_server: Server) -> None:
    PROBE.gate.clear()  # executions block until the followers are queued
    start = asyncio.create_task(probe_server.infer(probe_step(5, FAIL_VALUE, start=True)))
    await PROBE.executing(1)
    followers = [asyncio.create_task(probe_server.infer(probe_step(5, v, end=v == 3))) for v in (2.0, 3.0)]
    other = asyncio.create_task(probe_server.infer(probe_step(6, 60.0, start=True)))
    await queued(probe_server, "probe", 3)
    PROBE.gate.set()
    with pytest.raises(InternalError, match="probe refused sequence 5"):
        await start
    for follower in followers:
        with pytest.raises(InvalidArgument, match=(
            r"^inference request for sequence 5 to model 'probe' cannot run: "
            r"the sequence's START request failed$"
        )):
            await asyncio.wait_for(follower, 20)
    assert total(await other) == 60.0  # another sequence was not disturbed
    assert probe_saw(5) == [FAIL_VALUE]  # the followers never ran on fresh state
    assert total(await probe_server.infer(probe_step(5, 7.0, start=True, end=True))) == 7.0


async def test_cancelled_start_cancels_the_requests_queued_behind_it(probe_server: Server) -> None:
    PROBE.gate.clear()
    busy = asyncio.create_task(probe_server.infer(probe_step(1, 1.0, start=True)))
    await PROBE.executing(1)
    start = asyncio.create_task(probe_server.infer(probe_step(2, 20.0, start=True)))
    await queued(probe_server, "probe", 1)
    follower = asyncio.create_task(probe_server.infer(probe_step(2, 21.0)))
    await queued(probe_server, "probe", 2)
    start.cancel()
    await asyncio.wait([start])  # the cancellation has reached the queued request
    PROBE.gate.set()
    with pytest.raises(Cancelled, match=r"sequence 2 .* was cancelled: another request of the sequence was cancelled"):
        await asyncio.wait_for(follower, 20)
    assert total(await busy) == 1.0
    assert probe_saw(2) == []


def oldest_config(block: str) -> str:
    return ACCUMULATOR_CONFIG.replace("sequence_batching {", "sequence_batching {\n  oldest { " + block + " }")


async def batch_sizes(server: Server) -> dict[int, int]:
    stats = (await server.statistics("accumulator"))["model_stats"][0]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}


async def test_oldest_waits_for_the_preferred_batch_size(tmp_path: Path) -> None:
    # a 60 s delay never runs out here: only reaching preferred size 4 can start the batch
    config = oldest_config("max_candidate_sequences: 8 preferred_batch_size: [ 4 ] "
                           "max_queue_delay_microseconds: 60000000")
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, config))])) as server:
        responses = await asyncio.wait_for(
            asyncio.gather(*(server.infer(step(corr, corr, start=True, end=True)) for corr in (1, 2, 3, 4))), 30
        )
        assert [float(r.outputs[0].data[0, 0]) for r in responses] == [1, 2, 3, 4]
        assert await batch_sizes(server) == {4: 1}  # one execution of four, not a lone first request


async def test_oldest_runs_a_smaller_batch_when_the_delay_runs_out(tmp_path: Path) -> None:
    config = oldest_config("max_candidate_sequences: 8 preferred_batch_size: [ 2, 8 ] "
                           "max_queue_delay_microseconds: 200000")
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, config))])) as server:
        responses = await asyncio.wait_for(
            asyncio.gather(*(server.infer(step(corr, 10, start=True, end=True)) for corr in range(1, 6))), 30
        )
        assert all(float(r.outputs[0].data[0, 0]) == 10 for r in responses)
        # preferred size 2 leaves at once (as Triton's dynamic batcher does) while the ready
        # requests reach it; the last one runs alone when its delay runs out
        assert await batch_sizes(server) == {2: 2, 1: 1}
