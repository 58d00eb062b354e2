"""The v2 gRPC service through Serve's gRPC proxy, unchanged.

Serve's proxy, started with :func:`add_inference_service` as its servicer function, takes
each call of ``inference.GRPCInferenceService`` as bytes (no request deserializer: the messages
are never decoded, nor pickled as objects, on the way) and hands it to the replica method of
the RPC's name; the replica relays the bytes to the engine's own gRPC frontend listening on
the replica's loopback (:func:`relay_methods`), so every RPC
is answered by the same code as ``workbench serve``'s: Triton's status codes and messages,
the restricted-protocol keys (the client's metadata is forwarded), the bidirectional
``ModelStreamInfer`` (Serve 2.60's proxy carries bidi streams), decoupled models. The answer
goes back as the frontend wrote it (:class:`RawMessage`), never decoded in the replica.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

#: the KServe v2 service's full name and its one bidirectional method
SERVICE = "inference.GRPCInferenceService"
STREAM_METHODS = frozenset({"ModelStreamInfer"})
#: metadata Serve's proxy reads or grpc-core sets: not forwarded to the engine's frontend
DROPPED_METADATA = frozenset({"application", "request_id", "multiplexed_model_id", "session_id",
                              "user-agent", "traceparent", "tracestate"})


class RawMessage:
    """An encoded protobuf message handed back to Serve, which only calls
    ``SerializeToString`` on a replica's gRPC answer."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:
        return self.data


def service_methods() -> list[str]:
    """The RPC names of ``inference.GRPCInferenceService`` (from tritonclient's descriptor)."""
    from tritonclient.grpc import service_pb2

    return [method.name for method in service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods]


def add_inference_service(servicer: Any, server: Any) -> None:
    """Serve's gRPC servicer function (``grpc_servicer_functions``): every method of the v2
    service registered with no deserializer, so the proxy hands each request on as its
    bytes. The handlers' bodies are Serve's (it replaces them with its routing ones, keeping
    the deserializer: checked by tests/architecture/test_library_internals.py)."""
    def unused(*_: Any) -> None:
        raise NotImplementedError  # replaced by Serve's proxy

    handlers = {name: (grpc.stream_stream_rpc_method_handler(unused) if name in STREAM_METHODS
                       else grpc.unary_unary_rpc_method_handler(unused)) for name in service_methods()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


def forwarded_metadata(context: Any) -> list[tuple[str, str]]:
    """The client's metadata less Serve's routing keys and grpc-core's own."""
    return [(key, value) for key, value in context.invocation_metadata()
            if key not in DROPPED_METADATA and not key.startswith((":", "grpc-"))]


def _identity(data: bytes) -> bytes:
    return data


class Relay:
    """A loopback channel to one engine's gRPC frontend (``target``: ``127.0.0.1:port``),
    message sizes unbounded as Triton's (INT32_MAX)."""

    def __init__(self, target: str, max_message_bytes: int) -> None:
        self.channel = grpc.aio.insecure_channel(target, options=[
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes)])

    async def unary(self, method: str, request: bytes, context: Any) -> RawMessage:
        call = self.channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=_identity,
                                        response_deserializer=_identity)
        try:
            return RawMessage(await call(request, metadata=forwarded_metadata(context)))
        except grpc.aio.AioRpcError as exc:
            context.set_code(exc.code())
            context.set_details(exc.details() or "")
            return RawMessage(b"")

    async def stream(self, method: str, requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[RawMessage]:
        call = self.channel.stream_stream(f"/{SERVICE}/{method}", request_serializer=_identity,
                                          response_deserializer=_identity)
        responses = call(requests, metadata=forwarded_metadata(context))
        try:
            async for response in responses:
                yield RawMessage(response)
        except grpc.aio.AioRpcError as exc:
            context.set_code(exc.code())
            context.set_details(exc.details() or "")

    async def close(self) -> None:
        await self.channel.close()


def relay_methods() -> dict[str, Callable[..., Any]]:
    """One replica method per RPC, named as the RPC (Serve's proxy calls the replica method
    of the RPC's name with the decoded request, or the request stream, and ``grpc_context``).
    Each relays through the replica's ``self.relay`` (a :class:`Relay`)."""

    def unary(name: str) -> Callable[..., Any]:
        async def method(self: Any, request: bytes, grpc_context: Any) -> RawMessage:
            return await self.relay.unary(name, request, grpc_context)
        method.__name__ = name
        return method

    def stream(name: str) -> Callable[..., Any]:
        async def method(self: Any, request_stream: Any, grpc_context: Any) -> AsyncIterator[RawMessage]:
            async for response in self.relay.stream(name, request_stream, grpc_context):
                yield response
        method.__name__ = name
        return method

    return {name: (stream(name) if name in STREAM_METHODS else unary(name)) for name in service_methods()}
