"""Splitting a batched execution's outputs back per request is validated: a model whose
output batch dimension is smaller than the batch it was given (here ``ReduceSum`` over the
batch axis) fails every request of that execution with Triton's text
(``BackendOutputResponder::ProcessTensor``), never hands one caller's data to another."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from onnx import TensorProto, helper

from workbench import (
    InferenceRequest,
    InvalidArgument,
    Server,
    ServerOptions,
    Tensor,
    Unsupported,
)
from workbench.backends.base import BackendRequest
from workbench.backends.batching import gather_inputs, split_outputs
from workbench.testing.models import write_model

#: two requests of batch 1 run as one execution (preferred size 2; the long delay only
#: matters if the second request were lost)
SUM_CONFIG = """
name: "batch_sum"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 20000000 }
"""


def sum_over_batch_graph():
    """INPUT0 [b, 4] -> OUTPUT0 [1, 4]: the sum over the batch axis (a broken batching model)."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    return helper.make_graph(
        [helper.make_node("ReduceSum", ["INPUT0", "axes"], ["OUTPUT0"], keepdims=1)],
        "batch_sum",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, 4])],
        initializer=[axes],
    )


@pytest_asyncio.fixture
async def server(tmp_path: Path):
    write_model(tmp_path, "batch_sum", SUM_CONFIG, sum_over_batch_graph())
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as engine:
        yield engine


def request(value: float, batch: int = 1, id: str = "") -> InferenceRequest:
    data = np.full((batch, 4), value, np.float32)
    return InferenceRequest("batch_sum", [Tensor("INPUT0", "FP32", data)], id=id)


TEXT = ("[request id: <id_unknown>] failed to split the output tensor 'OUTPUT0' in responses: expected batch size of "
        "atleast 2 in model output, got 1")


async def test_every_request_of_a_batch_fails_when_the_output_cannot_be_split(server) -> None:
    results = await asyncio.gather(server.infer(request(1.0)), server.infer(request(10.0, id="b")),
                                   return_exceptions=True)
    stats = (await server.statistics("batch_sum"))["model_stats"][0]
    assert [b["batch_size"] for b in stats["batch_stats"]] == [2]  # one execution of both
    assert all(isinstance(result, Unsupported) for result in results), results
    assert [str(r) for r in results] == [TEXT, TEXT.replace("<id_unknown>", "b")]


async def test_a_single_request_whose_output_lost_its_batch_fails(server) -> None:
    with pytest.raises(Unsupported) as caught:
        await server.infer(request(1.0, batch=2))
    assert str(caught.value) == TEXT


# -- gather_inputs: the one batch gather every backend uses ---------------------------------

def _rows(start: float, batch: int) -> np.ndarray:
    return np.arange(start, start + batch * 2, dtype=np.float32).reshape(batch, 2)


def test_gather_joins_each_input_along_the_batch_dim_in_request_order() -> None:
    first = BackendRequest({"A": _rows(0, 2), "B": np.array([[1], [2]], np.int64)}, [])
    second = BackendRequest({"A": _rows(10, 1), "B": np.array([[3]], np.int64)}, [])
    feed, sizes = gather_inputs([first, second])
    assert sizes == [2, 1] and list(feed) == ["A", "B"]
    np.testing.assert_array_equal(feed["A"], np.concatenate([_rows(0, 2), _rows(10, 1)]))
    assert feed["B"].dtype == np.int64 and feed["B"].ravel().tolist() == [1, 2, 3]
    parts = split_outputs([first, second], {"OUT": feed["A"] * 2}, sizes)
    np.testing.assert_array_equal(parts[1].outputs["OUT"], _rows(10, 1) * 2)


def test_gather_of_one_request_hands_its_arrays_over_uncopied() -> None:
    array = _rows(0, 3)
    feed, sizes = gather_inputs([BackendRequest({"A": array}, [])])
    assert feed["A"] is array and sizes == [3]


def test_gather_follows_the_given_names_and_leaves_out_an_input_no_request_carries() -> None:
    requests = [BackendRequest({"B": _rows(0, 1), "A": _rows(5, 1)}, []) for _ in range(2)]
    feed, _ = gather_inputs(requests, ["A", "OPTIONAL", "B"])
    assert list(feed) == ["A", "B"] and feed["A"].shape == (2, 2)


def test_gather_refuses_an_input_only_some_requests_of_the_batch_carry() -> None:
    requests = [BackendRequest({"A": _rows(0, 1), "OPT": _rows(0, 1)}, []),
                BackendRequest({"A": _rows(0, 1)}, [])]
    with pytest.raises(InvalidArgument) as caught:
        gather_inputs(requests, model="m")
    assert str(caught.value) == ("optional input 'OPT' of model 'm' is in some requests of a "
                                 "batch but not in others")
