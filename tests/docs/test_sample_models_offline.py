"""The text, BLS and decoupled sample models, checked without a server.

The Python models' ``model.py`` files run here against a minimal stand-in for Triton's
``triton_python_backend_utils`` (only the calls they make), and the ensembles are replayed step by
step with onnxruntime: tokenizer -> minilm_encoder must equal ``SentenceTransformer.encode`` and
tokenizer -> text_classifier -> postprocessor the softmax of its trained linear head, within 1e-4.
Served versions of these checks belong with the Python backend and the ensemble scheduler.

The models come from ``sample_models/repository`` when it holds current builds of them; otherwise
they are built into a temporary folder (about 20 s). The shared repository is never written here.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_models"
sys.path.insert(0, str(SAMPLES))

# the build scripts: importable through the sys.path entry above, which mypy cannot follow
import build  # noqa: E402  sample_models/, put on sys.path above
import build_minilm  # noqa: E402  sample_models/, put on sys.path above
import build_sources  # noqa: E402  sample_models/, put on sys.path above
import build_text_classifier  # noqa: E402  sample_models/, put on sys.path above
import sentiment_lexicon  # noqa: E402  sample_models/, put on sys.path above

from workbench.testing.sentences import (  # noqa: E402
    PARAPHRASE_PAIR,
    SENTENCES,
    TEXT_INPUTS,
    UNRELATED_PAIR,
    perf_analyzer_input_data,
)

NEEDED = (
    "digits_mlp",
    "minilm_encoder",
    "text_classifier",
    "tokenizer",
    "postprocessor",
    "token_streamer",
    "digits_router",
    "text_embedder",
    "ensemble_pipeline",
)
ATOL = 1e-4
FINAL = 1  # TRITONSERVER_RESPONSE_COMPLETE_FINAL


# --- a minimal triton_python_backend_utils: only what the sample models call -------------------


class FakeTensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class FakeTritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class FakeResponse:
    def __init__(self, output_tensors=(), error=None, parameters=None) -> None:
        self._outputs, self._error = list(output_tensors), error

    def output_tensors(self) -> list[FakeTensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self):
        return self._error

    def as_dict(self) -> dict[str, np.ndarray]:
        return {t.name(): t.as_numpy() for t in self._outputs}


def sent(response: FakeResponse | None) -> FakeResponse:
    """A response a sender sent (``None`` there is a bare final flag: no response)."""
    assert response is not None, "a bare final flag where a response was expected"
    return response


class FakeSender:
    def __init__(self) -> None:
        self.sent: list[tuple[FakeResponse | None, int]] = []

    def send(self, response=None, flags: int = 0) -> None:
        assert not (self.sent and self.sent[-1][1] & FINAL), "send after the final flag"
        self.sent.append((response, flags))


class ServerRequest:
    """What execute() receives: inputs, the request's parameters (JSON text), a response sender."""

    def __init__(self, inputs: dict[str, np.ndarray], parameters: dict | None = None) -> None:
        self.inputs = [FakeTensor(k, v) for k, v in inputs.items()]
        self._parameters = json.dumps(parameters or {})
        self.sender = FakeSender()

    def parameters(self) -> str:
        return self._parameters

    def get_response_sender(self) -> FakeSender:
        return self.sender


class BlsRequest:
    """pb_utils.InferenceRequest for BLS; ``exec`` calls the test's ``executor``."""

    executor: ClassVar[Callable[[BlsRequest], FakeResponse] | None] = None

    def __init__(self, model_name, inputs, requested_output_names, model_version=-1, **_kw) -> None:
        self.model_name, self.inputs, self.model_version = model_name, inputs, model_version
        self.requested_output_names = requested_output_names

    def exec(self) -> FakeResponse:
        executor = type(self).executor
        assert executor is not None, "a BLS call in a test without a digits_bls executor"
        return executor(self)


def _input(request, name):
    return next((t for t in request.inputs if t.name() == name), None)


def _output(response, name):
    return next((t for t in response.output_tensors() if t.name() == name), None)


@pytest.fixture
def pb_utils(monkeypatch) -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    vars(module).update(
        Tensor=FakeTensor,
        TritonError=FakeTritonError,
        InferenceResponse=FakeResponse,
        InferenceRequest=BlsRequest,
        TritonModelException=type("TritonModelException", (Exception,), {}),
        TRITONSERVER_RESPONSE_COMPLETE_FINAL=FINAL,
        get_input_tensor_by_name=_input,
        get_output_tensor_by_name=_output,
        using_decoupled_model_transaction_policy=lambda cfg: bool(
            cfg.get("model_transaction_policy", {}).get("decoupled", False)
        ),
    )
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", module)
    monkeypatch.setattr(BlsRequest, "executor", None)
    return module


# --- the built models ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> built model folder: the shared repository's if current, else a fresh temporary build."""
    shared = SAMPLES / "repository"
    dirs, missing = {}, []
    for name in NEEDED:
        current = build.stale_reason(shared / name, build.recipe_digest(build.BUILDERS[name])) is None
        if current:
            dirs[name] = shared / name
        else:
            missing.append(name)
    if missing:
        out = tmp_path_factory.mktemp("samples")
        command = [sys.executable, str(SAMPLES / "build.py"), "--out", str(out)]
        subprocess.run(command + [a for n in missing for a in ("--model", n)], check=True, capture_output=True)
        dirs.update({name: out / name for name in missing})
    return dirs


@pytest.fixture(scope="session")
def st():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(build_minilm.source_dir()), device="cpu")


def ort_session(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def model_args(model_dir: Path, config=None) -> dict[str, str]:
    """The ``args`` Triton passes to initialize()."""
    from google.protobuf import json_format

    config = config or build_sources.parse_config((model_dir / "config.pbtxt").read_text())
    return {
        "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{model_dir.name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": "1",
        "model_name": model_dir.name,
    }


def load_python_model(model_dir: Path, monkeypatch, args: dict | None = None):
    """Import ``<model_dir>/1/model.py`` as Triton does (its folder on sys.path) and initialize it."""
    version_dir = model_dir / "1"
    monkeypatch.syspath_prepend(str(version_dir))
    monkeypatch.delitem(sys.modules, "minilm_tokenization", raising=False)
    spec = importlib.util.spec_from_file_location(f"_sample_{model_dir.name}_model", version_dir / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    if hasattr(model, "initialize"):
        model.initialize(args or model_args(model_dir))
    return model


def text_request(texts: list[str], name: str = "TEXT") -> ServerRequest:
    return ServerRequest({name: np.array([[t.encode()] for t in texts], dtype=np.object_)})


def load_helper():
    spec = importlib.util.spec_from_file_location(
        "_source_minilm_tokenization", build_sources.SHARED / build_sources.TOKENIZATION_HELPER
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- tokenization -------------------------------------------------------------------------------


def st_tokenize(st, texts: list[str]) -> dict[str, np.ndarray]:
    """sentence-transformers' own tokenization (``preprocess`` since v5.x, ``tokenize`` before)."""
    features = (st.preprocess if hasattr(st, "preprocess") else st.tokenize)(texts)
    return {k: v.numpy() for k, v in features.items() if hasattr(v, "numpy")}


def test_tokenizer_helper_matches_sentence_transformers(st) -> None:
    tokenizer = load_helper().BatchTokenizer(build_minilm.source_dir())
    got = tokenizer.encode(list(SENTENCES))
    want = st_tokenize(st, list(SENTENCES))
    assert set(want) == set(got)
    for name in got:  # both pad to the longest sentence, so the arrays are equal as they are
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert got["input_ids"].shape[1] == st.max_seq_length == 256  # the long passage is truncated
    for i, text in enumerate(SENTENCES[:5]):  # alone: the same ids, unpadded
        single = tokenizer.encode([text])
        n = int(got["attention_mask"][i].sum())
        assert single["input_ids"].shape == (1, n)
        np.testing.assert_array_equal(single["input_ids"][0], got["input_ids"][i, :n])


def test_tokenizer_model_pads_each_execution_to_its_longest(model_dirs, pb_utils, monkeypatch) -> None:
    model = load_python_model(model_dirs["tokenizer"], monkeypatch)
    groups = [list(SENTENCES[0:2]), list(SENTENCES[6:7]), list(SENTENCES[3:6])]
    responses = model.execute([text_request(g) for g in groups])
    assert len(responses) == 3 and not any(r.has_error() for r in responses)
    whole = load_helper().BatchTokenizer(build_minilm.source_dir()).encode([t for g in groups for t in g])
    offset = 0
    for group, response in zip(groups, responses, strict=True):
        out = response.as_dict()
        assert sorted(out) == ["attention_mask", "input_ids", "token_type_ids"]
        for name, array in out.items():
            assert array.dtype == np.int64 and array.shape == (len(group), whole[name].shape[1])
            np.testing.assert_array_equal(array, whole[name][offset : offset + len(group)])
        offset += len(group)


def test_tokenizer_model_rejects_text_that_is_not_utf8(model_dirs, pb_utils, monkeypatch) -> None:
    model = load_python_model(model_dirs["tokenizer"], monkeypatch)
    bad = ServerRequest({"TEXT": np.array([[b"\xff\xfe"]], dtype=np.object_)})
    good, failed, also_good = model.execute([text_request(["Hi!"]), bad, text_request(["Hello there."])])
    assert failed.has_error() and failed.error().code() == FakeTritonError.INVALID_ARG
    assert "UTF-8" in failed.error().message()
    # "Hi!" has 4 tokens with [CLS] and [SEP], "Hello there." 5: both leave padded to 5
    assert good.as_dict()["input_ids"].shape == also_good.as_dict()["input_ids"].shape == (1, 5)
    assert good.as_dict()["attention_mask"].tolist() == [[1, 1, 1, 1, 0]]


class RecordingTokenizer:
    """The real ``tokenizers.Tokenizer``, recording the longest text it was given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.longest = 0

    def encode(self, text, *args, **kwargs):
        self.longest = max(self.longest, len(text))
        return self.tokenizer.encode(text, *args, **kwargs)

    def encode_batch(self, texts, *args, **kwargs):
        self.longest = max([self.longest, *(len(t) for t in texts)])
        return self.tokenizer.encode_batch(texts, *args, **kwargs)


def odd_texts() -> list[str]:
    """Long texts (more than 256 pieces, several windows) that stress where a text may be cut:
    no spaces, punctuation only, CJK, accents the normalizer drops, control characters."""
    rng = np.random.default_rng(7)
    pieces = ["word", "Tokenization", "café", "naïve", "日本語", "\u0301", "\x1c", "\x85", "\u00a0",
              "...", "!", "-", "'s", "\t", "\n", " ", " ", "  ", "emoji😀", "x" * 120]
    texts = ["".join(rng.choice(pieces, size=n)) for n in (3000, 9000, 30000)]
    texts.append("a" * 50000)  # one word: [UNK]
    texts.append("\u0301" * 20000 + " hello world" * 300)  # thousands of characters that vanish
    texts.append(("Hello, world. " * 40) + "x" * 20000)
    return texts


def test_tokenizer_truncates_long_texts_like_sentence_transformers_with_bounded_work(st) -> None:
    tokenizer = load_helper().BatchTokenizer(build_minilm.source_dir())
    tokenizer.tokenizer = recording = RecordingTokenizer(tokenizer.tokenizer)
    book = " ".join(SENTENCES) * 500  # about 1 MB of ordinary prose
    got = tokenizer.encode([book])
    np.testing.assert_array_equal(got["input_ids"], st_tokenize(st, [book])["input_ids"])
    assert got["input_ids"].shape == (1, 256)
    assert recording.longest <= 4096 < len(book)  # only the first window was tokenized
    for text in odd_texts():
        got, want = tokenizer.encode([text]), st_tokenize(st, [text])
        for name in got:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} of {text[:30]!r}")


def test_tokenizer_model_refuses_a_text_over_1_mib(model_dirs, pb_utils, monkeypatch) -> None:
    model = load_python_model(model_dirs["tokenizer"], monkeypatch)
    huge = ServerRequest({"TEXT": np.array([[b"ok"], [b"x " * (512 * 1024 + 1)]], dtype=np.object_)})
    good, failed = model.execute([text_request(["Hi!"]), huge])
    assert failed.has_error() and failed.error().code() == FakeTritonError.INVALID_ARG
    assert failed.error().message() == ("TEXT element 1 is 1048578 bytes; at most 1048576 bytes are "
                                        "accepted (only the first 256 word pieces are used)")
    assert good.as_dict()["input_ids"].shape == (1, 4)


# --- the ensembles, step by step ------------------------------------------------------------------


def run_tokenizer(model_dirs, monkeypatch, groups: list[list[str]]) -> list[dict[str, np.ndarray]]:
    model = load_python_model(model_dirs["tokenizer"], monkeypatch)
    return [r.as_dict() for r in model.execute([text_request(g) for g in groups])]


def test_text_embedder_steps_equal_sentence_transformers(model_dirs, pb_utils, monkeypatch, st) -> None:
    groups = [list(SENTENCES[:4]), list(SENTENCES[4:5]), list(SENTENCES[5:])]
    encoder = ort_session(model_dirs["minilm_encoder"] / "1" / "model.onnx")
    embeddings = np.concatenate(
        [encoder.run(["sentence_embedding"], feeds)[0] for feeds in run_tokenizer(model_dirs, monkeypatch, groups)]
    )
    reference = st.encode(list(SENTENCES), convert_to_numpy=True, show_progress_bar=False)
    assert embeddings.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(embeddings, reference, atol=ATOL, rtol=0)
    index = {s: i for i, s in enumerate(SENTENCES)}
    cos = lambda pair: float(embeddings[index[pair[0]]] @ embeddings[index[pair[1]]])  # noqa: E731
    assert cos(PARAPHRASE_PAIR) > 0.7 and cos(UNRELATED_PAIR) < 0.2


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_ensemble_pipeline_steps_classify_obvious_sentences(model_dirs, pb_utils, monkeypatch, st) -> None:
    sentences = [s for s, _ in build_text_classifier.EXPECTED_LABELS] + list(SENTENCES[:4])
    classifier = ort_session(model_dirs["text_classifier"] / "1" / "model.onnx")
    postprocessor = load_python_model(model_dirs["postprocessor"], monkeypatch)
    logit_chunks: list[np.ndarray] = []
    prediction_chunks: list[np.ndarray] = []
    for feeds in run_tokenizer(model_dirs, monkeypatch, [sentences[:3], sentences[3:]]):
        logit_chunks.append(classifier.run(["LOGITS"], feeds)[0])
        (response,) = postprocessor.execute([ServerRequest({"LOGITS": logit_chunks[-1]})])
        prediction_chunks.append(response.as_dict()["PREDICTION"])
    logits, predictions = np.concatenate(logit_chunks), np.concatenate(prediction_chunks)
    weight, bias = build_text_classifier.read_head(model_dirs["text_classifier"] / "1" / "model.onnx")
    assert weight.shape == (3, 384) and bias.shape == (3,) and weight.dtype == bias.dtype == np.float32
    reference = st.encode(sentences, convert_to_numpy=True, show_progress_bar=False) @ weight.T + bias
    np.testing.assert_allclose(logits, reference, atol=ATOL, rtol=0)
    np.testing.assert_allclose(predictions, softmax(reference), atol=ATOL, rtol=0)
    assert predictions.dtype == np.float32 and predictions.shape == (len(sentences), 3)
    np.testing.assert_allclose(predictions.sum(axis=1), 1.0, atol=1e-6)
    got = [build_text_classifier.LABELS[i] for i in predictions.argmax(axis=1)]
    assert got[: len(build_text_classifier.EXPECTED_LABELS)] == [e for _, e in build_text_classifier.EXPECTED_LABELS]


def test_text_classifier_build_recorded_its_verification(model_dirs) -> None:
    info = json.loads((model_dirs["text_classifier"] / "build_info.json").read_text())["details"]
    check = info["verification"]
    assert info["labels"] == ["negative", "neutral", "positive"]
    assert max(v for k, v in check.items() if k.startswith("max_abs_diff")) <= ATOL
    assert all(p["got"] == p["expected"] for p in check["predictions"].values())
    assert set(check["predictions"]) == {s for s, _ in build_text_classifier.EXPECTED_LABELS}
    head = info["head"]  # trained on the lexicon; measured on words it did not see
    assert head["held_out_accuracy"] >= head["min_held_out_accuracy"] == build_text_classifier.MIN_HELD_OUT_ACCURACY
    assert head["n_train"] > 1000 and head["n_held_out"] > 200
    assert min(head["held_out_recall"].values()) > 0.5


def test_sentiment_lexicon_labels_and_split() -> None:
    # text_classifier's training set: the lexicon textblob's wheel ships, read without a download
    assert [sentiment_lexicon.label_of(p, s) for p, s in
            ((-0.1, 1.0), (0.1, 1.0), (0.05, 0.3), (-0.05, 0.0), (0.0, 0.31))] == [0, 2, 1, 1, None]
    examples = sentiment_lexicon.load_examples()
    assert len(examples) > 2000 and len({e.text for e in examples}) == len(examples)
    counts = [sum(e.label == k for e in examples) for k in range(3)]
    assert min(counts) > 500
    rude = [e for e in examples if e.form == "rude" and e.text == "rude: lacking civility or good manners"]
    assert [e.label for e in rude] == [0]
    held_out = {e.form for e in examples if e.held_out}
    assert 0.15 < len(held_out) / len({e.form for e in examples}) < 0.25
    assert not held_out & {e.form for e in examples if not e.held_out}  # a word is on one side only


def test_postprocessor_softmax_is_stable(model_dirs, pb_utils, monkeypatch) -> None:
    model = load_python_model(model_dirs["postprocessor"], monkeypatch)
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 0.0, 0.0], [-3.0, 1.5, 2.0]], np.float32)
    out = [r.as_dict()["PREDICTION"] for r in model.execute([ServerRequest({"LOGITS": logits[:2]}),
                                                             ServerRequest({"LOGITS": logits[2:]})])]
    prediction = np.concatenate(out)
    assert prediction.dtype == np.float32 and np.isfinite(prediction).all()
    np.testing.assert_allclose(prediction[0], [1, 0, 0], atol=1e-7)
    np.testing.assert_allclose(prediction[1], [1 / 3] * 3, atol=1e-7)
    np.testing.assert_allclose(prediction[2], softmax(logits[2].astype(np.float64)), atol=1e-7)


# --- decoupled: token_streamer ------------------------------------------------------------------


def test_token_streamer_sends_one_response_per_word_piece(model_dirs, pb_utils, monkeypatch, st) -> None:
    model = load_python_model(model_dirs["token_streamer"], monkeypatch)
    text = "Le café près de la gare ouvre à sept heures."
    requests = [
        ServerRequest({"TEXT": np.array([text.encode()], dtype=np.object_)}),
        ServerRequest({"TEXT": np.array([b"   "], dtype=np.object_)}),
        ServerRequest({"TEXT": np.array([b"\xff"], dtype=np.object_)}),
    ]
    assert model.execute(requests) is None
    streamed, blank, bad = (r.sender.sent for r in requests)
    assert streamed[-1] == (None, FINAL) and all(flags == 0 for _, flags in streamed[:-1])
    tokens = [sent(r).as_dict()["TOKEN"] for r, _ in streamed[:-1]]
    indexes = [sent(r).as_dict()["INDEX"] for r, _ in streamed[:-1]]
    assert all(t.dtype == np.object_ and t.shape == (1,) for t in tokens)
    assert all(i.dtype == np.int32 and i.shape == (1,) for i in indexes)
    assert [t[0].decode() for t in tokens] == st.tokenizer.tokenize(text)  # e.g. "cafe", "pre", "##s"
    assert [int(i[0]) for i in indexes] == list(range(len(tokens)))
    assert blank == [(None, FINAL)]
    (response, flags), = bad
    assert flags == FINAL and sent(response).error().code() == FakeTritonError.INVALID_ARG


def test_token_streamer_requires_the_decoupled_policy(model_dirs, pb_utils, monkeypatch) -> None:
    model_dir = model_dirs["token_streamer"]
    config = build_sources.parse_config((model_dir / "config.pbtxt").read_text())
    config.model_transaction_policy.decoupled = False
    with pytest.raises(pb_utils.TritonModelException, match="decoupled: true"):
        load_python_model(model_dir, monkeypatch, model_args(model_dir, config))


# --- BLS: digits_router ---------------------------------------------------------------------------


@pytest.fixture
def digits_bls(model_dirs, pb_utils):
    """Routes BLS requests for digits_mlp to onnxruntime on the built version; records the calls."""
    sessions = {v: ort_session(model_dirs["digits_mlp"] / str(v) / "model.onnx") for v in (1, 2)}
    calls = []

    def executor(request: BlsRequest) -> FakeResponse:
        calls.append((request.model_name, request.model_version, request.requested_output_names))
        if request.model_version not in sessions:
            return FakeResponse(error=FakeTritonError(f"unknown version {request.model_version}"))
        (pixels,) = request.inputs
        logits = sessions[request.model_version].run(["logits"], {pixels.name(): pixels.as_numpy()})[0]
        return FakeResponse([FakeTensor("logits", logits)])

    BlsRequest.executor = staticmethod(executor)
    return sessions, calls


def test_digits_router_picks_the_version(model_dirs, digits_bls, monkeypatch) -> None:
    from sklearn.datasets import load_digits

    sessions, calls = digits_bls
    model = load_python_model(model_dirs["digits_router"], monkeypatch)
    pixels = load_digits().data[:5].astype(np.float32)
    asks: list[dict[str, object]] = [{"digits_version": "1"}, {"digits_version": 2}, {}, {"digits_version": " 1 "}]
    responses = model.execute([ServerRequest({"pixels": pixels[i : i + 2]}, p) for i, p in enumerate(asks)])
    assert [c[1] for c in calls] == [1, 2, 2, 1]
    assert all(c[0] == "digits_mlp" and c[2] == ["logits"] for c in calls)
    for i, (response, version) in enumerate(zip(responses, [1, 2, 2, 1], strict=True)):
        out = response.as_dict()
        want = sessions[version].run(["logits"], {"pixels": pixels[i : i + 2]})[0]
        np.testing.assert_array_equal(out["logits"], want)
        assert out["version_used"].dtype == np.int32 and out["version_used"].tolist() == [[version]] * 2


@pytest.mark.parametrize("value", ["3", "latest", 0, True, 1.5, ""])
def test_digits_router_rejects_a_bad_version(model_dirs, digits_bls, monkeypatch, value) -> None:
    _sessions, calls = digits_bls
    model = load_python_model(model_dirs["digits_router"], monkeypatch)
    (response,) = model.execute([ServerRequest({"pixels": np.zeros((1, 64), np.float32)}, {"digits_version": value})])
    assert response.has_error() and response.error().code() == FakeTritonError.INVALID_ARG
    assert "'digits_version' must be \"1\" or \"2\"" in response.error().message()
    assert calls == []


def test_digits_router_reports_a_failed_bls_call(model_dirs, digits_bls, monkeypatch) -> None:
    config = build_sources.parse_config((model_dirs["digits_router"] / "config.pbtxt").read_text())
    config.parameters["digits_versions"].string_value = "1,2,7"
    model = load_python_model(model_dirs["digits_router"], monkeypatch, model_args(model_dirs["digits_router"], config))
    (response,) = model.execute([ServerRequest({"pixels": np.zeros((1, 64), np.float32)})])
    assert response.has_error() and "digits_mlp version 7 failed: unknown version 7" in response.error().message()


# --- configs, build checks, bench data ------------------------------------------------------------


def test_built_folders_hold_what_triton_needs(model_dirs) -> None:
    from workbench.config.validate import validate_model_config

    for name in NEEDED:
        config = build_sources.parse_config((model_dirs[name] / "config.pbtxt").read_text())
        validate_model_config(config, name)
        assert config.max_batch_size == (0 if name == "token_streamer" else 64), name
    for name in ("tokenizer", "token_streamer"):
        assert (model_dirs[name] / "1" / "tokenizer.json").is_file()
        assert (model_dirs[name] / "1" / "minilm_tokenization.py").is_file()
    assert (model_dirs["tokenizer"] / "1" / "sentence_bert_config.json").is_file()
    for name in ("text_embedder", "ensemble_pipeline"):
        assert (model_dirs[name] / "1").is_dir()


def test_ensemble_check_catches_a_wrong_mapping() -> None:
    config = build_sources.parse_config((build_sources.ENSEMBLES / "text_embedder" / "config.pbtxt").read_text())
    build_sources.check_ensemble(Path(), config)
    config.ensemble_scheduling.step[1].output_map["last_hidden_state"] = "EMBEDDING"
    del config.ensemble_scheduling.step[1].output_map["sentence_embedding"]
    with pytest.raises(RuntimeError, match="output 'EMBEDDING'"):
        build_sources.check_ensemble(Path(), config)
    config.ensemble_scheduling.step[0].model_name = "postprocessor"
    with pytest.raises(RuntimeError, match="postprocessor has no output 'input_ids'"):
        build_sources.check_ensemble(Path(), config)


def test_changed_python_model_source_makes_the_build_stale(tmp_path, monkeypatch) -> None:
    source = tmp_path / "postprocessor"
    build_sources.copy_sources(build_sources.PYTHON_MODELS / "postprocessor", source)
    builder = build_sources.SourceModel("postprocessor", source)
    before = build.recipe_digest(builder)
    (source / "1" / "model.py").write_text((source / "1" / "model.py").read_text() + "\n# edited\n")
    assert build.recipe_digest(builder) != before


@pytest.mark.parametrize("filename", sorted(TEXT_INPUTS))
def test_bench_input_data_is_current(filename) -> None:
    committed = json.loads((ROOT / "bench" / "data" / filename).read_text())
    assert committed == perf_analyzer_input_data(TEXT_INPUTS[filename])
    assert all(next(iter(entry.values()))["shape"] == [1] for entry in committed["data"])


def test_token_streamer_refuses_a_text_over_64_kib_before_tokenizing(model_dirs, pb_utils, monkeypatch) -> None:
    """One response per word piece: a 1 MiB text would be ~250k responses; refused with one."""
    model = load_python_model(model_dirs["token_streamer"], monkeypatch)
    request = ServerRequest({"TEXT": np.array([b"word " * (16 * 1024)], dtype=np.object_)})
    assert model.execute([request]) is None
    (response, flags), = request.sender.sent
    assert flags == FINAL and sent(response).error().code() == FakeTritonError.INVALID_ARG
    assert sent(response).error().message() == ("TEXT element 0 is 81920 bytes; at most 65536 bytes are "
                                          "accepted (one response per word piece)")
