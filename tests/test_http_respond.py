"""How the infer fast path hands a response to the ASGI server: a small chunked answer (JSON
header + binary outputs) as one body message, a big one chunk by chunk; the same bytes and
the same Content-Length either way (issue 20: one ASGI send and one socket write per small
response)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.frontends.http.infer_asgi import JOIN_BYTES, _respond

HEADERS = [(b"content-type", b"application/octet-stream")]


async def sent(payload: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await _respond(send, 200, HEADERS, payload)
    return messages


def body_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(bytes(m["body"]) for m in messages[1:])


def content_length(messages: list[dict[str, Any]]) -> int:
    return int(dict(messages[0]["headers"])[b"content-length"])


async def test_a_small_chunked_response_is_one_body_message_with_the_same_bytes() -> None:
    output = np.arange(16, dtype=np.float32)
    chunks = [b'{"model_name":"m"}', memoryview(output).cast("B")]
    expected = chunks[0] + output.tobytes()
    messages = await sent(chunks)
    assert [m["type"] for m in messages] == ["http.response.start", "http.response.body"]
    assert messages[1].get("more_body", False) is False
    assert body_of(messages) == expected and content_length(messages) == len(expected)


async def test_a_big_chunked_response_goes_out_chunk_by_chunk_unjoined() -> None:
    big = np.ones(JOIN_BYTES, dtype=np.uint8)
    chunks = [b'{"model_name":"m"}', memoryview(big)]
    messages = await sent(chunks)
    assert len(messages) == 3 and messages[1]["more_body"] is True
    assert messages[2]["body"] is chunks[1]  # the output's own view: not copied
    assert body_of(messages) == chunks[0] + big.tobytes()
    assert content_length(messages) == len(chunks[0]) + JOIN_BYTES


async def test_a_single_body_is_sent_as_it_is() -> None:
    messages = await sent(b'{"error":"x"}')
    assert len(messages) == 2 and messages[1]["body"] == b'{"error":"x"}'
    assert content_length(messages) == len(b'{"error":"x"}')
