"""The OpenAI-compatible routes with the real, unmodified ``openai`` package as the client,
against a real ``workbench serve`` process and a real Jupyter server hosting the engine
(its v2 ports): models, embeddings (float and base64, equal to the v2 answer of the same
model; usage equal to the tokenizer step's token count), completions and chat completions
(plain and streamed), load / unload, errors in OpenAI's shape."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import tritonclient.http as httpclient

from workbench.testing.process import JupyterProcess, ServerProcess

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ENABLE_FILE = ROOT / "jupyter-config" / "jupyter_server_config.d" / "workbench.json"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "tokenizer", "Überraschung! 🎉 " * 3]
LONG = "word " * 400  # 400 word pieces: the encoder sees 256 ([CLS] + 254 + [SEP])


@pytest.fixture(scope="module")
def openai_server(sample_repository: Path):
    """``workbench serve`` in explicit mode with the embedding and streaming samples."""
    process = ServerProcess([f"--model-repository={sample_repository}", "--model-control-mode=explicit",
                             "--load-model=text_embedder", "--load-model=token_streamer"])
    yield process
    process.stop()


@pytest.fixture
def client(openai_server: ServerProcess):
    with openai.OpenAI(base_url=f"http://{openai_server.url}/v1", api_key="unused", max_retries=0) as oa:
        yield oa


def v2_embeddings(url: str, texts: list[str]) -> np.ndarray:
    with httpclient.InferenceServerClient(url) as triton:
        text = httpclient.InferInput("TEXT", [len(texts), 1], "BYTES")
        text.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object))
        return triton.infer("text_embedder", [text]).as_numpy("EMBEDDING")


def tokenizer_counts(url: str, texts: list[str]) -> list[int]:
    """What the ensemble's tokenizer step gives the encoder, text by text: its attention mask."""
    counts = []
    with httpclient.InferenceServerClient(url) as triton:
        for t in texts:
            text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            text.set_data_from_numpy(np.array([[t.encode()]], dtype=object))
            counts.append(int(triton.infer("tokenizer", [text]).as_numpy("attention_mask").sum()))
    return counts


def check_embeddings(oa: openai.OpenAI, url: str) -> None:
    expected = v2_embeddings(url, TEXTS)
    answer = oa.embeddings.create(model="text_embedder", input=TEXTS)
    assert [d.index for d in answer.data] == [0, 1, 2] and answer.model == "text_embedder"
    assert np.array_equal(np.array([d.embedding for d in answer.data], np.float32), expected)
    encoded = oa.embeddings.create(model="text_embedder", input=TEXTS, encoding_format="base64")
    decoded = np.stack([np.frombuffer(base64.b64decode(str(d.embedding)), "<f4") for d in encoded.data])
    assert np.array_equal(decoded, expected)
    single = oa.embeddings.create(model="text_embedder", input=TEXTS[0])  # padded alone: v2 alone
    assert np.array_equal(np.array(single.data[0].embedding, np.float32), v2_embeddings(url, TEXTS[:1])[0])
    tokens = sum(tokenizer_counts(url, TEXTS))
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (tokens, tokens)


def check_streamed_completion(oa: openai.OpenAI) -> None:
    chunks = list(oa.completions.create(model="token_streamer", prompt="tokenizer works", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == "token##izerworks"
    assert [c.choices[0].finish_reason for c in chunks][-2:] == [None, "stop"]


def test_models_are_listed_and_retrieved(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert {"text_embedder", "token_streamer", "tokenizer", "minilm_encoder"} <= set(ids)
    model = client.models.retrieve("text_embedder")
    assert (model.id, model.object, model.owned_by) == ("text_embedder", "model", "Triton Inference Server")
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("no_such_model")
    assert refused.value.code == "model_not_found" and "Unknown model: no_such_model" in refused.value.message


def test_embeddings_equal_the_v2_answer_with_the_tokenizers_count(client: openai.OpenAI,
                                                                   openai_server: ServerProcess) -> None:
    check_embeddings(client, openai_server.url)
    long = client.embeddings.create(model="text_embedder", input=LONG)
    assert long.usage.prompt_tokens == tokenizer_counts(openai_server.url, [LONG])[0] == 256
    with httpclient.InferenceServerClient(openai_server.url) as triton:  # the same engine's statistics
        before = triton.get_inference_statistics("text_embedder")["model_stats"][0]["inference_count"]
        client.embeddings.create(model="text_embedder", input=TEXTS)
        after = triton.get_inference_statistics("text_embedder")["model_stats"][0]["inference_count"]
    assert after - before == len(TEXTS)


def test_completions_plain_streamed_and_chat(client: openai.OpenAI) -> None:
    plain = client.completions.create(model="token_streamer", prompt="tokenizer works")
    assert plain.choices[0].text == "token##izerworks" and plain.choices[0].finish_reason == "stop"
    assert plain.usage is not None
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens) == (3, 3)
    cut = client.completions.create(model="token_streamer", prompt="one two three four", max_tokens=2)
    assert (cut.choices[0].text, cut.choices[0].finish_reason) == ("onetwo", "length")
    check_streamed_completion(client)
    stream = client.chat.completions.create(model="token_streamer", stream=True,
                                            messages=[{"role": "user", "content": "hello tokenizer"}],
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hellotoken##izer"
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    chat = client.chat.completions.create(model="token_streamer", messages=[{"role": "user", "content": "hi"}])
    assert (chat.choices[0].message.role, chat.choices[0].message.content) == ("assistant", "hi")


def test_bad_requests_get_openais_error_shape_and_lose_nothing(client: openai.OpenAI) -> None:
    refusals = [
        (lambda: client.embeddings.create(model="no_such_model", input="x"), "Unknown model: no_such_model"),
        (lambda: client.embeddings.create(model="text_embedder", input=[[101, 102]]), "token-id arrays"),
        (lambda: client.embeddings.create(model="text_embedder", input=[]), "non-empty array"),
        (lambda: client.embeddings.create(model="token_streamer", input="x"), "not an embedding model"),
        (lambda: client.embeddings.create(model="text_embedder", input="x", dimensions=8), "'dimensions' 8"),
        (lambda: client.completions.create(model="text_embedder", prompt="x"), "not a text-generation model"),
        (lambda: client.completions.create(model="token_streamer", prompt="x", n=2), "only single choice"),
        (lambda: client.completions.create(model="token_streamer", prompt=""), "prompt must be non-empty"),
        (lambda: client.completions.create(model="token_streamer", prompt="x", logit_bias={"1": 1}),
         "logit bias is not supported"),
    ]
    for call, text in refusals:
        with pytest.raises(openai.BadRequestError) as refused:
            call()
        assert text in refused.value.message
        assert refused.value.type == "invalid_request_error"
    answer = httpx.post(f"{client.base_url}embeddings", content=b"{not json",
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "could not parse the JSON body" in answer.json()["error"]["message"]
    assert len(client.embeddings.create(model="text_embedder", input="still serving").data) == 1


def test_load_and_unload_as_triton_268(client: openai.OpenAI) -> None:
    loaded = client.post("/models/digits_mlp/load", cast_to=dict, body={})
    assert {k: loaded[k] for k in ("id", "object", "owned_by")} == {
        "id": "digits_mlp", "object": "model", "owned_by": "Triton Inference Server"}
    assert "digits_mlp" in [m.id for m in client.models.list()]
    with pytest.raises(openai.BadRequestError, match="Model 'digits_mlp' is already loaded"):
        client.post("/models/digits_mlp/load", cast_to=object, body={})
    assert client.post("/models/digits_mlp/unload", cast_to=object, body={}) == {
        "status": "success", "model": "digits_mlp"}
    assert "digits_mlp" not in [m.id for m in client.models.list()]
    with pytest.raises(openai.BadRequestError, match="Unknown model: digits_mlp"):
        client.post("/models/digits_mlp/unload", cast_to=object, body={})


def test_the_jupyter_hosts_ports_serve_the_same_routes_with_their_key(tmp_path: Path,
                                                                       sample_repository: Path) -> None:
    jupyter = JupyterProcess([f"--Workbench.model_repository={sample_repository}",
                              "--Workbench.load_model=text_embedder", "--Workbench.load_model=token_streamer",
                              "--Workbench.open_ports=True", "--Workbench.http_port=0",
                              "--Workbench.grpc_port=0", "--Workbench.metrics_port=0"],
                             home=tmp_path / "jupyter", enable_file=ENABLE_FILE)
    try:
        import json
        import urllib.request

        request = urllib.request.Request(f"{jupyter.api_url}/status", headers=jupyter.headers)
        with urllib.request.urlopen(request, timeout=30) as answer:
            key: dict = json.loads(answer.read())["ports_key"]
        base = f"http://{jupyter.url}/v1"
        with openai.OpenAI(base_url=base, api_key="unused", max_retries=0) as keyless:
            with pytest.raises(openai.AuthenticationError) as refused:
                keyless.models.list()  # model-repository: restricted on the Jupyter host's ports
            assert refused.value.code == "invalid_auth"
            expected = f"This API is restricted, expecting header '{key['header']}' with valid value"
            assert refused.value.message.endswith(expected) and refused.value.type == "authentication_error"
            check_embeddings(keyless, jupyter.url)  # inference: open, as the v2 infer route
            check_streamed_completion(keyless)
        with openai.OpenAI(base_url=base, api_key="unused", max_retries=0,
                           default_headers={key["header"]: key["value"]}) as keyed:
            assert {"text_embedder", "token_streamer"} <= {m.id for m in keyed.models.list()}
    finally:
        jupyter.stop()
