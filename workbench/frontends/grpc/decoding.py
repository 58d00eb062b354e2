"""Request messages that do not decode, or inflate too far, are the client's error, not UNKNOWN.

grpc's generated handlers parse each request with ``Message.FromString``; bytes that are
not a valid message raise ``DecodeError`` inside grpc, which answers UNKNOWN ("Unexpected
<class 'DecodeError'>"). :func:`add_service` registers the generated handlers with a
deserializer that keeps such a request as :class:`Undecodable` and a behaviour that aborts
it with INVALID_ARGUMENT; every decodable request reaches the servicer unchanged.

Compressed messages (grpc-core's decompression is off: :mod:`workbench.frontends.grpc.decompression`)
come out of the deserializer as :class:`Compressed`, to be inflated (up to the bound) and parsed
on a worker thread by :func:`resolve` before the behaviour sees them; too large once inflated
is RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2_grpc

from workbench.frontends.grpc.decompression import Compressed, Undecodable, looks_compressed
from workbench.frontends.grpc.raw_wire import parse_infer_request, serialize_infer_response
from workbench.frontends.grpc.shutdown_gate import ShutdownGate, gate_of, refuse


def _lenient(parse: Callable[[bytes], Any], limit: int) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        if looks_compressed(data):
            return Compressed(data, parse, limit)
        try:
            return parse(data)
        except DecodeError as exc:
            return Undecodable(f"failed to parse the request message: {exc}")

    return deserialize


async def resolve(request: Any) -> Any:
    """``request`` as the servicer takes it: a :class:`Compressed` one inflated and parsed on a
    worker thread (zlib releases the GIL), anything else as it is (an :class:`Undecodable`
    included, for the caller to abort)."""
    if isinstance(request, Compressed):
        return await asyncio.to_thread(request.open)
    return request


async def _checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
    """The decoded request; aborts the RPC with the code of an :class:`Undecodable` one."""
    request = await resolve(request)
    if isinstance(request, Undecodable):
        await context.abort(request.code, request.message)
    return request


def _unary(behaviour: Callable, shutdown_gate: ShutdownGate) -> Callable:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if shutdown_gate.closed:
            await refuse(context)
        return await behaviour(await _checked(request, context), context)

    return handler


def _unary_stream(behaviour: Callable, shutdown_gate: ShutdownGate) -> Callable:
    async def handler(request: Any, context: grpc.aio.ServicerContext):
        if shutdown_gate.closed:
            await refuse(context)
        async for response in behaviour(await _checked(request, context), context):
            yield response

    return handler


def _stream(behaviour: Callable, shutdown_gate: ShutdownGate) -> Callable:
    async def handler(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext):
        if shutdown_gate.closed:
            await refuse(context)
        async def decoded() -> AsyncIterator[Any]:
            async for request in requests:
                yield await _checked(request, context)

        async for response in behaviour(decoded(), context):
            yield response

    return handler


class _Recorder:
    """Stands in for the grpc server while the generated ``add_..._to_server`` runs, to
    collect its method handlers."""

    service: str
    handlers: dict[str, grpc.RpcMethodHandler]

    def add_generic_rpc_handlers(self, _: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service = service
        self.handlers = handlers


def add_service(servicer: service_pb2_grpc.GRPCInferenceServiceServicer, server: grpc.aio.Server,
                limit: int) -> None:
    """Register ``servicer`` on ``server`` as the generated code does, with undecodable
    requests answered INVALID_ARGUMENT (unary RPCs and the ``ModelStreamInfer`` stream) and
    compressed ones inflated to at most ``limit`` bytes (more: RESOURCE_EXHAUSTED);
    ``ModelInfer`` parses and serializes with :mod:`workbench.frontends.grpc.raw_wire` and
    gets an :class:`Undecodable` or a :class:`Compressed` as its request, to resolve itself
    (one coroutine less on the hot path than the wrapper the other RPCs get)."""
    add_lenient(service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server, servicer, server, limit,
                raw={"ModelInfer"}, serialized={"ModelStreamInfer"})


def _passed_through(message: Any) -> bytes:
    """The response serializer of a method whose responses may come serialized already."""
    return message if type(message) is bytes else message.SerializeToString()


def add_lenient(add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server,
                limit: int, raw: frozenset[str] | set[str] = frozenset(),
                serialized: frozenset[str] | set[str] = frozenset()) -> None:
    """Register ``servicer`` with a generated ``add_..._to_server`` function, every method's
    request deserializer lenient (see :func:`add_service`; ``raw``: methods whose handler
    resolves its request itself, checks the server's shutdown gate itself and that use
    :mod:`~workbench.frontends.grpc.raw_wire`;
    ``serialized``: methods whose responses may be bytes already)."""
    recorder = _Recorder()
    add_to_server(servicer, recorder)
    shutdown_gate = gate_of(server)  # each wrapper refuses a call that starts after the stop
    handlers = {}
    for name, handler in recorder.handlers.items():
        fields: dict[str, Any] = {"request_deserializer": _lenient(handler.request_deserializer, limit)}
        if name in serialized:
            fields["response_serializer"] = _passed_through
        if name in raw:  # raw_wire skips protobuf's copies of tensor bytes; the hot path
            # resolves its request itself (no wrapper coroutine)
            fields = {"request_deserializer": _lenient(parse_infer_request, limit),
                      "response_serializer": serialize_infer_response,
                      "unary_unary": handler.unary_unary}
        elif handler.unary_unary is not None:
            fields["unary_unary"] = _unary(handler.unary_unary, shutdown_gate)
        elif handler.unary_stream is not None:
            fields["unary_stream"] = _unary_stream(handler.unary_stream, shutdown_gate)
        elif handler.stream_stream is not None:
            fields["stream_stream"] = _stream(handler.stream_stream, shutdown_gate)
        else:  # no such kinds here; keep any such handler's parser strict
            fields = {}
        # grpc's handlers are namedtuples (grpc._utilities.RpcMethodHandler, undocumented):
        # checked by tests/architecture/test_library_internals.py (grpcio's bound in pyproject.toml)
        handlers[name] = handler._replace(**fields)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(recorder.service, handlers),))
    server.add_registered_method_handlers(recorder.service, handlers)
