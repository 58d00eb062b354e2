"""Compression, classification, logging and trace settings through the real process and the
unmodified tritonclient HTTP client."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from workbench.testing.models import (
    SCORES_LABELS,
    build_classification_repository,
    build_test_repository,
)
from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def extensions_client(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("extensions")
    build_classification_repository(build_test_repository(repo))
    trace_file = repo / "trace.json"
    process = ServerProcess([f"--model-repository={repo}", f"--trace-config=triton,file={trace_file}"])
    client = httpclient.InferenceServerClient(process.url)
    yield client, trace_file
    client.close()
    process.stop()


def add_sub_inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list:
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, binary_data=binary)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("request_algorithm", ["gzip", "deflate", None])
@pytest.mark.parametrize("response_algorithm", ["gzip", "deflate", None])
@pytest.mark.parametrize("binary", [True, False])
def test_compression_round_trip(extensions_client, request_algorithm, response_algorithm, binary) -> None:
    client, _ = extensions_client
    rng = np.random.default_rng(7)
    a, b = rng.random((4, 16), dtype=np.float32), rng.random((4, 16), dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", add_sub_inputs(a, b, binary), outputs=outputs,
                          request_compression_algorithm=request_algorithm,
                          response_compression_algorithm=response_algorithm)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def expected_top(scores: np.ndarray, k: int) -> list[list[bytes]]:
    labels = dict(enumerate(SCORES_LABELS))
    rows = []
    for row in scores:
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
        texts = [f"{row[i]:f}:{i}" + (f":{labels[i]}" if i in labels else "") for i in order]
        rows.append([text.encode() for text in texts])
    return rows


@pytest.mark.parametrize("binary", [True, False])
def test_classification_top3(extensions_client, binary: bool) -> None:
    client, _ = extensions_client
    scores = np.random.default_rng(3).standard_normal((3, 5)).astype(np.float32)
    tensor = httpclient.InferInput("INPUT0", [3, 5], "FP32")
    tensor.set_data_from_numpy(scores)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=3)
    result = client.infer("scores", [tensor], outputs=[output])
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (3, 3)
    as_bytes = [[v.encode() if isinstance(v, str) else bytes(v) for v in row] for row in top]
    assert as_bytes == expected_top(scores, 3)


def test_log_settings(extensions_client) -> None:
    client, _ = extensions_client
    settings = client.get_log_settings()
    assert settings == {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                        "log_verbose_level": 0, "log_format": "default"}
    updated = client.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    assert updated["log_verbose_level"] == 1 and updated["log_format"] == "ISO8601"
    assert client.get_log_settings() == updated
    client.update_log_settings({"log_verbose_level": 0, "log_format": "default"})
    with pytest.raises(InferenceServerException, match="log file location can not be updated"):
        client.update_log_settings({"log_file": "/tmp/other.log"})


def test_trace_settings(extensions_client) -> None:
    client, trace_file = extensions_client
    assert client.get_trace_settings() == {
        "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
        "trace_file": str(trace_file), "trace_mode": "triton",
    }
    updated = client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "4"})
    assert updated["trace_level"] == ["TIMESTAMPS"] and updated["trace_rate"] == "4"
    model = client.update_trace_settings("add_sub", {"trace_count": "20"})
    assert model["trace_count"] == "20" and model["trace_rate"] == "4"
    assert client.get_trace_settings("add_sub")["trace_count"] == "20"
    assert client.get_trace_settings()["trace_count"] == "-1"
    cleared = client.update_trace_settings("add_sub", {"trace_count": None})
    assert cleared["trace_count"] == "-1"
    client.update_trace_settings(settings={"trace_level": None, "trace_rate": None})
    assert client.get_trace_settings()["trace_level"] == ["OFF"]
