"""Sequence batcher on a real stateful ONNX model (implicit state + START control)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from workbench import InferenceRequest, InvalidArgument, Server, ServerOptions, Tensor
from workbench.testing.models import ACCUMULATOR_CONFIG, accumulator_graph, write_model


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
    for (corr, values), sums in zip(plans.items(), results):
        assert sums == list(np.cumsum(values)), corr
    stats = (await server.statistics("accumulator"))["model_stats"][0]
    sizes = {b["batch_size"] for b in stats["batch_stats"]}
    assert max(sizes) > 1 and max(sizes) <= 8  # sequences shared executions


async def test_errors(server: Server) -> None:
    with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty correlation ID"):
        await server.infer(step(0, 1.0, start=True))
    with pytest.raises(InvalidArgument, match="sequence 7 .* must specify the START flag"):
        await server.infer(step(7, 1.0))
    await server.infer(step(8, 1.0, start=True))
    with pytest.raises(InvalidArgument, match="has the START flag but that sequence is still active"):
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
        await asyncio.sleep(0.5)
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await server.infer(step(5, 1.0))


async def test_backlog_waits_for_a_free_slot(tmp_path: Path) -> None:
    config = ACCUMULATOR_CONFIG.replace("sequence_batching {",
                                        "sequence_batching {\n  oldest { max_candidate_sequences: 1 }")
    async with Server(ServerOptions(model_repository=[str(repository(tmp_path, config))])) as server:
        await server.infer(step(1, 1.0, start=True))
        waiting = asyncio.create_task(server.infer(step(2, 10.0, start=True)))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # sequence 2 has no slot while sequence 1 is live
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
