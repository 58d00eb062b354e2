"""The digits_jpeg ensemble (DALI JPEG preprocessing -> digits_mlp) in the real server process,
through the unmodified tritonclient HTTP and gRPC clients: held-out digits sent as JPEG bytes
(UINT8 [1, n]), concurrently so that DALI batches JPEGs of different lengths; accuracy as
digits_mlp's on the raw pixels; a corrupt JPEG is a 400 / INVALID_ARGUMENT for that request."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tritonclient.utils import InferenceServerException

pytest.importorskip("nvidia.dali")
Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.e2e

N = 120  # held-out digits sent per protocol


def digit_jpeg(pixels: np.ndarray) -> np.ndarray:
    """One digit as the sample's 32x32 grayscale JPEG, as UINT8 [1, n_bytes]."""
    gray = np.clip(np.round(pixels.reshape(8, 8) * 255 / 16), 0, 255).astype(np.uint8)
    image = Image.fromarray(gray, mode="L").resize((32, 32), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return np.frombuffer(buffer.getvalue(), np.uint8).reshape(1, -1)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return x_test[:N].astype(np.float32), y_test[:N]


def _client(protocol: str, server):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.url, concurrency=8)
    return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)


def _infer(module, client, model: str, name: str, array: np.ndarray, output: str) -> np.ndarray:
    tensor = module.InferInput(name, list(array.shape), "UINT8" if array.dtype == np.uint8 else "FP32")
    tensor.set_data_from_numpy(array)
    result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput(output)])
    return result.as_numpy(output)


def _concurrently(protocol: str, module, client, jpegs: list[np.ndarray]) -> list[np.ndarray]:
    """The ensemble's logits of each JPEG, 8 requests in flight (HTTP: the client's async_infer
    on its gevent pool; gRPC: threads, its client is thread-safe)."""
    def tensor(jpeg: np.ndarray):
        t = module.InferInput("IMAGE", list(jpeg.shape), "UINT8")
        t.set_data_from_numpy(jpeg)
        return [t]
    if protocol == "http":
        pending = [client.async_infer("digits_jpeg", tensor(j)) for j in jpegs]
        return [p.get_result().as_numpy("logits") for p in pending]
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda j: _infer(module, client, "digits_jpeg", "IMAGE", j, "logits"), jpegs))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_digits_jpeg_ensemble_classifies_jpegs(sample_server, digits, protocol: str) -> None:
    pixels, labels = digits
    module, client = _client(protocol, sample_server)
    try:
        assert client.is_model_ready("digits_jpeg")
        meta = client.get_model_metadata("digits_jpeg_preprocess")
        assert (meta["platform"] if protocol == "http" else meta.platform) == "dali"
        jpegs = [digit_jpeg(p) for p in pixels]
        assert len({j.shape[1] for j in jpegs}) > 10  # JPEGs of many lengths
        logits = np.concatenate(_concurrently(protocol, module, client, jpegs))
        preprocessed = _infer(module, client, "digits_jpeg_preprocess", "IMAGE", jpegs[0], "PIXELS")
        reference = np.concatenate([_infer(module, client, "digits_mlp", "pixels", pixels[i : i + 64],
                                           "logits") for i in range(0, N, 64)])
    finally:
        client.close()
    assert logits.shape == (N, 10) and logits.dtype == np.float32
    assert preprocessed.shape == (1, 64)
    np.testing.assert_allclose(preprocessed[0], pixels[0], atol=0.5)
    accuracy, raw_accuracy = (float((a.argmax(1) == labels).mean()) for a in (logits, reference))
    assert accuracy >= raw_accuracy - 0.01 and accuracy >= 0.95, (accuracy, raw_accuracy)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_corrupt_jpeg_is_a_client_error(sample_server, digits, protocol: str) -> None:
    module, client = _client(protocol, sample_server)
    try:
        garbage = np.frombuffer(b"\xff\xd8\xff\xe0 definitely not a JPEG", np.uint8).reshape(1, -1)
        with pytest.raises(InferenceServerException) as caught:
            _infer(module, client, "digits_jpeg", "IMAGE", garbage, "logits")
        status = caught.value.status()
        assert status in ("400", "StatusCode.INVALID_ARGUMENT"), status
        assert "DALI failed to process the request's data" in caught.value.message()
        good = _infer(module, client, "digits_jpeg", "IMAGE", digit_jpeg(digits[0][0]), "logits")
        assert good.shape == (1, 10)
    finally:
        client.close()


def test_the_jpeg_example_client(sample_server, tmp_path, capsys) -> None:
    """examples/classify_digit_jpegs.py: the held-out digits (accuracy ok), then files, then a
    file that is no JPEG (exit 2, the server's 400 as a message, no traceback)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "classify_digit_jpegs.py"
    spec = importlib.util.spec_from_file_location("classify_digit_jpegs", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(["--url", sample_server.url]) == 0
    out = capsys.readouterr().out
    assert "450 JPEGs" in out and "ok" in out
    x, _ = load_digits(return_X_y=True)
    (tmp_path / "zero.jpg").write_bytes(example.digit_jpeg(x[0]))  # load_digits()'s first is a 0
    assert example.main(["--url", sample_server.url, str(tmp_path / "zero.jpg")]) == 0
    assert capsys.readouterr().out.strip().endswith("zero.jpg: 0")
    (tmp_path / "notes.txt").write_text("not a picture")
    assert example.main(["--url", sample_server.url, str(tmp_path / "notes.txt")]) == 2
    assert "DALI failed to process" in capsys.readouterr().err
