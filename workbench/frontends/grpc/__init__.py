"""Triton's gRPC API (``inference.GRPCInferenceService``) over the engine, on grpc.aio."""

from workbench.frontends.grpc.server import channel_options, create_grpc_server
from workbench.frontends.grpc.service import GRPCInferenceService

__all__ = ["GRPCInferenceService", "channel_options", "create_grpc_server"]
