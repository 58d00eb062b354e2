"""``--grpc-restricted-protocol``: the gRPC methods of a restricted group need their key.

A grpc.aio server interceptor looks at each call's method before any handler runs: when
the method's group (Triton's ``grpc_server.cc`` categories, :data:`METHOD_GROUPS`; every method
of a workbench extension service by its service, :data:`SERVICE_GROUPS`) is
restricted and the call's metadata lacks ``triton-grpc-protocol-<key>: <value>``, the call
is answered UNAVAILABLE ``This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'`` (Triton's code and text) without reading its request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from workbench.startup.restrictions import Restriction

#: ``inference.GRPCInferenceService`` (and ``grpc.health.v1.Health``) method -> Triton's API group
METHOD_GROUPS = {
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "Check": "health", "Watch": "health",  # grpc.health.v1.Health
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelConfig": "model-config", "ModelStatistics": "statistics",
    "TraceSetting": "trace", "LogSettings": "logging",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory", "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory", "CudaSharedMemoryUnregister": "shared-memory",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
}
#: a workbench extension service -> the group of all its methods (a product extension: the
#: rollout service promotes and rolls back by rewriting and reloading a model, as a load does)
SERVICE_GROUPS = {"workbench.RolloutService": "model-repository"}
_STREAMING = {"ModelStreamInfer"}


class RestrictedProtocolInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls to restricted groups without their key (see the module docstring).

    Args:
        restrictions: ``{group: Restriction}`` from ``ServerOptions.grpc_restrictions()``
            (header names with Triton's ``triton-grpc-protocol-`` prefix, lower-case).
    """

    def __init__(self, restrictions: dict[str, Restriction]) -> None:
        self.restrictions = restrictions

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        group = SERVICE_GROUPS.get(service) or METHOD_GROUPS.get(method, "")
        restriction = self.restrictions.get(group)
        if restriction is None or restriction.allows(_metadata(handler_call_details, restriction.header)):
            return await continuation(handler_call_details)
        return _refusal(method, restriction.header)


def _metadata(details: grpc.HandlerCallDetails, key: str) -> str | None:
    for entry_key, value in details.invocation_metadata or ():
        if entry_key == key:
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


def _refusal(method: str, header: str) -> grpc.RpcMethodHandler:
    """A handler of the method's kind that aborts before reading the request (no
    deserializer: the request bytes are never parsed)."""
    text = f"This protocol is restricted, expecting header '{header}'"

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, text)

    if method in _STREAMING:
        return grpc.stream_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


__all__ = ["METHOD_GROUPS", "SERVICE_GROUPS", "RestrictedProtocolInterceptor"]
