"""The rollout extension over gRPC: ``workbench.RolloutService`` on the same grpc.aio server
(and port) as Triton's ``inference.GRPCInferenceService``. A product extension: Triton has no
rollouts (``docs/rollouts.md``), and its ``GRPCInferenceService`` cannot be extended, so this
is a service of its own.

Its messages are ``google.protobuf.Struct`` (JSON objects, shipped with protobuf): a client needs
grpcio and protobuf only, no generated code. Requests and answers are the HTTP routes' JSON
(:mod:`workbench.frontends.http.rollout_routes`) with the model named in the body:

- ``Get``      ``{"model"}`` -> the report (``server.rollouts.get``)
- ``Set``      ``{"model", "weights": {"1": 90, "2": 10}, "sticky"?, "candidate"?,
  "mirror_percent"?, "mirror_max_in_flight"?}`` -> the report
- ``Clear``    ``{"model"}`` -> ``{}``
- ``Promote``  ``{"model", "version"?}`` -> ``{"model", "promoted", "config"}``
- ``Rollback`` ``{"model"}`` -> ``{"model", "restored", "config"}``

A Struct's numbers are doubles: whole numbers arrive as ints (a version ``2.0`` is 2), and a
report's ints go out as doubles (JSON has one number type). Errors are the engine's, with the
gRPC status of :mod:`workbench.frontends.status` (INVALID_ARGUMENT a bad rollout, an unknown or
missing field; NOT_FOUND an unknown model or nothing to roll back; UNIMPLEMENTED promote in mode
``none``). The service is in the ``model-repository`` group of ``--grpc-restricted-protocol``
(:mod:`workbench.frontends.grpc.restricted`), as the repository RPCs that load and unload.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from workbench import InvalidArgument, Server
from workbench.frontends.grpc.decoding import add_lenient
from workbench.frontends.grpc.rpc import Context, rpc
from workbench.frontends.rollout_body import PROMOTE_FIELDS, ROLLOUT_FIELDS, checked_fields

#: the gRPC service's full name (methods are ``/workbench.RolloutService/<Method>``)
SERVICE = "workbench.RolloutService"
#: its methods, all unary Struct -> Struct
METHODS = ("Get", "Set", "Clear", "Promote", "Rollback")


class RolloutServicer:
    """``workbench.RolloutService`` over ``server.rollouts`` (module docstring)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    @rpc
    async def Get(self, request: struct_pb2.Struct, context: Context) -> struct_pb2.Struct:
        """The rollout of ``model`` and its live report."""
        model, _ = _body(request, ())
        return _struct(await self.server.rollouts.get(model))

    @rpc
    async def Set(self, request: struct_pb2.Struct, context: Context) -> struct_pb2.Struct:
        """Set or replace the rollout of ``model`` (``server.rollouts.set``); the report."""
        model, fields = _body(request, ROLLOUT_FIELDS)
        return _struct(await self.server.rollouts.set(model, **fields))

    @rpc
    async def Clear(self, request: struct_pb2.Struct, context: Context) -> struct_pb2.Struct:
        """Remove the rollout of ``model``; an empty Struct."""
        model, _ = _body(request, ())
        await self.server.rollouts.clear(model)
        return struct_pb2.Struct()

    @rpc
    async def Promote(self, request: struct_pb2.Struct, context: Context) -> struct_pb2.Struct:
        """Make ``version`` (default: the candidate) the one served version of ``model``."""
        model, fields = _body(request, PROMOTE_FIELDS)
        return _struct(await self.server.rollouts.promote(model, fields.get("version")))

    @rpc
    async def Rollback(self, request: struct_pb2.Struct, context: Context) -> struct_pb2.Struct:
        """Undo the last promote of ``model``."""
        model, _ = _body(request, ())
        return _struct(await self.server.rollouts.rollback(model))


def add_RolloutServiceServicer_to_server(servicer: RolloutServicer, server: Any) -> None:
    """Register ``servicer``'s methods on ``server`` as protoc's generated
    ``add_..._to_server`` functions do (so :func:`~workbench.frontends.grpc.decoding.add_lenient`
    can wrap it)."""
    handlers = {name: grpc.unary_unary_rpc_method_handler(
        getattr(servicer, name), request_deserializer=struct_pb2.Struct.FromString,
        response_serializer=struct_pb2.Struct.SerializeToString) for name in METHODS}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


def add_rollout_service(server: Server, grpc_server: grpc.aio.Server, limit: int) -> None:
    """Register ``workbench.RolloutService`` for ``server`` on ``grpc_server``; requests that do
    not decode are INVALID_ARGUMENT, compressed ones inflate to at most ``limit`` bytes
    (:func:`~workbench.frontends.grpc.decoding.add_lenient`)."""
    add_lenient(add_RolloutServiceServicer_to_server, RolloutServicer(server), grpc_server, limit)


def _body(request: struct_pb2.Struct, known: Iterable[str]) -> tuple[str, dict[str, Any]]:
    """The request's model name and its other fields (whole numbers as ints).

    Raises:
        InvalidArgument: no ``model`` string, or a field not in ``known``.
    """
    body = _whole_numbers(json_format.MessageToDict(request))
    model = body.pop("model", None)
    if not isinstance(model, str) or not model:
        raise InvalidArgument("rollout request needs 'model': the model's name")
    return model, checked_fields(body, known)


def _whole_numbers(value: Any) -> Any:
    """``value`` with every float that is a whole number as an int (a Struct has doubles only:
    a version or a cap sent as 2 arrives as 2.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def _struct(payload: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(payload)
    return message


__all__ = ["METHODS", "SERVICE", "RolloutServicer", "add_RolloutServiceServicer_to_server", "add_rollout_service"]
