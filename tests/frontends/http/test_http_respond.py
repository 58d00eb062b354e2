"""How the infer fast path hands a response to the ASGI server: a small chunked answer (JSON
header + binary outputs) as one body message, a big one chunk by chunk; the same bytes and
the same Content-Length either way (issue 20: one ASGI send and one socket write per small
response)."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from workbench import Server, ServerOptions
from workbench.frontends.http import create_app
from workbench.frontends.http.infer_asgi import JOIN_BELOW_BYTES, _respond

HEADERS = [(b"content-type", b"application/octet-stream")]


def json_body(n: int) -> bytes:
    return orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, n],
                                     "data": [0.5] * n}]})


async def sent(payload: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        messages.append(dict(message))

    await _respond(send, 200, HEADERS, payload)
    return messages


def body_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(bytes(m["body"]) for m in messages[1:])


def content_length(messages: list[dict[str, Any]]) -> int:
    return int(dict(messages[0]["headers"])[b"content-length"])


async def test_a_small_chunked_response_is_one_body_message_with_the_same_bytes() -> None:
    output = np.arange(16, dtype=np.float32)
    chunks = [b'{"model_name":"m"}', memoryview(output.tobytes())]
    expected = b'{"model_name":"m"}' + output.tobytes()
    messages = await sent(chunks)
    assert [m["type"] for m in messages] == ["http.response.start", "http.response.body"]
    assert messages[1].get("more_body", False) is False
    assert body_of(messages) == expected and content_length(messages) == len(expected)


async def test_a_big_chunked_response_goes_out_chunk_by_chunk_unjoined() -> None:
    big = np.ones(JOIN_BELOW_BYTES, dtype=np.uint8)
    chunks = [b'{"model_name":"m"}', memoryview(big.tobytes())]
    messages = await sent(chunks)
    assert len(messages) == 3 and messages[1]["more_body"] is True
    assert messages[2]["body"] is chunks[1]  # the output's own view: not copied
    assert body_of(messages) == b'{"model_name":"m"}' + big.tobytes()
    assert content_length(messages) == len(chunks[0]) + JOIN_BELOW_BYTES


async def test_a_single_body_is_sent_as_it_is() -> None:
    messages = await sent(b'{"error":"x"}')
    assert len(messages) == 2 and messages[1]["body"] == b'{"error":"x"}'
    assert content_length(messages) == len(b'{"error":"x"}')



async def test_an_escaped_model_name_on_the_infer_path_is_decoded(test_repository: Path) -> None:
    """``/v2/models/identity%5Ffp32/versions/%31/infer`` names ``identity_fp32`` version 1 (the
    fast path decodes %-escapes only where a segment has one)."""
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            plain = await client.post("/v2/models/identity_fp32/versions/1/infer", content=json_body(4))
            escaped = await client.post("/v2/models/identity%5Ffp32/versions/%31/infer",
                                        content=json_body(4))
    assert plain.status_code == escaped.status_code == 200, escaped.text
    assert escaped.json()["model_name"] == "identity_fp32" and escaped.content == plain.content
