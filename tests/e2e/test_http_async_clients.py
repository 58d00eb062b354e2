"""tritonclient's asynchronous HTTP clients against the real server process.

``tritonclient.http.aio`` (aiohttp) and the gevent-based ``async_infer`` of the sync
client: concurrent requests, answers identical to one-at-a-time inference, errors
delivered per request.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from workbench.testing.process import ServerProcess

pytestmark = pytest.mark.e2e


def rows(count: int) -> np.ndarray:
    return np.random.default_rng(7).random((count, 64), dtype=np.float32) * 16


def reference_logits(triton, pixels: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("pixels", list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels)
    return triton.infer("digits_mlp", [tensor], model_version="1").as_numpy("logits")


async def aio_infer(client: aioclient.InferenceServerClient, row: np.ndarray, binary: bool) -> np.ndarray:
    tensor = aioclient.InferInput("pixels", [1, 64], "FP32")
    tensor.set_data_from_numpy(row[None, :], binary_data=binary)
    output = aioclient.InferRequestedOutput("logits", binary_data=binary)
    result = await client.infer("digits_mlp", [tensor], model_version="1", outputs=[output])
    return result.as_numpy("logits")[0]


@pytest.mark.parametrize("binary", [True, False])
def test_aio_client_concurrent_requests_match_reference(sample_server: ServerProcess, triton, binary: bool) -> None:
    pixels = rows(24)
    expected = reference_logits(triton, pixels)

    async def main() -> tuple[list[np.ndarray], bool, dict]:
        async with aioclient.InferenceServerClient(sample_server.url) as client:
            ready = await client.is_model_ready("digits_mlp")
            results = await asyncio.gather(*(aio_infer(client, row, binary) for row in pixels))
            metadata = await client.get_model_metadata("digits_mlp")
            return results, ready, metadata

    results, ready, metadata = asyncio.run(main())
    assert ready and metadata["name"] == "digits_mlp"
    np.testing.assert_allclose(np.stack(results), expected, rtol=1e-5, atol=1e-5)


def test_aio_client_gets_errors_per_request(sample_server: ServerProcess) -> None:
    async def main() -> list:
        async with aioclient.InferenceServerClient(sample_server.url) as client:
            bad = aioclient.InferInput("pixels", [1, 63], "FP32")
            bad.set_data_from_numpy(np.zeros((1, 63), np.float32))
            good = aio_infer(client, rows(1)[0], True)
            return await asyncio.gather(client.infer("digits_mlp", [bad]), good, return_exceptions=True)

    error, good = asyncio.run(main())
    assert isinstance(error, InferenceServerException)
    assert "unexpected shape for input 'pixels'" in error.message()
    assert isinstance(good, np.ndarray) and good.shape == (10,)


def test_sync_client_async_infer(sample_server: ServerProcess, triton) -> None:
    pixels = rows(16)
    expected = reference_logits(triton, pixels)
    client = httpclient.InferenceServerClient(sample_server.url, concurrency=4)
    try:
        handles = []
        for row in pixels:
            tensor = httpclient.InferInput("pixels", [1, 64], "FP32")
            tensor.set_data_from_numpy(row[None, :])
            handles.append(client.async_infer("digits_mlp", [tensor], model_version="1"))
        results = np.stack([h.get_result().as_numpy("logits")[0] for h in handles])
    finally:
        client.close()
    np.testing.assert_allclose(results, expected, rtol=1e-5, atol=1e-5)
