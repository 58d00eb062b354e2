"""Triton's ragged batching (issue 19 item 4): ``allow_ragged_batch`` inputs of different
shapes batch together, reach the model flat, ``batch_input`` tensors describe the batch, and a
``BATCH_SCATTER_WITH_INPUT_SHAPE`` output is split back by each request's input shape."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from workbench import InferenceRequest, InvalidArgument, RequestedOutput, Server, ServerOptions, Tensor, Unsupported
from workbench.backends.base import BackendRequest
from workbench.backends.batching import gather_inputs, split_outputs
from workbench.backends.registry import register_backend
from workbench.config.batch_io import batch_layout
from workbench.testing.fake_backend import BEHAVIOUR, FakeBackend, write_fake_model
from workbench.testing.models import write_model

#: three requests run as one execution (preferred size 3; the long delay only matters if one
#: were not batched with the others)
RAGGED_CONFIG = """
name: "ragged"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX" data_type: TYPE_INT32
    source_input: "INPUT" },
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32 source_input: "INPUT" }
]
output [
  { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "END" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "TOTAL" data_type: TYPE_INT64 dims: [ 1 ] }
]
batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT" source_input: "INPUT" } ]
dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 20000000 }
"""


def ragged_graph(input_shape: list | None = None):
    """INPUT [n] (the flat batch), INDEX / COUNT [b] -> OUTPUT = 2 * INPUT [n], END = INDEX and
    SIZE = COUNT as [b, 1], TOTAL = [[n]] * b (the flat input's length, once per request)."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [2.0])),
        helper.make_node("Mul", ["INPUT", "two"], ["OUTPUT"]),
        helper.make_node("Unsqueeze", ["INDEX", "axes"], ["END"]),
        helper.make_node("Unsqueeze", ["COUNT", "axes"], ["SIZE"]),
        helper.make_node("Shape", ["INPUT"], ["n"]),
        helper.make_node("Shape", ["INDEX"], ["b"]),
        helper.make_node("Concat", ["b", "one"], ["b1"], axis=0),
        helper.make_node("Reshape", ["n", "one_one"], ["n11"]),
        helper.make_node("Expand", ["n11", "b1"], ["TOTAL"]),
    ]
    initializers = [
        axes,
        helper.make_tensor("one_one", TensorProto.INT64, [2], [1, 1]),
        helper.make_tensor("one", TensorProto.INT64, [1], [1]),
    ]
    return helper.make_graph(
        nodes,
        "ragged",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, input_shape or ["n"]),
            helper.make_tensor_value_info("INDEX", TensorProto.INT32, ["b"]),
            helper.make_tensor_value_info("COUNT", TensorProto.INT32, ["b"]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("END", TensorProto.INT32, ["b", 1]),
            helper.make_tensor_value_info("SIZE", TensorProto.INT32, ["b", 1]),
            helper.make_tensor_value_info("TOTAL", TensorProto.INT64, ["b", 1]),
        ],
        initializer=initializers,
    )


def ragged_request(length: int, start: float) -> InferenceRequest:
    data = np.arange(start, start + length, dtype=np.float32).reshape(1, length)
    return InferenceRequest("ragged", [Tensor("INPUT", "FP32", data)])


async def test_ragged_requests_of_different_lengths_run_as_one_execution(tmp_path: Path) -> None:
    write_model(tmp_path, "ragged", RAGGED_CONFIG, ragged_graph())
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        lengths, starts = (3, 4, 5), (0.0, 10.0, 20.0)
        responses = await asyncio.gather(*(server.infer(ragged_request(n, s))
                                           for n, s in zip(lengths, starts, strict=True)))
        stats = (await server.statistics("ragged"))["model_stats"][0]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 3
    ends = [3, 7, 12]
    for response, n, start, end in zip(responses, lengths, starts, ends, strict=True):
        out = {t.name: t.data for t in response.outputs}
        assert out["OUTPUT"].shape == (1, n)  # scattered back by the request's input shape
        assert out["OUTPUT"].tolist() == [[2 * (start + i) for i in range(n)]]
        assert out["END"].tolist() == [[end]] and out["SIZE"].tolist() == [[n]]
        assert out["TOTAL"].tolist() == [[12]]  # the model saw one flat input of 3 + 4 + 5


async def test_a_lone_ragged_request_reaches_the_model_flat(tmp_path: Path) -> None:
    config = RAGGED_CONFIG.replace("preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 20000000", "")
    write_model(tmp_path, "ragged", config, ragged_graph())
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        data = np.arange(6, dtype=np.float32).reshape(2, 3)  # one request of batch 2
        # (END, SIZE, TOTAL hold one row per request, not per batch item: as in Triton they
        # cannot be split for a request of batch 2, so only OUTPUT is asked for)
        request = InferenceRequest("ragged", [Tensor("INPUT", "FP32", data)], outputs=[RequestedOutput("OUTPUT")])
        response = await server.infer(request)
    (output,) = response.outputs  # the graph takes a 1-D INPUT only: it was given [6]
    assert output.data.shape == (2, 3) and output.data.tolist() == (2 * data).tolist()


async def test_the_dynamic_batcher_joins_ragged_inputs_of_other_shapes(tmp_path: Path) -> None:
    """The batcher's shape check leaves ragged inputs out (fake backend: no model needed)."""
    write_fake_model(tmp_path, "fake_ragged", count=1, extra=(
        "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 20000000 }"))
    config = tmp_path / "fake_ragged" / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 1 ] }", "dims: [ -1 ] allow_ragged_batch: true }", 1))
    register_backend("fake", FakeBackend)
    BEHAVIOUR.reset()
    async with Server(ServerOptions(model_repository=[str(tmp_path)])) as server:
        requests = [InferenceRequest("fake_ragged", [Tensor("INPUT0", "FP32", np.full((1, n), float(n), np.float32))])
                    for n in (2, 5)]
        await asyncio.gather(*(server.infer(r) for r in requests))
    assert BEHAVIOUR.batches == [[2.0, 5.0]]


# ---------------------------------------------------------------- batch input kinds

def layout_of(batch_input: str = "", batch_output: str = "", dims: str = "-1"):
    config = mc.ModelConfig()
    text_format.Parse(
        f'name: "m" max_batch_size: 8 input {{ name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] '
        f'allow_ragged_batch: true }}'
        f' output {{ name: "Y" data_type: TYPE_FP32 dims: [ {dims} ] }} {batch_input} {batch_output}',
        config)
    return batch_layout(config)


def source_requests() -> list[BackendRequest]:
    """Shapes [1, 2, 3] and [2, 4, 3]: element counts 6 and 24, three batch items."""
    return [BackendRequest({"X": np.zeros(shape, np.float32)}, ("Y",)) for shape in ((1, 2, 3), (2, 4, 3))]


@pytest.mark.parametrize(("kind", "dtype", "expected"), [
    ("BATCH_ELEMENT_COUNT", "TYPE_INT32", [6, 24]),
    ("BATCH_ACCUMULATED_ELEMENT_COUNT", "TYPE_FP32", [6, 30]),
    ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "TYPE_INT32", [0, 6, 30]),
    ("BATCH_ITEM_SHAPE", "TYPE_INT32", [[2, 3], [4, 3], [4, 3]]),
    ("BATCH_ITEM_SHAPE_FLATTEN", "TYPE_FP32", [2, 3, 4, 3, 4, 3]),
])
def test_each_batch_input_kind_is_computed_as_triton_does(kind: str, dtype: str, expected: list) -> None:
    layout = layout_of(f'batch_input {{ kind: {kind} target_name: ["A", "B"] data_type: {dtype} source_input: "X" }}')
    feed, sizes = gather_inputs(source_requests(), layout=layout)
    assert sizes == [1, 2] and feed["X"].shape == (30,)  # the ragged input, flat
    assert feed["A"].dtype == (np.int32 if dtype == "TYPE_INT32" else np.float32)
    assert feed["A"].tolist() == feed["B"].tolist() == expected  # every target gets it


def test_batch_max_element_count_is_given_as_the_shape() -> None:
    layout = layout_of('batch_input { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "M" '
                       'data_type: TYPE_INT32 source_input: "X" }')
    feed, _ = gather_inputs(source_requests(), ["X"], layout=layout)
    assert list(feed) == ["X", "M"] and feed["M"].shape == (24,)


def test_a_request_without_a_batch_inputs_source_is_refused_clearly() -> None:
    """An optional source input that a request left out: a clear 400, not a KeyError."""
    layout = layout_of('batch_input { kind: BATCH_ELEMENT_COUNT target_name: "C" '
                       'data_type: TYPE_INT32 source_input: "X" }')
    request = BackendRequest({}, ("Y",), request_id="r1")
    with pytest.raises(InvalidArgument) as caught:
        gather_inputs([request], layout=layout)
    assert str(caught.value) == ("[request id: r1] batch input 'C' needs its source input 'X', "
                                 "which the request does not carry")


# ---------------------------------------------------------------- scatter outputs

SCATTER = 'batch_output { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "Y" source_input: "X" }'


def test_a_scatter_output_is_split_by_each_requests_input_shape() -> None:
    requests = source_requests()
    flat = np.arange(30, dtype=np.float32)
    responses = split_outputs(requests, {"Y": flat}, [1, 2], layout_of(batch_output=SCATTER, dims="-1, 3"))
    first, second = (r.outputs["Y"] for r in responses)
    assert first.shape == (1, 2, 3) and first.ravel().tolist() == list(range(6))
    assert second.shape == (2, 4, 3) and second.ravel().tolist() == list(range(6, 30))


def test_a_scatter_output_too_short_fails_its_requests() -> None:
    requests = source_requests()
    responses = split_outputs(requests, {"Y": np.zeros(10, np.float32)}, [1, 2],
                              layout_of(batch_output=SCATTER, dims="-1, 3"))
    for response in responses:
        assert isinstance(response.error, Unsupported)
        assert str(response.error) == (
            "[request id: <id_unknown>] failed to split the output tensor 'Y' in responses: "
            "expected at least 30 elements in model output, got 10")


# ---------------------------------------------------------------- bad configs

@pytest.mark.parametrize(("name", "edits", "shape", "reason"), [
    ("ragged_2d", (), ["b", "n"],
     "unable to load model 'ragged_2d', configuration expects model provides input with shape [-1]  "
     "for ragged input 'INPUT', model provides [-1,-1]"),
    # an optional input counts as an initializer, not a graph input: Triton's input count check
    # (before the ragged ones) refuses a graph input marked optional
    ("ragged_optional", (("allow_ragged_batch: true", "allow_ragged_batch: true optional: true"),
                         ("max_batch_size: 8", "max_batch_size: 0"), ("dynamic_batching", "#")), None,
     "unable to load model 'ragged_optional', configuration expects 2 inputs, model provides 3"),
    ("ragged_target", (('target_name: "COUNT"', 'target_name: "NUMBER"'),), None,
     "unable to load model 'ragged_target', unexpected batch input 'NUMBER' in model configuration; "
     "model provides ['COUNT', 'INDEX', 'INPUT']"),
    ("ragged_dtype", (("data_type: TYPE_INT32 source_input", "data_type: TYPE_FP32 source_input"),), None,
     "unable to load model 'ragged_dtype', configuration expects datatype TYPE_FP32 for batch input "
     "'COUNT', model provides TYPE_INT32"),
])
async def test_ragged_configs_the_model_cannot_take_fail_the_load(
        tmp_path: Path, name: str, edits: tuple[tuple[str, str], ...], shape: list | None,
        reason: str) -> None:
    config = RAGGED_CONFIG.replace('"ragged"', f'"{name}"')
    for old, new in edits:
        config = config.replace(old, new)
    write_model(tmp_path, name, config, ragged_graph(shape))
    async with Server(ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)) as server:
        (entry,) = await server.repository_index()
    assert entry["state"] == "UNAVAILABLE" and entry["reason"].endswith(reason), entry
