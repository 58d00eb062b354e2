"""The gRPC port's connection and stream caps (issue 30, finding 3): each connection advertises
``MAX_CONCURRENT_STREAMS`` (``--grpc-max-concurrent-streams``) and refuses streams beyond it; the
port closes connections beyond ``--grpc-max-connections`` (automatic: a quarter of the open-file
limit), so a flood of idle gRPC connections leaves HTTP health probes their descriptors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import grpc
import h2.errors
import httpx
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench import Server, ServerOptions
from workbench.frontends.fd_budget import GRPC_SHARE, auto_max_connections
from workbench.frontends.grpc import channel_options
from workbench.hosts.cli import build_parser, options_from_args
from workbench.testing.grpc_wire import MAX_CONCURRENT_STREAMS, RawGrpcConnection
from workbench.testing.process import LimitedServerProcess

STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
#: the client preface and an empty SETTINGS frame: what an idle HTTP/2 client sends
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def settings_of(port: int) -> dict[int, int]:
    with RawGrpcConnection(port, timeout_s=10) as connection:
        return connection.settings()


async def test_each_connection_advertises_its_stream_cap(server: Server, grpc_serving) -> None:
    async with grpc_serving(server) as port:
        assert (await asyncio.to_thread(settings_of, port)).get(MAX_CONCURRENT_STREAMS) == 128
    async with grpc_serving(server, grpc_max_concurrent_streams=4) as port:
        assert (await asyncio.to_thread(settings_of, port)).get(MAX_CONCURRENT_STREAMS) == 4


def open_streams(port: int, count: int) -> list[int]:
    """Open ``count`` idle ModelStreamInfer streams on one connection, ignoring the server's cap;
    the error codes of the streams the server reset (read until it has reset count - cap)."""
    with RawGrpcConnection(port, timeout_s=30) as connection:
        cap = connection.settings()[MAX_CONCURRENT_STREAMS]
        connection.h2.remote_settings[MAX_CONCURRENT_STREAMS] = 2**31 - 1  # an attacker's client
        connection.h2.remote_settings.acknowledge()
        streams = [connection.open(STREAM_INFER) for _ in range(count)]
        while sum(connection.replies[s].reset is not None for s in streams) < count - cap:
            connection.receive()
        return [reset for s in streams if (reset := connection.replies[s].reset) is not None]


@pytest.mark.python_grpc
async def test_streams_beyond_the_cap_are_refused(server: Server, grpc_serving) -> None:
    async with grpc_serving(server, grpc_max_concurrent_streams=4) as port:
        resets = await asyncio.to_thread(open_streams, port, 7)
        assert resets == [h2.errors.ErrorCodes.REFUSED_STREAM] * 3
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:  # serving still
            assert (await service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest())).live


def idle_connections(port: int, count: int) -> tuple[list[socket.socket], int]:
    """``count`` idle HTTP/2 connections; (those the server kept, how many it closed at once).
    Each first read is the server's SETTINGS (kept) or the end of the stream (closed)."""
    kept, closed = [], 0
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(PREFACE)
        try:
            answered = bool(sock.recv(65536))
        except ConnectionResetError:
            answered = False
        if answered:
            kept.append(sock)
        else:
            closed += 1
            sock.close()
    return kept, closed


@pytest.mark.python_grpc
async def test_connections_beyond_the_cap_are_closed(server: Server, grpc_serving) -> None:
    async with grpc_serving(server, grpc_max_connections=8) as port:
        kept, closed = await asyncio.to_thread(idle_connections, port, 12)
        try:
            assert (len(kept), closed) == (8, 4)
        finally:
            for sock in kept:
                sock.close()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:  # room again
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert (await stub.ServerLive(pb.ServerLiveRequest(), wait_for_ready=True, timeout=30)).live


def test_flags_and_the_automatic_connection_cap() -> None:
    args = build_parser().parse_args(["serve", "--model-repository=m", "--grpc-max-connections=100",
                                      "--grpc-max-concurrent-streams=16"])
    channel = dict(channel_options(options_from_args(args)))
    assert channel["grpc.max_allowed_incoming_connections"] == 100
    assert channel["grpc.max_concurrent_streams"] == 16
    defaults = dict(channel_options(ServerOptions()))
    assert defaults["grpc.max_allowed_incoming_connections"] == auto_max_connections(GRPC_SHARE)
    assert defaults["grpc.max_concurrent_streams"] == 128


@pytest.mark.python_grpc
def test_idle_grpc_connections_cannot_make_health_fail(tmp_path: Path) -> None:
    """300 idle HTTP/2 connections to the gRPC port of a server allowed 256 open files: without a
    cap they took every descriptor and the HTTP health probe was never answered."""
    server = LimitedServerProcess([f"--model-repository={tmp_path}", "--allow-metrics=false"], nofile=256)
    attackers: list[socket.socket] = []
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):  # refused at connect: the server is full
                sock = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5)
                sock.sendall(PREFACE)
                attackers.append(sock)
        for _ in range(5):  # a new connection each, as a Kubernetes probe
            assert httpx.get(f"http://127.0.0.1:{server.port}/v2/health/live", timeout=10).status_code == 200
    finally:
        for sock in attackers:
            sock.close()
        server.stop()
