"""Build the grpc.aio server for :class:`GRPCInferenceService` from ``ServerOptions``.

Channel arguments follow tritonserver's gRPC flags (keepalive and HTTP/2 ping
policy, ``grpc_server.cc``); message sizes default to INT32_MAX both ways, as
Triton's, so large tensors are never refused for size.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from workbench import Server, ServerOptions
from workbench.frontends.fd_budget import GRPC_SHARE, auto_max_connections
from workbench.frontends.grpc.decoding import add_service
from workbench.frontends.grpc.health import add_health_service
from workbench.frontends.grpc.native import NativeGrpcServer, available
from workbench.frontends.grpc.restricted import RestrictedProtocolInterceptor
from workbench.frontends.grpc.rollouts import add_rollout_service
from workbench.frontends.grpc.service import GRPCInferenceService
from workbench.frontends.grpc.shutdown_gate import ShutdownGate, gate

log = logging.getLogger("workbench")


def channel_options(options: ServerOptions) -> list[tuple[str, int]]:
    """grpc server arguments: message sizes (bytes), keepalive (ms) and ping policy, the
    connection cap (``--grpc-max-connections``, 0: a quarter of the open-file limit,
    :mod:`workbench.frontends.fd_budget`) and the streams per connection.

    ``grpc.so_reuseport`` is off unless ``--reuse-grpc-port`` (tritonserver's default,
    false) so a busy port fails to bind instead of silently sharing it. grpc-core's decompression is off:
    compressed requests are inflated by the deserializers, up to
    ``--grpc-max-decompressed-size`` (:mod:`workbench.frontends.grpc.decompression`).
    """
    return [
        ("grpc.per_message_decompression", 0),
        ("grpc.max_receive_message_length", options.grpc_max_message_size),
        ("grpc.max_send_message_length", options.grpc_max_message_size),
        ("grpc.keepalive_time_ms", options.grpc_keepalive_time),
        ("grpc.keepalive_timeout_ms", options.grpc_keepalive_timeout),
        ("grpc.keepalive_permit_without_calls", int(options.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", options.grpc_http2_max_pings_without_data),
        ("grpc.http2.min_ping_interval_without_data_ms",
         options.grpc_http2_min_recv_ping_interval_without_data),
        ("grpc.http2.max_ping_strikes", options.grpc_http2_max_ping_strikes),
        ("grpc.so_reuseport", int(options.reuse_grpc_port)),
        ("grpc.max_allowed_incoming_connections",
         options.grpc_max_connections or auto_max_connections(GRPC_SHARE)),
        ("grpc.max_concurrent_streams", options.grpc_max_concurrent_streams),
    ] + ([("grpc.max_connection_age_ms", options.grpc_max_connection_age_ms)]
         if options.grpc_max_connection_age_ms else [])


def native_frontend(options: ServerOptions) -> bool:
    """Whether ``--grpc-frontend`` (``grpc_frontend``) gets the native front end; logs the
    choice in one line (why python where native was asked for)."""
    choice = options.grpc_frontend
    why = ""
    if choice == "native" and not available():
        why = " (native asked for, not built: make setup builds it where g++ and grpc++ are)"
    elif choice == "native" and options.grpc_restrictions():
        why = " (native asked for; --grpc-restricted-protocol is served by python only)"
    elif choice == "native":
        log.info("gRPC front end: native (grpc++ on C++ threads)")
        return True
    log.info("gRPC front end: python (grpc.aio)%s", why)
    return False


def create_grpc_server(server: Server, options: ServerOptions) -> tuple[Any, int]:
    """A gRPC server serving ``server``, bound to ``grpc_address:grpc_port``: grpc.aio's, or
    the native front end's (:func:`native_frontend`,
    :class:`~workbench.frontends.grpc.native.NativeGrpcServer`, the same servicers).

    Must be called on the running event loop the engine uses; the server is not started.
    A :class:`~workbench.frontends.grpc.shutdown_gate.ShutdownGate` refuses new calls once
    :func:`~workbench.frontends.grpc.shutdown_gate.refuse_new_rpcs` is called. With
    ``--grpc-restricted-protocol``, a :class:`RestrictedProtocolInterceptor` checks the
    key of every call first. ``grpc.health.v1.Health`` is served beside it
    (:mod:`workbench.frontends.grpc.health`), and the rollout extension's
    ``workbench.RolloutService`` (:mod:`workbench.frontends.grpc.rollouts`).

    Returns:
        The grpc server and the bound port (the real one when ``grpc_port`` is 0).

    Raises:
        RuntimeError: the address cannot be bound (in use, bad address).
    """
    restrictions = options.grpc_restrictions()
    shutdown_gate = ShutdownGate()
    service = GRPCInferenceService(server, options.grpc_header_forward_pattern,
                                   options.grpc_infer_response_compression_level,
                                   options.grpc_max_stream_unsent_size)
    service.shutdown_gate = shutdown_gate
    grpc_server: Any
    if native_frontend(options):
        grpc_server = NativeGrpcServer(server, service, options, channel_options(options))
    else:
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if restrictions:
            interceptors.append(RestrictedProtocolInterceptor(restrictions))
        grpc_server = grpc.aio.server(options=channel_options(options), interceptors=interceptors)
    gate(grpc_server, shutdown_gate)
    limit = min(options.grpc_max_decompressed_size, options.grpc_max_message_size)
    add_service(service, grpc_server, limit)
    add_health_service(server, grpc_server, limit)
    add_rollout_service(server, grpc_server, limit)
    if isinstance(grpc_server, NativeGrpcServer):
        return grpc_server, grpc_server.port
    address = options.grpc_address
    host = f"[{address}]" if ":" in address else address
    port = grpc_server.add_insecure_port(f"{host}:{options.grpc_port}")
    return grpc_server, port
