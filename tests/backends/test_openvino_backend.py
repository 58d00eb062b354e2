"""The openvino backend (``backend: "openvino"``) on real OpenVINO IR and ONNX files, on CPU."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.testing.models import ADD_SUB_CONFIG, add_sub_graph, write_model

ov = pytest.importorskip("openvino")

OV_CONFIG = ADD_SUB_CONFIG.replace('backend: "onnxruntime"', 'backend: "openvino"').replace(
    "max_batch_size: 8", "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 20000 }")


def write_ir(repo: Path, name: str = "add_sub", config: str = OV_CONFIG) -> Path:
    """add_sub as ``1/model.xml`` + ``1/model.bin`` (converted from the ONNX graph)."""
    folder = write_model(repo, name, config.replace('name: "add_sub"', f'name: "{name}"'),
                         add_sub_graph())
    onnx_path = folder / "1" / "model.onnx"
    ov.save_model(ov.convert_model(str(onnx_path)), str(folder / "1" / "model.xml"))
    onnx_path.unlink()
    return folder


def _request(a: np.ndarray, b: np.ndarray, model: str = "add_sub") -> InferenceRequest:
    return InferenceRequest(model, [Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)])


async def _start(repo: Path) -> Server:
    server = Server(ServerOptions(model_repository=[str(repo)], exit_on_error=False))
    await server.start()
    return server


async def test_ir_infer_and_concurrent_requests_batch(tmp_path: Path) -> None:
    write_ir(tmp_path)
    server = await _start(tmp_path)
    try:
        rng = np.random.default_rng(0)
        pairs = [(rng.random((n, 16), np.float32), rng.random((n, 16), np.float32))
                 for n in (1, 3, 2, 1, 1)]
        responses = await asyncio.gather(*(server.infer(_request(a, b)) for a, b in pairs))
        for (a, b), response in zip(pairs, responses, strict=True):
            out = {t.name: t.data for t in response.outputs}
            np.testing.assert_allclose(out["OUTPUT0"], a + b, rtol=1e-6)
            np.testing.assert_allclose(out["OUTPUT1"], a - b, rtol=1e-6)
        stats = (await server.statistics("add_sub"))["model_stats"][0]
        assert stats["inference_count"] == 8
        assert stats["execution_count"] < 5  # the dynamic batcher joined some requests
    finally:
        await server.stop()


async def test_onnx_file_read_by_openvino_and_parameters(tmp_path: Path) -> None:
    config = OV_CONFIG.replace('backend: "openvino"', 'backend: "openvino"\n'
                               'default_model_filename: "model.onnx"') + "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in
        {"NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1", "PERFORMANCE_HINT": "LATENCY"}.items())
    write_model(tmp_path, "add_sub", config, add_sub_graph())
    server = await _start(tmp_path)
    try:
        a = np.ones((2, 16), np.float32)
        response = await server.infer(_request(a, a))
        np.testing.assert_array_equal(response.outputs[0].data, a + a)
    finally:
        await server.stop()


@pytest.mark.parametrize(("change", "reason"), [
    (('name: "INPUT1" data_type: TYPE_FP32', 'name: "INPUT1" data_type: TYPE_INT32'),
     "configuration expects datatype TYPE_INT32 for input 'INPUT1', model provides TYPE_FP32"),
    (('name: "OUTPUT1"', 'name: "OUTPUT9"'), "unexpected output 'OUTPUT9' in model configuration"),
    (('{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }',
      '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 8 ] }'), "tensor 'INPUT0': the model expects"),
    (("KIND_CPU", "KIND_GPU"), "the openvino backend runs on CPU only"),
    (("instance_group", 'parameters { key: "PERFORMANCE_HINT" value { string_value: "FASTEST" } }\n'
      "instance_group"), "FASTEST"),
])
async def test_load_errors_are_clear(tmp_path: Path, change, reason) -> None:
    write_ir(tmp_path, config=OV_CONFIG.replace(*change))
    server = await _start(tmp_path)
    try:
        row = (await server.repository_index())[0]
        assert row["state"] == "UNAVAILABLE"
        assert reason in row["reason"], row["reason"]
    finally:
        await server.stop()


async def test_without_openvino_the_load_says_what_to_install(tmp_path: Path, monkeypatch) -> None:
    write_ir(tmp_path)
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino -> ImportError
    server = await _start(tmp_path)
    try:
        row = (await server.repository_index())[0]
        assert row["state"] == "UNAVAILABLE"
        assert "needs the 'openvino' package" in row["reason"] and "pip install" in row["reason"]
    finally:
        await server.stop()


async def test_digits_openvino_sample_over_http(sample_repository: Path, asgi_client) -> None:
    """digits_openvino holds digits_mlp v1's weights: same logits within 1e-4, accuracy >= 0.9."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    x_test = x_test.astype(np.float32)
    options = ServerOptions(model_repository=[str(sample_repository)], model_control_mode="explicit",
                            load_model=["digits_openvino", "digits_mlp"])
    async with Server(options) as server, asgi_client(server) as http:
        meta = (await http.get("/v2/models/digits_openvino")).json()
        assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}]
        assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
        logit_chunks: list[np.ndarray] = []
        reference_chunks: list[np.ndarray] = []
        for start in range(0, len(x_test), 64):
            chunk = x_test[start : start + 64]
            body = {"inputs": [{"name": "pixels", "shape": list(chunk.shape), "datatype": "FP32",
                                "data": chunk.ravel().tolist()}]}
            for path, sink in (("/v2/models/digits_openvino/infer", logit_chunks),
                               ("/v2/models/digits_mlp/versions/1/infer", reference_chunks)):
                reply = await http.post(path, json=body)
                assert reply.status_code == 200, reply.text
                (output,) = reply.json()["outputs"]
                sink.append(np.array(output["data"], np.float32).reshape(len(chunk), 10))
    logits, reference = np.concatenate(logit_chunks), np.concatenate(reference_chunks)
    assert float((logits.argmax(axis=1) == y_test).mean()) >= 0.9
    np.testing.assert_allclose(logits, reference, atol=1e-4)


# --- ragged batching (issue 19 item 4) -----------------------------------------------------------


def write_ragged_ir(repo: Path, name: str, graph=None) -> None:
    """The onnxruntime ragged test model (tests/backends/test_ragged_batching.py), or ``graph`` with
    its config, as OpenVINO IR."""
    from tests.backends.test_ragged_batching import RAGGED_CONFIG, ragged_graph

    config = RAGGED_CONFIG.replace('backend: "onnxruntime"', 'backend: "openvino"').replace(
        'name: "ragged"', f'name: "{name}"')
    write_ir_from(write_model(repo, name, config, graph or ragged_graph()))


def write_ir_from(folder: Path) -> None:
    onnx_path = folder / "1" / "model.onnx"
    ov.save_model(ov.convert_model(str(onnx_path)), str(folder / "1" / "model.xml"))
    onnx_path.unlink()


async def test_ragged_inputs_batch_inputs_and_scatter_output(tmp_path: Path) -> None:
    """Requests of lengths 3, 4, 5: one execution on the flat [12] input, batch inputs fed,
    OUTPUT split back in each request's own shape."""
    write_ragged_ir(tmp_path, "ragged")
    server = await _start(tmp_path)
    try:
        rows = [np.arange(start, start + n, dtype=np.float32).reshape(1, n)
                for n, start in ((3, 0.0), (4, 10.0), (5, 20.0))]
        responses = await asyncio.gather(*(
            server.infer(InferenceRequest("ragged", [Tensor("INPUT", "FP32", r)])) for r in rows))
        stats = (await server.statistics("ragged"))["model_stats"][0]
    finally:
        await server.stop()
    assert stats["execution_count"] == 1 and stats["inference_count"] == 3
    for row, (end, n), response in zip(rows, ((3, 3), (7, 4), (12, 5)), responses, strict=True):
        out = {t.name: t.data for t in response.outputs}
        np.testing.assert_array_equal(out["OUTPUT"], row * 2)
        assert out["END"].tolist() == [[end]] and out["SIZE"].tolist() == [[n]]
        assert out["TOTAL"].tolist() == [[12]]


async def test_a_ragged_input_the_model_takes_in_2d_fails_the_load(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(  # INPUT [b, n] -> OUTPUT: the ragged check fails first
        [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], "ragged_2d",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["b", "n"])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["b", "n"])])
    write_ragged_ir(tmp_path, "ragged_2d", graph)
    server = await _start(tmp_path)
    try:
        (row,) = await server.repository_index()
    finally:
        await server.stop()
    assert row["state"] == "UNAVAILABLE" and row["reason"].endswith(
        "configuration expects model provides input with shape [-1]  for ragged input 'INPUT', "
        "model provides [-1,-1]"), row


async def test_an_output_reshape_is_undone_for_the_client(tmp_path: Path) -> None:
    """dims [4] reshape [2,2] on an identity graph [batch,2,2]: the client gets [batch,4]."""
    from onnx import TensorProto

    from workbench.testing.models import identity_graph, reshape_config

    config = reshape_config("reshaped", "openvino", 8, "4", "2, 2") + 'default_model_filename: "model.onnx"\n'
    write_model(tmp_path, "reshaped", config, identity_graph(TensorProto.FLOAT, ["batch", 2, 2]))
    server = await _start(tmp_path)
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        response = await server.infer(InferenceRequest("reshaped", [Tensor("INPUT0", "FP32", x)]))
    finally:
        await server.stop()
    assert response.outputs[0].data.shape == (2, 4)
    np.testing.assert_array_equal(response.outputs[0].data, x)
