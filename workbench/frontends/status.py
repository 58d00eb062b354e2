"""The one translation table: engine status codes -> HTTP status and gRPC status code.

HTTP follows Triton's ``HttpCodeFromError`` (since 23.12): INTERNAL 500, NOT_FOUND 404,
UNAVAILABLE 503, UNSUPPORTED 501; INVALID_ARG, UNKNOWN, ALREADY_EXISTS and
CANCELLED 400. gRPC follows Triton's ``grpc_utils.cc``: each code maps to its gRPC
namesake, INVALID_ARG to INVALID_ARGUMENT and UNSUPPORTED to UNIMPLEMENTED.
"""

from __future__ import annotations

import grpc

from workbench import StatusCode

HTTP_STATUS = {
    StatusCode.INTERNAL: 500,
    StatusCode.NOT_FOUND: 404,
    StatusCode.UNAVAILABLE: 503,
    StatusCode.UNSUPPORTED: 501,
    StatusCode.INVALID_ARG: 400,
    StatusCode.UNKNOWN: 400,
    StatusCode.ALREADY_EXISTS: 400,
    StatusCode.CANCELLED: 400,
}


def http_status(code: StatusCode) -> int:
    """HTTP status for an engine status code."""
    return HTTP_STATUS[code]


GRPC_STATUS = {
    StatusCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    StatusCode.INTERNAL: grpc.StatusCode.INTERNAL,
    StatusCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    StatusCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    StatusCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    StatusCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    StatusCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    StatusCode.CANCELLED: grpc.StatusCode.CANCELLED,
}


def grpc_status(code: StatusCode) -> grpc.StatusCode:
    """gRPC status code for an engine status code."""
    return GRPC_STATUS[code]
