"""ONNX models whose graph inputs/outputs are scalars (rank 0), as Triton's onnxruntime backend.

Triton compares dims only for tensors of rank > 0; for a scalar every configured dim must
be 1 (``dims: [1]`` or ``[1, 1]``), else the load fails with "scalar tensor ..., should only
provide 1 in the model configuration". The request carries the configured shape; the
backend feeds ONNX Runtime a scalar and gives the scalar output the configured dims.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from workbench import InferenceRequest, Server, ServerOptions, Tensor
from workbench.testing.models import identity_graph, write_model

pytestmark = pytest.mark.asyncio


def scalar_config(name: str, dims: str) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    for name, dims in (("scalar_1dim", "1"), ("scalar_2dim", "1, 1"), ("scalar_dims2", "2")):
        write_model(tmp_path, name, scalar_config(name, dims), identity_graph(TensorProto.FLOAT, []))
    return tmp_path


async def test_scalar_models_load_with_ones_and_serve_the_configured_shape(repository: Path) -> None:
    options = ServerOptions(model_repository=[str(repository)], exit_on_error=False)
    async with Server(options) as server:
        index = {r["name"]: r for r in await server.repository_index()}
        assert index["scalar_1dim"]["state"] == index["scalar_2dim"]["state"] == "READY"
        assert index["scalar_dims2"]["state"] == "UNAVAILABLE"
        assert index["scalar_dims2"]["reason"].endswith(
            "unable to load model 'scalar_dims2', scalar tensor 'INPUT0', should only provide 1 "
            "in the model configuration when the model doesn't support batching. Model "
            "configuration provided: [2].")
        for model, shape in (("scalar_1dim", (1,)), ("scalar_2dim", (1, 1))):
            data = np.full(shape, 2.5, np.float32)
            response = await server.infer(InferenceRequest(model, [Tensor("INPUT0", "FP32", data)]))
            assert response.outputs[0].data.shape == shape
            assert response.outputs[0].data.tolist() == data.tolist()
