"""BF16 tensors (issue 33, cause 5): carried over HTTP binary data and gRPC raw contents into
and out of a Python model, as Triton's python backend carries them (``as_numpy()`` refused
with Triton's text, ``to_dlpack`` / ``from_dlpack`` instead; L0_backend_python ``test_bf16``).
JSON refuses BF16 both ways with Triton's texts."""

from __future__ import annotations

from typing import Any

import httpx
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.testing.process import ServerProcess
from workbench.testing.python_backend import copy_python_model

pytest.importorskip("torch")  # the model converts through torch's DLPack, as Triton's does


@pytest.fixture(scope="module")
def bf16_server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("bf16")
    copy_python_model(repo, "identity_bf16")
    process = ServerProcess([f"--model-repository={repo}"])
    yield process
    process.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bf16_in_and_out_of_a_python_model(bf16_server, protocol: str) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(bf16_server.url if protocol == "http" else bf16_server.grpc_url)
    try:
        data = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=ml_dtypes.bfloat16)
        tensor = module.InferInput("INPUT0", list(data.shape), "BF16")
        tensor.set_data_from_numpy(data)
        result = client.infer("identity_bf16", [tensor])
        out = result.as_numpy("OUTPUT0")
        assert out.dtype == data.dtype and out.shape == data.shape
        assert out.astype(np.float32).tolist() == (data.astype(np.float32) * 2).tolist()
        answered = result.get_output("OUTPUT0")
        assert (answered["datatype"] if protocol == "http" else answered.datatype) == "BF16"
    finally:
        client.close()


def test_bf16_over_json_is_refused_with_tritons_texts(bf16_server) -> None:
    client = httpclient.InferenceServerClient(bf16_server.url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1, 2], "BF16")
        tensor.set_data_from_numpy(np.ones((1, 2), dtype=ml_dtypes.bfloat16))
        json_output = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
        with pytest.raises(InferenceServerException, match="sending BF16 data via JSON is not supported"):
            client.infer("identity_bf16", [tensor], outputs=json_output)
    finally:
        client.close()
    body = {"inputs": [{"name": "INPUT0", "datatype": "BF16", "shape": [1, 2], "data": [1.0, 2.0]}]}
    reply = httpx.post(f"http://{bf16_server.url}/v2/models/identity_bf16/infer", json=body)
    assert reply.status_code == 400
    assert reply.json()["error"].startswith("receiving BF16 data via JSON is not supported")
