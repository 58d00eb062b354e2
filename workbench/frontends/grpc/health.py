"""``grpc.health.v1.Health`` (gRPC's standard health service, from grpcio-health-checking):
``Check`` answers SERVING while the engine is ready and NOT_SERVING otherwise, whatever
``service`` it names, as tritonserver's ``grpc_server.cc`` HealthCheck (which also asks the
server's readiness). ``Watch`` is not served (UNIMPLEMENTED, as Triton). Kubernetes gRPC
probes and ``grpc-health-probe`` use ``Check``; it is in the ``health`` group of
``--grpc-restricted-protocol``.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from workbench import Server
from workbench.frontends.grpc.decoding import add_lenient


class HealthService(health_pb2_grpc.HealthServicer):
    """``Check`` from :meth:`Server.is_ready` (asked on every call, so no status to keep)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    async def Check(self, request: health_pb2.HealthCheckRequest,
                    context: grpc.aio.ServicerContext) -> health_pb2.HealthCheckResponse:
        """SERVING when the server is ready, else NOT_SERVING."""
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse(status=serving if self.server.is_ready() else not_serving)

    async def Watch(self, request, context: grpc.aio.ServicerContext) -> None:
        """Not served (tritonserver serves only ``Check``)."""
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")


def add_health_service(server: Server, grpc_server: grpc.aio.Server, limit: int) -> None:
    """Register :class:`HealthService` for ``server`` on ``grpc_server``; requests that do not
    decode are INVALID_ARGUMENT, compressed ones inflate to at most ``limit`` bytes
    (:func:`~workbench.frontends.grpc.decoding.add_lenient`)."""
    add_lenient(health_pb2_grpc.add_HealthServicer_to_server, HealthService(server), grpc_server, limit)


__all__ = ["HealthService", "add_health_service"]
