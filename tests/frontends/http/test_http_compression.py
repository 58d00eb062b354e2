"""Request and response compression on the infer route (Triton's gzip / deflate handling)."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable

import httpx
import numpy as np
import pytest
import pytest_asyncio

from tests.frontends.http.test_http import HEADER, add_sub_json, binary_body
from workbench import Server, ServerOptions
from workbench.frontends.http.compression import response_encoding

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {"gzip": gzip.compress, "deflate": zlib.compress}


async def _post(client: httpx.AsyncClient, body: bytes, headers: dict) -> httpx.Response:
    request = client.build_request("POST", "/v2/models/add_sub/infer", content=body, headers=headers)
    return await client.send(request)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_json_request(client: httpx.AsyncClient, encoding: str) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body = COMPRESSORS[encoding](json.dumps(add_sub_json(a, a)).encode())
    response = await _post(client, body, {"Content-Encoding": encoding})
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o["data"] for o in response.json()["outputs"]}
    assert outputs["OUTPUT0"] == (a * 2).ravel().tolist()


async def test_binary_request_header_length_counts_the_uncompressed_body(
    client: httpx.AsyncClient,
) -> None:
    a = np.linspace(0, 1, 16, dtype=np.float32).reshape(1, 16)
    inputs = [{"name": f"INPUT{i}", "shape": [1, 16], "datatype": "FP32",
               "parameters": {"binary_data_size": 64}} for i in range(2)]
    body, headers = binary_body({"inputs": inputs}, a.tobytes(), (a * 3).tobytes())
    response = await _post(client, gzip.compress(body), {**headers, "Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][1]["data"] == pytest.approx((a - a * 3).ravel().tolist())


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_response_compressed_when_accepted(client: httpx.AsyncClient, encoding: str) -> None:
    a = np.ones((2, 16), dtype=np.float32)
    body = json.dumps(add_sub_json(a, a, outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}]))
    request = client.build_request("POST", "/v2/models/add_sub/infer", content=body.encode(),
                                   headers={"Accept-Encoding": encoding})
    response = await client.send(request, stream=True)  # raw bytes: httpx would inflate them
    raw = b"".join([chunk async for chunk in response.aiter_raw()])
    await response.aclose()
    assert response.status_code == 200
    assert response.headers["content-encoding"] == encoding
    plain = gzip.decompress(raw) if encoding == "gzip" else zlib.decompress(raw)
    length = int(response.headers[HEADER])  # counts the uncompressed JSON header
    header = json.loads(plain[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 128}
    assert np.frombuffer(plain[length:], dtype=np.float32).tolist() == [2.0] * 32


async def test_identity_request_and_response_stay_plain(client: httpx.AsyncClient) -> None:
    a = np.ones((1, 16), dtype=np.float32)
    body = json.dumps(add_sub_json(a, a)).encode()
    response = await _post(client, body, {"Content-Encoding": "identity", "Accept-Encoding": "identity"})
    assert response.status_code == 200 and "content-encoding" not in response.headers
    assert response.json()["outputs"][0]["data"] == [2.0] * 16


async def test_unknown_encoding_is_unsupported(client: httpx.AsyncClient) -> None:
    response = await _post(client, b"{}", {"Content-Encoding": "br"})
    assert response.status_code == 501
    assert response.json() == {"error": "Unsupported compression type"}


async def test_corrupt_body_is_a_clear_400(client: httpx.AsyncClient) -> None:
    response = await _post(client, b"this is not gzip", {"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert response.json()["error"].startswith("failed to decompress the request body")
    truncated = gzip.compress(b'{"inputs": []}' * 100)[:-12]
    response = await _post(client, truncated, {"Content-Encoding": "gzip"})
    assert response.status_code == 400 and "truncated" in response.json()["error"]


@pytest_asyncio.fixture
async def small_client(test_repository, asgi_client):
    options = ServerOptions(model_repository=[str(test_repository)], http_max_input_size=4096)
    async with Server(options) as server, asgi_client(server) as http:
        yield http


async def test_max_input_size_bounds_the_decompressed_size(small_client: httpx.AsyncClient) -> None:
    bomb = gzip.compress(b" " * 1_000_000)  # ~1 KB compressed, 1 MB inflated
    assert len(bomb) < 4096
    response = await _post(small_client, bomb, {"Content-Encoding": "gzip"})
    assert response.status_code == 400
    assert response.json() == {"error": "Decompressed data size exceeds the maximum allowed value "
                                        "of 4096 bytes. Use --http-max-input-size to increase the limit."}


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("gzip", "gzip"),
        ("deflate, gzip", "deflate"),
        ("deflate;q=0.5, gzip;q=0.8", "gzip"),
        ("gzip;q=0.1, identity", None),
        ("br", None),
        ("gzip;q=abc, deflate;q=0.2", "deflate"),
        ("", None),
    ],
)
def test_accept_encoding_selection_follows_triton(accept: str, expected: str | None) -> None:
    assert response_encoding(accept) == expected
