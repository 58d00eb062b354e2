"""An output's ``reshape`` is undone on the way out, as Triton's core does
(``InferenceResponse::Output::Reshape``): the model produces the ``reshape`` shape, the client
gets the config's ``dims`` (batch dim kept, each -1 taken in order from the model's -1
positions), and the model metadata says ``dims``. Served by ``workbench serve`` and read with
tritonclient over HTTP and gRPC, for an ONNX and a Python model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto

from workbench.testing.models import identity_graph, reshape_config, write_model
from workbench.testing.process import ServerProcess
from workbench.testing.python_backend import copy_python_model

#: name -> (max_batch_size, dims, reshape, ONNX graph shape, request shape)
CASES: dict[str, tuple[int, str, str, list, tuple[int, ...]]] = {
    "scalar": (8, "1", "", ["batch"], (2, 1)),  # dims [1] reshape [] (Triton's scalar idiom)
    "square": (8, "4", "2, 2", ["batch", 2, 2], (1, 4)),
    "variable": (8, "-1, 4", "-1, 2, 2", ["batch", "n", 2, 2], (2, 3, 4)),
    "unbatched": (0, "4", "2, 2", [2, 2], (4,)),
}


@pytest.fixture(scope="module")
def reshape_server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("reshape")
    for case, (max_batch, dims, reshape, graph_shape, _) in CASES.items():
        write_model(repo, f"onnx_{case}", reshape_config(f"onnx_{case}", "onnxruntime", max_batch, dims, reshape),
                    identity_graph(TensorProto.FLOAT, graph_shape))
        folder = copy_python_model(repo, "identity", f"python_{case}")
        (folder / "config.pbtxt").write_text(reshape_config(f"python_{case}", "python", max_batch, dims, reshape))
    process = ServerProcess([f"--model-repository={repo}"])
    yield process
    process.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("backend", ["onnx", "python"])
def test_outputs_come_back_in_the_configured_dims(reshape_server, backend: str, protocol: str) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(reshape_server.url if protocol == "http" else reshape_server.grpc_url)
    try:
        for case, (max_batch, dims, _, _, shape) in CASES.items():
            model = f"{backend}_{case}"
            metadata = client.get_model_metadata(model, as_json=True) if protocol == "grpc" else \
                client.get_model_metadata(model)
            expected_meta = ([-1] if max_batch else []) + [int(d) for d in dims.split(",")]
            for entry in (metadata["inputs"][0], metadata["outputs"][0]):
                assert [int(d) for d in entry["shape"]] == expected_meta, (model, entry)
            data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
            tensor = module.InferInput("INPUT0", list(shape), "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer(model, [tensor])
            out = result.as_numpy("OUTPUT0")
            assert out.shape == shape, (model, out.shape)
            assert np.array_equal(out, data), model
            answered = result.get_output("OUTPUT0")
            answered_shape = answered["shape"] if protocol == "http" else list(answered.shape)
            assert [int(d) for d in answered_shape] == list(shape), model
    finally:
        client.close()
