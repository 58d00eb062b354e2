"""Undecodable request messages are the client's error: INVALID_ARGUMENT, not UNKNOWN.

grpc's generated handlers parse each request with ``Message.FromString``; bytes that are
not a valid message raise ``DecodeError`` inside grpc, which answers UNKNOWN ("Unexpected
<class 'DecodeError'>"). :func:`add_service` registers the generated handlers with a
deserializer that keeps such a request as :class:`Undecodable` and a behaviour that aborts
it with INVALID_ARGUMENT; every decodable request reaches the servicer unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2_grpc

from workbench.frontends.grpc.raw_wire import parse_infer_request, serialize_infer_response

SERVICE = "inference.GRPCInferenceService"


class Undecodable:
    """A request whose bytes did not parse: ``message`` says why (protobuf's text)."""

    def __init__(self, message: str) -> None:
        self.message = message


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return Undecodable(f"failed to parse the request message: {exc}")

    return deserialize


def _unary(behaviour: Callable) -> Callable:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await behaviour(request, context)

    return handler


def _stream(behaviour: Callable) -> Callable:
    async def handler(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext):
        async def decoded() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Undecodable):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
                yield request

        async for response in behaviour(decoded(), context):
            yield response

    return handler


class _Recorder:
    """Stands in for the grpc server while the generated ``add_..._to_server`` runs, to
    collect its method handlers."""

    handlers: dict[str, grpc.RpcMethodHandler]

    def add_generic_rpc_handlers(self, _: Any) -> None:
        pass

    def add_registered_method_handlers(self, _: str, handlers: dict) -> None:
        self.handlers = handlers


def add_service(servicer: service_pb2_grpc.GRPCInferenceServiceServicer, server: grpc.aio.Server) -> None:
    """Register ``servicer`` on ``server`` as the generated code does, with undecodable
    requests answered INVALID_ARGUMENT (unary RPCs and the ``ModelStreamInfer`` stream);
    ``ModelInfer`` parses and serializes with :mod:`workbench.frontends.grpc.raw_wire` and
    gets an :class:`Undecodable` as its request, to abort itself (one coroutine less on the hot
    path than the wrapper the other RPCs get)."""
    recorder = _Recorder()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, recorder)
    handlers = {}
    for name, handler in recorder.handlers.items():
        fields: dict[str, Any] = {"request_deserializer": _lenient(handler.request_deserializer)}
        if name == "ModelInfer":  # raw_wire skips protobuf's copies of tensor bytes; the hot
            # path answers an Undecodable itself (no wrapper coroutine)
            fields = {"request_deserializer": _lenient(parse_infer_request),
                      "response_serializer": serialize_infer_response,
                      "unary_unary": handler.unary_unary}
        elif handler.unary_unary is not None:
            fields["unary_unary"] = _unary(handler.unary_unary)
        elif handler.stream_stream is not None:
            fields["stream_stream"] = _stream(handler.stream_stream)
        else:  # the service has no other kinds; keep any such handler's parser strict
            fields = {}
        handlers[name] = handler._replace(**fields)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
