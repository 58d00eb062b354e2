"""``grpc.health.v1.Health``: Kubernetes gRPC probes and grpc-health-probe get SERVING when
the server is ready, NOT_SERVING when it is not (Triton's ``grpc_server.cc`` HealthCheck)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from workbench import Server, ServerOptions
from workbench.frontends.grpc import create_grpc_server


async def _check(server: Server, options: ServerOptions, metadata=()) -> health_pb2.HealthCheckResponse:
    grpc_server, port = create_grpc_server(server, options)
    await grpc_server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            return await stub.Check(health_pb2.HealthCheckRequest(service=""), metadata=metadata)
    finally:
        await grpc_server.stop(None)


LOCAL: dict[str, Any] = {"grpc_address": "127.0.0.1", "grpc_port": 0}


async def test_ready_server_is_serving(server: Server) -> None:
    response = await _check(server, ServerOptions(**LOCAL))
    assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_unready_server_is_not_serving(mixed_repository) -> None:
    options = ServerOptions(model_repository=[str(mixed_repository)], exit_on_error=False)
    async with Server(options) as server:
        assert not server.is_ready()
        response = await _check(server, ServerOptions(**LOCAL))
    assert response.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_health_check_is_in_the_restricted_health_group(server: Server) -> None:
    options = ServerOptions(**LOCAL, grpc_restricted_protocol=["health:k=v"])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _check(server, options)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    response = await _check(server, options, metadata=(("triton-grpc-protocol-k", "v"),))
    assert response.status == health_pb2.HealthCheckResponse.SERVING
