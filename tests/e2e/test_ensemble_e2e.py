"""Ensembles through the unmodified tritonclient (HTTP and gRPC) against the real server
process in explicit mode: composing models loaded with the ensemble, unload_dependents."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.testing.ensembles import build_ensemble_repository
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ensemble_server(tmp_path_factory: pytest.TempPathFactory):
    repo = build_ensemble_repository(tmp_path_factory.mktemp("e2e_ensembles"))
    server = ServerProcess([
        f"--model-repository={repo}", "--model-control-mode=explicit", "--load-model=ens_nested",
    ])
    yield server
    assert server.stop() == 0


def inputs(module, a: np.ndarray, b: np.ndarray) -> list:
    tensors = [module.InferInput(name, list(a.shape), "FP32") for name in ("IN0", "IN1")]
    tensors[0].set_data_from_numpy(a)
    tensors[1].set_data_from_numpy(b)
    return tensors


def test_ensembles_over_http_and_grpc(ensemble_server: ServerProcess) -> None:
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    b = np.ones((3, 16), np.float32)
    http = httpclient.InferenceServerClient(ensemble_server.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ensemble_server.grpc_port}")
    try:
        ready = {r["name"] for r in http.get_model_repository_index() if r.get("state") == "READY"}
        assert ready == {"ens_nested", "ens_diamond", "ens_chain", "add_sub", "identity16"}
        assert http.get_model_metadata("ens_nested")["platform"] == "ensemble"
        result = http.infer("ens_nested", inputs(httpclient, a, b))
        np.testing.assert_array_equal(result.as_numpy("SUM"), 2 * a + 2 * b)
        np.testing.assert_array_equal(result.as_numpy("DIFF"), 2 * a - 2 * b)
        requested = [grpcclient.InferRequestedOutput("OUT1")]
        result = grpc.infer("ens_diamond", inputs(grpcclient, a, b), outputs=requested)
        np.testing.assert_array_equal(result.as_numpy("OUT1"), 2 * b)
        assert result.as_numpy("OUT0") is None
        stats = http.get_inference_statistics("ens_nested")["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 1

        http.unload_model("ens_nested", unload_dependents=True)
        assert not any(r.get("state") == "READY" for r in http.get_model_repository_index())
        with pytest.raises(InferenceServerException, match=r"is not at ready state|no available versions"):
            http.infer("ens_chain", inputs(httpclient, a, b))
        grpc.load_model("ens_chain")
        result = grpc.infer("ens_chain", inputs(grpcclient, a, b))
        np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    finally:
        http.close()
        grpc.close()
