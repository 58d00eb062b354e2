"""Ensembles that mix batching and non-batching models: the batch dimension is added or
dropped per step as Triton's ensemble scheduler does (``EnsembleContext::ReshapeTensorDims``),
and classification through an ensemble keeps the composing model's labels
(``model_lifecycle.cc``: the ensemble's label provider is completed from its steps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from onnx import TensorProto

from workbench import InferenceRequest, RequestedOutput, Server, ServerOptions, Tensor
from workbench.testing.ensembles import ensemble_config, write_ensemble
from workbench.testing.models import identity_graph, write_model

#: batching identity, any width: [-1] dims as upstream's ``nop_*`` models
ANY_CONFIG = """
name: "any_width"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

#: non-batching identity over [4], with labels on its output
FIXED_CONFIG = """
name: "fixed4"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""

LABELS = ["zero", "one", "two", "three"]
IN4 = [("IN", "TYPE_FP32", [4])]
OUT4 = [("OUT", "TYPE_FP32", [4])]


def _steps(*models: str) -> list:
    names = ["IN", *(f"t{i}" for i in range(len(models) - 1)), "OUT"]
    return [(m, {"INPUT0": names[i]}, {"OUTPUT0": names[i + 1]}) for i, m in enumerate(models)]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("batch_dims")
    write_model(repo, "any_width", ANY_CONFIG, identity_graph(TensorProto.FLOAT, ["b", "n"]))
    folder = write_model(repo, "fixed4", FIXED_CONFIG, identity_graph(TensorProto.FLOAT, [4]))
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    # non-batching ensemble: batching step first (as upstream's fan_* ensembles), then fixed4
    write_ensemble(repo, "nobatch_fan", ensemble_config(
        "nobatch_fan", IN4, OUT4, _steps("any_width", "fixed4", "any_width"), max_batch_size=0))
    # non-batching ensemble whose last step batches: the output loses the step's batch dim
    write_ensemble(repo, "nobatch_to_batch", ensemble_config(
        "nobatch_to_batch", IN4, OUT4, _steps("fixed4", "any_width"), max_batch_size=0))
    # batching ensemble over a non-batching model: the batch of 1 is dropped, then restored
    write_ensemble(repo, "batch_to_nobatch", ensemble_config(
        "batch_to_nobatch", IN4, OUT4, _steps("any_width", "fixed4"), max_batch_size=8))
    return repo


@pytest_asyncio.fixture
async def server(repository: Path):
    async with Server(ServerOptions(model_repository=[str(repository)])) as engine:
        yield engine


X = np.array([0.5, 3.0, 1.0, 2.0], np.float32)


def one(name: str, data: np.ndarray, **outputs) -> InferenceRequest:
    requested = [RequestedOutput("OUT", {"classification": k}) for k in outputs.values()]
    return InferenceRequest(name, [Tensor("IN", "FP32", data)], outputs=requested or None)


async def test_nonbatching_ensemble_feeds_a_batching_step(server: Server) -> None:
    response = await server.infer(one("nobatch_fan", X))
    assert response.outputs[0].data.shape == (4,)
    np.testing.assert_array_equal(response.outputs[0].data, X)


async def test_nonbatching_ensemble_output_from_a_batching_step(server: Server) -> None:
    response = await server.infer(one("nobatch_to_batch", X))
    assert response.outputs[0].data.shape == (4,)
    np.testing.assert_array_equal(response.outputs[0].data, X)


async def test_batching_ensemble_over_a_nonbatching_step(server: Server) -> None:
    response = await server.infer(one("batch_to_nobatch", X[None, :]))
    assert response.outputs[0].data.shape == (1, 4)
    np.testing.assert_array_equal(response.outputs[0].data, X[None, :])


async def test_classification_through_an_ensemble_keeps_the_step_labels(server: Server) -> None:
    direct = await server.infer(InferenceRequest(
        "fixed4", [Tensor("INPUT0", "FP32", X)],
        outputs=[RequestedOutput("OUTPUT0", {"classification": 2})]))
    assert direct.outputs[0].data.tolist() == [b"3.000000:1:one", b"2.000000:3:three"]
    # OUT is produced by fixed4's OUTPUT0 (labelled); the ensemble has no label file itself
    response = await server.infer(one("batch_to_nobatch", X[None, :], k=2))
    assert response.outputs[0].data.tolist() == [[b"3.000000:1:one", b"2.000000:3:three"]]
