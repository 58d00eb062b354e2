"""``POST /v1/embeddings``: texts -> one embedding model's v2 inference -> OpenAI's answer.

``input`` is a string or a list of strings (at most :data:`MAX_INPUTS`, OpenAI's limit);
token-id arrays are refused (400: the model takes text). With ``max_batch_size`` > 0 the
texts go as requests of up to ``max_batch_size`` rows each (``[n, 1]`` BYTES), run at once,
so the model's dynamic batcher and statistics see them as any v2 client's; with 0, one
request per text. ``encoding_format``: ``float`` (numbers) or ``base64`` (the embedding as
little-endian float32 bytes, OpenAI's encoding). ``dimensions`` is accepted only when it is
the model's size (no truncation); ``user`` is ignored. ``usage`` counts tokens with the
model's tokenizer (:mod:`workbench.frontends.openai.tokens`).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np

from workbench import InferenceRequest, RequestedOutput, Server, Tensor
from workbench.frontends.openai.errors import OpenAIError
from workbench.frontends.openai.model_kinds import EmbeddingModel, embedding_model, model_config
from workbench.frontends.openai.requests import optional, required_string
from workbench.frontends.openai.tokens import TokenCounters

#: the most inputs one request may carry (OpenAI's limit)
MAX_INPUTS = 2048
TOKEN_IDS = ("token-id arrays are not supported: this server's models take text; send 'input' "
             "as a string or an array of strings")


def input_texts(members: dict[str, Any]) -> list[str]:
    """The request's ``input`` as a list of strings.

    Raises:
        OpenAIError: 400 for a missing or empty input, token ids, more than
            :data:`MAX_INPUTS` items, or anything else than strings.
    """
    value = members.get("input")
    if value is None:
        raise OpenAIError("'input' is a required property", param="input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise OpenAIError("'input' must be a string or a non-empty array of strings", param="input")
    if len(texts) > MAX_INPUTS:
        raise OpenAIError(f"'input' must have at most {MAX_INPUTS} items, got {len(texts)}",
                          param="input")
    if all(isinstance(t, str) for t in texts):
        return texts
    if all(isinstance(t, int) and not isinstance(t, bool) for t in texts) or \
            all(isinstance(t, list) for t in texts):
        raise OpenAIError(TOKEN_IDS, param="input", code="unsupported_input")
    raise OpenAIError("'input' must be a string or an array of strings", param="input")


def _bytes_rows(texts: list[str], batched: bool) -> np.ndarray:
    rows = np.empty((len(texts), 1) if batched else (1,), dtype=object)
    for i, text in enumerate(texts):
        rows[i if not batched else (i, 0)] = text.encode("utf-8")
    return rows


async def _embed(server: Server, model: EmbeddingModel, texts: list[str]) -> np.ndarray:
    """``[len(texts), size]`` embeddings from the model, in the order of ``texts``."""
    batched = model.max_batch_size > 0
    step = model.max_batch_size if batched else 1
    chunks = [texts[i:i + step] for i in range(0, len(texts), step)]
    requests = [InferenceRequest(model.name, [Tensor(model.text_input, "BYTES", _bytes_rows(c, batched))],
                                 outputs=[RequestedOutput(model.output)]) for c in chunks]
    responses = await asyncio.gather(*(server.infer(r) for r in requests))
    parts = []
    for response in responses:
        data = next(t.data for t in response.outputs if t.name == model.output)
        parts.append(np.asarray(data).reshape(-1, model.size))
    rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if len(rows) != len(texts):
        raise OpenAIError(f"model '{model.name}' answered {len(rows)} embeddings for {len(texts)} "
                          "texts", status=500)
    return rows


async def create_embeddings(server: Server, counters: TokenCounters,
                            members: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's embeddings answer for the request ``members``.

    Raises:
        OpenAIError: unknown model, not an embedding model, bad input or options (400); the
            model answered another number of rows than texts (500).
        WorkbenchError: the inference failed (its v2 status and text).
    """
    name = required_string(members, "model")
    texts = input_texts(members)
    encoding = optional(members, "encoding_format", str, "float")
    if encoding not in ("float", "base64"):
        raise OpenAIError(f"'encoding_format' must be 'float' or 'base64', not '{encoding}'",
                          param="encoding_format")
    dimensions = optional(members, "dimensions", int)
    config = await model_config(server, name)
    model = embedding_model(name, config)
    if dimensions is not None and dimensions != model.size:
        raise OpenAIError(f"'dimensions' {dimensions} is not supported: model '{name}' gives "
                          f"{model.size} dimensions and does not truncate", param="dimensions")
    embeddings = await _embed(server, model, texts)
    # counted once the model answered: a refused request costs no tokenizing
    counter = await counters.for_model(name, config)
    counts = await asyncio.to_thread(counter.embedding_tokens, texts) if counter else [0]
    data = [{"object": "embedding", "index": i, "embedding": _encoded(row, encoding)}
            for i, row in enumerate(embeddings)]
    tokens = int(sum(counts))
    return {"object": "list", "data": data, "model": name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _encoded(row: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
    if row.dtype not in (np.float32, np.float64):
        row = row.astype(np.float32)  # FP16 / BF16: orjson writes float32 and float64 arrays
    return np.ascontiguousarray(row)  # serialized by orjson (OPT_SERIALIZE_NUMPY)


__all__ = ["MAX_INPUTS", "create_embeddings", "input_texts"]
