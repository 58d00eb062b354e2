"""Bodies of the routes other than infer and generate (frontends/http/body_limits.py, the one
body reader of every route), on a real uvicorn listener with raw sockets: a body over its
route's limit is refused before it is read on, announced (``Content-Length``) or chunked, and
the connection ends after the answer (frontends/http/connection_guard.py: a FIN, the rest
dropped for at most the keep-alive timeout)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from workbench import Server, ServerOptions
from workbench.frontends.http import create_app
from workbench.testing.attack import chunk
from workbench.testing.attack import request_head as head
from workbench.testing.http_listener import http_listener

#: the routes that buffered a 512 MiB chunked body whole (issue 30, finding 6), and two that
#: never read theirs (a GET, a 405)
ROUTES = [
    ("POST", "/v2/logging"), ("POST", "/v2/trace/setting"),
    ("POST", "/v2/models/add_sub/trace/setting"),
    ("POST", "/v2/repository/models/add_sub/unload"),
    ("POST", "/v2/systemsharedmemory/region/r/register"),
    ("POST", "/v2/cudasharedmemory/region/r/register"),
    ("GET", "/v2/health/live"), ("POST", "/v2/health/live"), ("POST", "/v2/no/such/route"),
]
LIMIT = 4096


def listening(repository: Path, **options):
    """A listener with small body limits; keep-alive connections stay open 60 s unless told,
    so a connection that ends at once after an answer was ended on purpose."""
    options = {"http_keepalive_timeout": 60.0, **options}
    return http_listener(ServerOptions(model_repository=[str(repository)], model_control_mode="explicit",
                                       http_max_control_body_size=LIMIT, http_max_input_size=64 * 1024,
                                       **options))


async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes, dict]:
    """One response: (status, head, JSON body)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = await asyncio.wait_for(reader.readexactly(length), 10)
    return int(head.split(b" ")[1]), head.lower(), orjson.loads(body) if body else {}


async def test_an_announced_body_over_the_limit_is_refused_before_it_is_read(test_repository: Path) -> None:
    async with listening(test_repository) as clients:
        for method, path in ROUTES:
            reader, writer = await clients.connect()
            writer.write(head(method, path, b"content-length: 536870912"))
            status, _, error = await answer(reader)  # no byte of the body was sent
            assert status == 413, (path, status, error)
            assert error == {"error": "request body of 536870912 bytes exceeds the 4096 bytes "
                                      "allowed for this route (--http-max-control-body-size)"}
            assert await asyncio.wait_for(reader.read(), 10) == b""  # ended: the rest never read


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(test_repository: Path) -> None:
    async with listening(test_repository) as clients:
        for method, path in ROUTES:
            reader, writer = await clients.connect()
            writer.write(head(method, path, b"transfer-encoding: chunked"))
            writer.write(chunk(b" " * 3000) + chunk(b" " * 3000))  # and no last chunk: never ends
            status, _, error = await answer(reader)
            assert status == 413, (path, status, error)
            assert error["error"].startswith("request body of 6000 bytes exceeds the 4096 bytes")
            assert await asyncio.wait_for(reader.read(), 10) == b""


async def test_a_load_body_is_bounded_by_max_input_size_with_tritons_answer(test_repository: Path) -> None:
    async with listening(test_repository) as clients:
        # the repository index too (Triton's L0_http sends it a 500 KB nested body)
        for path in ("/v2/repository/models/big/load", "/v2/repository/index"):
            reader, writer = await clients.connect()
            writer.write(head("POST", path, b"transfer-encoding: chunked"))
            writer.write(chunk(b" " * 40_000) + chunk(b" " * 40_000))  # past 64 KiB, never ends
            status, _, error = await answer(reader)
            assert (status, error) == (400, {"error": "request JSON size of 80000 bytes exceeds the maximum "
                                                      "allowed input size of 65536 bytes. Use "
                                                      "--http-max-input-size to increase the limit."}), path
            assert await asyncio.wait_for(reader.read(), 10) == b""
        # a load body of 8 KiB (over the control routes' limit) is the load route's to judge
        reader, writer = await clients.connect()
        body = orjson.dumps({"parameters": {"config": "{}", "file:1/model.onnx": "A" * 8000}})
        writer.write(head("POST", "/v2/repository/models/big/load", b"content-length: %d" % len(body)) + body)
        status, _, error = await answer(reader)
        assert status == 400 and error["error"].startswith("load failed for model 'big'"), error


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_body_within_the_limit_is_served_and_the_connection_kept(test_repository: Path,
                                                                         framing: str) -> None:
    body = orjson.dumps({"log_verbose_level": 0, "padding": " " * 3000})  # unknown keys are ignored
    if framing == "content-length":
        request = head("POST", "/v2/logging", b"content-length: %d" % len(body)) + body
    else:
        request = (head("POST", "/v2/logging", b"transfer-encoding: chunked") + chunk(body[:1000])
                   + chunk(body[1000:]) + b"0\r\n\r\n")
    async with listening(test_repository) as clients:
        reader, writer = await clients.connect()
        for _ in range(2):  # keep-alive: the second request on the same connection
            writer.write(request)
            status, response_head, settings = await answer(reader)
            assert status == 200 and settings["log_verbose_level"] == 0
            assert b"connection: close" not in response_head


@pytest.mark.parametrize("path", ["/v2/models/identity_fp32/infer", "/v2/models/identity_fp32/generate"])
async def test_an_infer_body_refused_for_its_size_closes_the_connection(test_repository: Path, path: str) -> None:
    """Answered 400 before the whole body arrived: the connection is closed, not kept to read
    and drop the rest of the announced 512 MiB."""
    options = ServerOptions(model_repository=[str(test_repository)], http_max_input_size=64 * 1024,
                            http_keepalive_timeout=60.0)
    async with http_listener(options) as clients:
        reader, writer = await clients.connect()
        # answered at the Content-Length: neither route reads any of the body (one body reader)
        writer.write(head("POST", path, b"content-length: 536870912") + b"{" + b" " * 140_000)
        status, _, error = await answer(reader)
        assert status == 400, error
        assert await asyncio.wait_for(reader.read(), 10) == b""


async def test_a_client_that_goes_on_sending_after_the_answer_is_cut_off(test_repository: Path) -> None:
    """After an early answer the rest of the body is dropped for at most the keep-alive
    timeout, then the connection is closed: a chunked body that never ends cannot keep it
    (uvicorn alone reads it for ever, to keep the connection alive)."""
    async with listening(test_repository, http_keepalive_timeout=0.2) as clients:
        reader, writer = await clients.connect()
        writer.write(head("POST", "/v2/logging", b"transfer-encoding: chunked") + chunk(b" " * 5000))

        async def send_on() -> None:
            while True:
                writer.write(chunk(b" " * 65536))
                await writer.drain()

        sender = asyncio.create_task(send_on())
        status, _, _ = await answer(reader)
        assert status == 413
        with pytest.raises(ConnectionError):  # a reset once the server stops dropping
            await asyncio.wait_for(sender, 10)


def binary_infer_body(values: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """An identity_fp32 request with ``values`` as binary tensor data (the binary extension)."""
    header = orjson.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": list(values.shape),
                                       "parameters": {"binary_data_size": values.nbytes}}],
                           "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]})
    return header + values.tobytes(), {"Inference-Header-Content-Length": str(len(header)),
                                       "Content-Type": "application/octet-stream"}


async def test_binary_tensor_data_is_bounded_by_its_own_limit_not_the_input_size(test_repository: Path) -> None:
    """tritonserver bounds the JSON header, raw bodies and inflated bodies by
    --http-max-input-size, never the binary tensor data after the header (NVIDIA's
    L0_backend_python test_growth_error sends 512 MiB and 1 GiB); --http-max-binary-size
    bounds that, refused before the body is read."""
    options = ServerOptions(model_repository=[str(test_repository)], http_max_input_size=64 * 1024,
                            http_max_binary_size=512 * 1024)
    async with Server(options) as server:
        transport = httpx.ASGITransport(app=create_app(server))
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            values = np.arange(64 * 1024, dtype=np.float32).reshape(1, -1)  # 256 KiB > the input size
            body, headers = binary_infer_body(values)
            served = await client.post("/v2/models/identity_fp32/infer", content=body, headers=headers)
            assert served.status_code == 200, served.text
            length = int(served.headers["inference-header-content-length"])
            assert np.frombuffer(served.content[length:], np.float32).tolist() == values.ravel().tolist()

            body, headers = binary_infer_body(np.zeros((1, 256 * 1024), np.float32))  # 1 MiB of data
            refused = await client.post("/v2/models/identity_fp32/infer", content=body, headers=headers)
            assert refused.status_code == 400
            assert refused.json()["error"] == (
                f"request binary data of {1024 * 1024} bytes exceeds the maximum allowed size of "
                f"{512 * 1024} bytes. Use --http-max-binary-size to increase the limit.")

            raw = await client.post("/v2/models/identity_fp32/infer", content=b"\0" * 128 * 1024,
                                    headers={"Inference-Header-Content-Length": "0"})
            assert raw.status_code == 400
            assert raw.json()["error"] == (
                f"Raw input has a byte_size ({128 * 1024} bytes) that exceeds the maximum allowed value "
                f"of {64 * 1024} bytes. Use --http-max-input-size to increase the limit.")

            header = {"Inference-Header-Content-Length": str(100 * 1024)}
            big_json = await client.post("/v2/models/identity_fp32/infer", content=b" " * 100 * 1024,
                                         headers=header)
            assert big_json.status_code == 400
            assert big_json.json()["error"] == (
                f"request JSON size of {100 * 1024} bytes exceeds the maximum allowed input size of "
                f"{64 * 1024} bytes. Use --http-max-input-size to increase the limit.")
