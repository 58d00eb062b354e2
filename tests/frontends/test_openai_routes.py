"""The OpenAI-compatible routes in-process (the real app over a real engine, no models loaded):
their API groups and key, their body limit, and how a model is recognised as an embedding or
text-generation model. The client-level tests are in tests/e2e/test_openai_e2e.py."""

from __future__ import annotations

from pathlib import Path

import openai
import orjson
import pytest

from tests.python_backend.test_python_backend_async import model_log
from workbench import Server, ServerOptions
from workbench.frontends.http.guards import api_group
from workbench.frontends.openai.errors import OpenAIError
from workbench.frontends.openai.model_kinds import embedding_model, text_model
from workbench.frontends.openai.tokens import (
    FIRST_WINDOW,
    PROMPT_PIECE,
    TokenCounter,
    pieces_count,
    truncated_count,
)
from workbench.testing.http_listener import http_listener
from workbench.testing.python_backend import copy_python_model, python_models_server

EMBEDDER = {"input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["1"]}],
            "output": [{"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": ["384"]}],
            "max_batch_size": 64}
STREAMER = {"input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["1"]}],
            "output": [{"name": "TOKEN", "data_type": "TYPE_STRING", "dims": ["1"]},
                       {"name": "INDEX", "data_type": "TYPE_INT32", "dims": ["1"]}],
            "model_transaction_policy": {"decoupled": True}}


def test_the_v1_routes_have_triton_openai_frontends_api_groups() -> None:
    assert [api_group(p) for p in ("/v1/embeddings", "/v1/completions", "/v1/chat/completions")] == [
        "inference"] * 3
    assert [api_group(p) for p in ("/v1/models", "/v1/models/m", "/v1/models/m/load")] == [
        "model-repository"] * 3


def test_models_are_recognised_by_their_inputs_and_outputs() -> None:
    model = embedding_model("e", EMBEDDER)
    assert (model.text_input, model.output, model.size, model.max_batch_size) == ("TEXT", "EMBEDDING", 384, 64)
    outputs: list = EMBEDDER["output"]  # type: ignore[assignment]
    two = {**EMBEDDER, "output": [*outputs, {"name": "B", "data_type": "TYPE_FP32", "dims": ["8"]}]}
    with pytest.raises(OpenAIError, match="openai_embedding_output"):
        embedding_model("e", two)
    named = {**two, "parameters": {"openai_embedding_output": {"string_value": "B"}}}
    assert embedding_model("e", named).size == 8
    hidden = {**EMBEDDER, "output": [{"name": "H", "data_type": "TYPE_FP32", "dims": ["-1", "384"]}]}
    with pytest.raises(OpenAIError, match="one vector per text"):  # a vector per token is no embedding
        embedding_model("e", hidden)
    with pytest.raises(OpenAIError, match="it is decoupled"):
        embedding_model("s", STREAMER)
    text = text_model("s", STREAMER)
    assert (text.prompt_input, text.text_output, text.batched) == ("TEXT", "TOKEN", False)
    with pytest.raises(OpenAIError, match="not decoupled"):
        text_model("e", EMBEDDER)


async def test_bodies_are_bounded_by_the_input_size_and_keys_asked_in_openais_shape(
        test_repository: Path, asgi_client) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], model_control_mode="explicit",
                            http_max_input_size=200_000, http_restricted_api=["model-repository:admin=k"])
    async with Server(options) as server, asgi_client(server) as http:
        texts = orjson.dumps({"model": "absent", "input": ["x" * 1000] * 100})  # 100 KB > the 64 KiB control limit
        answer = await http.post("/v1/embeddings", content=texts, headers={"Content-Type": "application/json"})
        assert (answer.status_code, answer.json()["error"]["message"]) == (400, "Unknown model: absent")
        answer = await http.post("/v1/embeddings", content=texts * 3, headers={"Content-Type": "application/json"})
        assert answer.status_code == 413
        assert answer.json()["error"]["message"] == (
            f"Request size of {len(texts) * 3} bytes exceeds the maximum allowed input size of 200000 "
            "bytes. Use --http-max-input-size to increase the limit.")
        answer = await http.get("/v1/models")
        assert answer.status_code == 401 and answer.json() == {"error": {
            "message": "This API is restricted, expecting header 'admin' with valid value",
            "type": "authentication_error", "param": None, "code": "invalid_auth"}}
        answer = await http.post("/v1/models/absent/load", headers={"admin": "k"})
        assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
        assert (await http.get("/v1/models", headers={"admin": "k"})).json() == {"object": "list", "data": []}
        answer = await http.get("/v1/embeddings")
        assert answer.status_code == 404 and answer.json()["error"]["message"] == "Invalid URL (GET /v1/embeddings)"


async def test_max_tokens_closes_the_stream_and_cancels_the_models_request(tmp_path: Path, asgi_client) -> None:
    """A model that streams words until it is cancelled: ``max_tokens`` words come back
    (``finish_reason: length``), plain and streamed, and the model sees its request cancelled
    rather than running its 1000 steps (10 s)."""
    async with python_models_server(tmp_path, "words_until_cancelled") as server, asgi_client(server) as http:
        for stream in (False, True):
            with model_log("words_until_cancelled: ") as log:
                body = {"model": "words_until_cancelled", "prompt": "go", "max_tokens": 3, "stream": stream}
                answer = await http.post("/v1/completions", json=body)
                assert answer.status_code == 200, answer.text
                if stream:
                    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
                    assert events[-1] == "[DONE]"
                    chunks = [orjson.loads(e)["choices"][0] for e in events[:-1]]
                    text = "".join(c["text"] for c in chunks)
                    finish = chunks[-1]["finish_reason"]
                else:
                    text, finish = answer.json()["choices"][0]["text"], answer.json()["choices"][0]["finish_reason"]
                assert (text, finish) == ("w0 w1 w2 ", "length")
                assert (await log.next()).startswith("words_until_cancelled: cancelled at step ")


async def test_a_client_leaving_a_stream_cancels_the_models_request(tmp_path: Path) -> None:
    """The ``openai`` client reads 3 chunks of an endless completion and closes the stream:
    the connection ends, and the model sees its request cancelled (it would run 10 s)."""
    copy_python_model(tmp_path, "words_until_cancelled")
    options = ServerOptions(model_repository=[str(tmp_path)], exit_on_error=False)
    async with http_listener(options) as listener, openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{listener.port}/v1", api_key="unused", max_retries=0) as client:
        with model_log("words_until_cancelled: ") as log:
            stream = await client.completions.create(model="words_until_cancelled", prompt="go", stream=True)
            texts = []
            async for chunk in stream:
                texts.append(chunk.choices[0].text)
                if len(texts) == 3:
                    break
            await stream.close()
            assert texts == ["w0 ", "w1 ", "w2 "]
            assert (await log.next()).startswith("words_until_cancelled: cancelled at step ")


def test_a_long_text_is_counted_on_a_prefix(sample_repository: Path) -> None:
    """Counting the tokens of a 1 MiB text (the most the sample tokenizer takes) tokenizes a few
    KiB of it, not all (whole, an 8 MiB text took 31.5 s and 1.5 GB: bench/RESULTS.md), and
    gives what the encoder sees: 256 tokens."""
    text = "hello world, this is a sentence. " * 32_000
    seen: list[int] = []

    def count(prefix: str) -> int:
        seen.append(len(prefix))
        return len(prefix.split()) + 2

    assert truncated_count(text, 256, count) == 256 and max(seen) <= FIRST_WINDOW
    assert truncated_count("two words", 256, count) == 4
    counter = TokenCounter(sample_repository / "tokenizer" / "1" / "tokenizer.json", 256)
    assert counter.embedding_tokens([text, "  hello world  ", "tokenizer"]) == [256, 4, 4]  # [CLS] token ##izer [SEP]
    seen.clear()
    assert pieces_count(text, count) == len(text.split()) + 2 * len(seen) and max(seen) <= PROMPT_PIECE
    assert counter.prompt_tokens(text) == 8 * 32_000  # hello world , this is a sentence .
