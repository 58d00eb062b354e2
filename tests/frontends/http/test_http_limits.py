"""HTTP connection limits (frontends/http/connection_guard.py) on a real uvicorn listener.

Raw sockets play the slow or idle clients: a request head that never ends, a body that stops,
an oversized head, more connections than the cap. The last test runs ``workbench serve`` as a
real process under a small open-file limit and floods it with slowloris connections: its
``/v2/health/ready`` must still answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from pathlib import Path

import httpx

from workbench import ServerOptions
from workbench.frontends.http.connection_guard import (
    AUTO_MAX_CONNECTIONS,
    MIN_RATE_GRACE_S,
    auto_max_connections,
    body_deficit,
)
from workbench.hosts.cli import build_parser, options_from_args
from workbench.testing.attack import request_head
from workbench.testing.http_listener import http_listener
from workbench.testing.process import LimitedServerProcess

HEALTH = b"GET /v2/health/ready HTTP/1.1\r\nhost: x\r\n\r\n"


def listening(repository: Path, **limits):
    """An in-process HTTP service with ``limits`` (ServerOptions fields)."""
    return http_listener(ServerOptions(model_repository=[str(repository)], **limits))


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    return await asyncio.wait_for(reader.read(), 10)


async def health(port: int) -> int:
    async with httpx.AsyncClient(timeout=10) as client:
        return (await client.get(f"http://127.0.0.1:{port}/v2/health/ready")).status_code


async def test_a_head_that_never_ends_gets_408_and_an_idle_connection_is_closed(tmp_path: Path) -> None:
    async with listening(tmp_path, http_header_timeout=0.3) as clients:
        slow_reader, slow = await clients.connect()
        idle_reader, _idle = await clients.connect()
        slow.write(b"GET /v2/health/ready HTTP/1.1\r\nhost: x\r\n")  # no blank line: never ends
        answer = await until_closed(slow_reader)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"--http-header-timeout" in answer
        assert await until_closed(idle_reader) == b""  # sent nothing: closed without an answer
        assert await health(clients.port) == 200  # a prompt client is served


async def test_a_head_larger_than_the_limit_gets_431(tmp_path: Path) -> None:
    async with listening(tmp_path, http_max_header_size=1024) as clients:
        reader, writer = await clients.connect()
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nx-big: " + b"a" * 4096)  # still growing
        answer = await until_closed(reader)
        assert answer.startswith(b"HTTP/1.1 431 ") and b"--http-max-header-size" in answer
        reader, writer = await clients.connect()
        writer.write(b"GET /v2/health/ready HTTP/1.1\r\nx-big: " + b"a" * 2048 + b"\r\n\r\n")  # complete
        assert (await until_closed(reader)).startswith(b"HTTP/1.1 431 ")
        assert await health(clients.port) == 200


async def test_a_body_that_stops_gets_408(tmp_path: Path) -> None:
    async with listening(tmp_path, http_body_timeout=0.3) as clients:
        reader, writer = await clients.connect()
        writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"in")
        answer = await until_closed(reader)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"--http-body-timeout" in answer


async def test_at_the_connection_cap_the_longest_idle_connection_makes_room(tmp_path: Path) -> None:
    async with listening(tmp_path, http_max_connections=3) as clients:
        idle = [await clients.connect() for _ in range(3)]
        for reader, writer in idle:  # each served once, so each is open and idle for sure
            writer.write(HEALTH)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        assert await health(clients.port) == 200  # a fourth connection: the first idle one is closed
        assert await until_closed(idle[0][0]) == b""  # closed
        idle[1][1].write(HEALTH)  # the others still serve
        assert (await idle[1][0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")


def slow_body(index: int) -> bytes:
    """A request head announcing 1000 bytes of body, then ``index + 1`` bytes of it."""
    return request_head("POST", "/v2/repository/index", b"content-length: 1000") + b" " * (index + 1)


async def test_at_the_connection_cap_the_slowest_body_makes_room(tmp_path: Path) -> None:
    """Connections that send a head and then trickle their bodies (issue 30: 4,200 of them
    held every slot, health checks answered 503): at the cap, the body furthest behind
    --http-body-min-rate is closed with 408 and the health check is served."""
    async with listening(tmp_path, http_max_connections=3, http_body_min_rate=500) as clients:
        slow = [await clients.connect() for _ in range(3)]
        for index, (_, writer) in enumerate(slow):
            writer.write(slow_body(index))
            await writer.drain()
        # the rate counts once a body is MIN_RATE_GRACE_S old: waiting longer can only put
        # these bodies (1-3 bytes) further behind 500 bytes/s, so this wait cannot flake
        await asyncio.sleep(MIN_RATE_GRACE_S + 0.5)
        assert await health(clients.port) == 200
        answer = await until_closed(slow[0][0])  # the oldest, with the fewest bytes
        assert answer.startswith(b"HTTP/1.1 408 ") and b"--http-body-min-rate" in answer
        reader, writer = slow[1]  # the others keep their place: a body completed is served
        writer.write(b" " * 998)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")


async def test_without_a_minimum_body_rate_slow_bodies_keep_their_place(tmp_path: Path) -> None:
    async with listening(tmp_path, http_max_connections=2, http_body_min_rate=0) as clients:
        for index in range(2):
            _, writer = await clients.connect()
            writer.write(slow_body(index))
            await writer.drain()
        async with httpx.AsyncClient(timeout=10) as client:
            connections = clients.service.server_state.connections
            while len(connections) < 2 or not all(c.busy() for c in connections):  # both in body
                await asyncio.sleep(0.01)
            refused = await client.get(f"http://127.0.0.1:{clients.port}/v2/health/ready")
        assert refused.status_code == 503


def test_body_deficit_counts_after_the_grace() -> None:
    assert body_deficit(0, MIN_RATE_GRACE_S / 2, 500) < 0  # a body's first second is free
    assert body_deficit(1, MIN_RATE_GRACE_S + 24, 500) == 500 * 24 - 1  # a byte in 25 s
    assert body_deficit(20_000, MIN_RATE_GRACE_S + 24, 500) < 0  # 800 bytes/s: fast enough


def test_limit_flags_map_to_options() -> None:
    args = build_parser().parse_args([
        "serve", "--model-repository=r", "--http-max-connections=10", "--http-keepalive-timeout=2.5",
        "--http-header-timeout=4", "--http-body-timeout=6", "--http-max-header-size=2048",
        "--http-max-control-body-size=1024", "--http-body-min-rate=100"])
    options = options_from_args(args)
    assert (options.http_max_connections, options.http_keepalive_timeout, options.http_header_timeout,
            options.http_body_timeout, options.http_max_header_size,
            options.http_max_control_body_size, options.http_body_min_rate) == (10, 2.5, 4.0, 6.0, 2048, 1024, 100)
    defaults = options_from_args(build_parser().parse_args(["serve", "--model-repository=r"]))
    assert defaults.http_max_connections == 0  # automatic
    assert defaults.http_body_min_rate == 500  # mod_reqtimeout's MinRate default
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert 16 <= auto_max_connections() <= max(16, min(AUTO_MAX_CONNECTIONS, soft // 2))


def test_slowloris_connections_cannot_make_health_ready_fail(tmp_path: Path) -> None:
    """300 connections that trickle a request head, against a server allowed 256 open files:
    without a cap the server runs out of descriptors and the health check is never accepted."""
    server = LimitedServerProcess([f"--model-repository={tmp_path}", "--allow-grpc=false",
                                   "--allow-metrics=false"], nofile=256)
    attackers: list[socket.socket] = []
    try:
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\n")
            attackers.append(sock)
        for sock in attackers:  # another header line each: they stay "active"
            with contextlib.suppress(OSError):
                sock.sendall(b"x-slow: 1\r\n")
        started = time.monotonic()
        for _ in range(5):
            response = httpx.get(f"http://127.0.0.1:{server.port}/v2/health/ready", timeout=10)
            assert response.status_code == 200
        assert time.monotonic() - started < 10
    finally:
        for sock in attackers:
            sock.close()
        server.stop()
