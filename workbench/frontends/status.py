"""The one translation table: engine status codes -> HTTP status (Triton's mapping).

Follows Triton's ``HttpCodeFromError`` (since 23.12): INTERNAL 500, NOT_FOUND 404,
UNAVAILABLE 503, UNSUPPORTED 501; INVALID_ARG, UNKNOWN, ALREADY_EXISTS and
CANCELLED 400.
"""

from __future__ import annotations

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
