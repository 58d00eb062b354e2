"""The digits samples of the other CPU backends (TorchScript via the pytorch backend, OpenVINO IR via
the openvino backend) in the real server process, through the unmodified tritonclient HTTP and gRPC
clients: same logits as digits_mlp version 1 (same weights), accuracy >= 0.9 on sklearn's held-out
digits."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return x_test.astype(np.float32), y_test


def logits_of(module, client, model: str, input_name: str, output_name: str, pixels: np.ndarray,
              version: str = "") -> np.ndarray:
    chunks = []
    for start in range(0, len(pixels), 64):
        chunk = pixels[start : start + 64]
        tensor = module.InferInput(input_name, list(chunk.shape), "FP32")
        tensor.set_data_from_numpy(chunk)
        result = client.infer(model, [tensor], model_version=version,
                               outputs=[module.InferRequestedOutput(output_name)])
        chunks.append(result.as_numpy(output_name))
    return np.concatenate(chunks)


#: (model, input, output, what the model metadata reports as its platform)
BACKEND_SAMPLES = [
    ("digits_torchscript", "INPUT__0", "OUTPUT__0", "pytorch_libtorch"),
    ("digits_openvino", "pixels", "logits", "openvino"),
]


@pytest.mark.parametrize("model, input_name, output_name, platform", BACKEND_SAMPLES,
                         ids=[m for m, *_ in BACKEND_SAMPLES])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_backend_sample_matches_digits_mlp_v1(sample_server, digits, protocol: str, model: str,
                                             input_name: str, output_name: str, platform: str) -> None:
    pixels, labels = digits
    if protocol == "http":
        module, client = httpclient, httpclient.InferenceServerClient(sample_server.url)
    else:
        module, client = grpcclient, grpcclient.InferenceServerClient(sample_server.grpc_url)
    try:
        assert client.is_model_ready(model)
        metadata = client.get_model_metadata(model)
        assert (metadata["platform"] if protocol == "http" else metadata.platform) == platform
        logits = logits_of(module, client, model, input_name, output_name, pixels)
        reference = logits_of(module, client, "digits_mlp", "pixels", "logits", pixels, version="1")
    finally:
        client.close()
    assert logits.shape == (len(pixels), 10) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, reference, atol=1e-4)
    assert float((logits.argmax(axis=1) == labels).mean()) >= 0.9
