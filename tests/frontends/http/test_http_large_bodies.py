"""Big JSON infer bodies (frontends/http/large_bodies.py): the JSON part is capped before the
body is read, big decodes and encodes run on worker threads under a shared byte budget."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from workbench import InferenceRequest, InferenceResponse, Server, ServerOptions, Tensor
from workbench.frontends.http import create_app, infer_asgi, large_bodies
from workbench.testing.http_listener import http_listener


def json_body(n: int) -> bytes:
    return orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, n],
                                     "data": [0.5] * n}]})


async def test_a_json_part_over_the_limit_is_refused_before_the_body_is_read(test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], http_max_json_size=1000)
    async with http_listener(options) as clients:
        reader, writer = await clients.connect()
        writer.write(b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nhost: x\r\n"
                     b"content-length: 50000000\r\n\r\n")  # no body follows
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 400 ")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        error = orjson.loads(await reader.readexactly(length))["error"]
        assert error.startswith("JSON part of the request is 50000000 bytes, more than the 1000 bytes "
                                "allowed (--http-max-json-size)")


async def test_the_json_cap_counts_the_json_header_of_a_binary_body(test_repository: Path) -> None:
    options = ServerOptions(model_repository=[str(test_repository)], http_max_json_size=1000)
    data = np.arange(4096, dtype=np.float32).reshape(1, -1)
    header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4096],
                                       "parameters": {"binary_data_size": data.nbytes}}],
                           "parameters": {"binary_data_output": True}})
    async with (http_listener(options) as clients,
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{clients.port}") as client):
        ok = await client.post("/v2/models/identity_fp32/infer", content=header + data.tobytes(),
                               headers={"Inference-Header-Content-Length": str(len(header))})
        refused = await client.post("/v2/models/identity_fp32/infer", content=json_body(300))
    assert ok.status_code == 200  # 16 KiB of binary tensor, a small JSON header
    assert refused.status_code == 400 and "--http-max-json-size" in refused.json()["error"]


async def test_big_json_bodies_are_decoded_and_encoded_on_worker_threads(test_repository: Path,
                                                                        monkeypatch) -> None:
    threads: list[int] = []
    real_decode, real_encode = large_bodies.decode_request, large_bodies.encode_response_chunks

    def decode(*args):
        threads.append(threading.get_ident())
        return real_decode(*args)

    def encode(*args):
        threads.append(threading.get_ident())
        return real_encode(*args)

    for module in (large_bodies, infer_asgi):  # infer_asgi calls them itself for small bodies
        monkeypatch.setattr(module, "decode_request", decode)
        monkeypatch.setattr(module, "encode_response_chunks", encode)
    async with Server(ServerOptions(model_repository=[str(test_repository)])) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            small = await client.post("/v2/models/identity_fp32/infer", content=json_body(10))
            assert small.status_code == 200 and threads == [threading.get_ident()] * 2  # inline
            threads.clear()
            n = 300_000  # 1.2 MB of FP32 both ways: over large_bodies.OFFLOAD_BYTES
            big = await client.post("/v2/models/identity_fp32/infer", content=json_body(n))
    assert big.status_code == 200 and big.json()["outputs"][0]["data"] == [0.5] * n
    assert len(threads) == 2 and threading.get_ident() not in threads


async def test_the_json_budget_lets_big_holders_wait_for_each_other() -> None:
    budget = large_bodies.JsonBudget(100)
    entered, release = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with budget.hold(80):
            entered.set()
            await release.wait()

    holder = asyncio.create_task(first())
    await entered.wait()
    async with budget.hold(20):  # fits beside it
        assert budget.held == 100
    second = asyncio.create_task(_hold(budget, 500))  # more than the capacity: waits to be alone
    await asyncio.sleep(0)
    assert not second.done() and budget.held == 80
    release.set()
    await asyncio.gather(holder, second)
    assert budget.held == 0


async def _hold(budget: large_bodies.JsonBudget, size: int) -> None:
    async with budget.hold(size):
        assert budget.held == budget.capacity


def test_json_part_size_reads_the_binary_header_length() -> None:
    assert large_bodies.json_part_size(None, 500) == 500
    assert large_bodies.json_part_size("120", 500) == 120
    assert large_bodies.json_part_size("oops", 500) == 500  # the codec's error to raise
    assert large_bodies.json_part_size("900", 500) == 500
    with pytest.raises(Exception, match="--http-max-json-size"):
        large_bodies.check_json_size(501, 500)
    request = InferenceRequest("m", [], parameters={"binary_data_output": True})
    response = InferenceResponse("m", "1", outputs=[Tensor("x", "FP32", np.zeros(10, np.float32))])
    assert large_bodies.json_output_bytes(response, request) == 0
    assert large_bodies.json_output_bytes(response, InferenceRequest("m", [])) == 40
