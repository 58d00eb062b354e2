"""Triton's exception classes (``tritonserver.TritonError`` and one subclass per
``TRITONSERVER_Error_Code``), and the one mapping from the engine's errors to them.

The text is the engine's unchanged: it follows Triton's wording (e.g. ``Request for unknown
model: 'm' is not found``)."""

from __future__ import annotations

from workbench import ModelNotFound, StatusCode, WorkbenchError


class TritonError(Exception):
    """Base of every error of this API (Triton's ``TritonError``)."""


class UnknownError(TritonError):
    """``TRITONSERVER_ERROR_UNKNOWN``."""


class InternalError(TritonError):
    """``TRITONSERVER_ERROR_INTERNAL``."""


class NotFoundError(TritonError):
    """``TRITONSERVER_ERROR_NOT_FOUND``."""


class InvalidArgumentError(TritonError):
    """``TRITONSERVER_ERROR_INVALID_ARG``."""


class UnavailableError(TritonError):
    """``TRITONSERVER_ERROR_UNAVAILABLE``."""


class UnsupportedError(TritonError):
    """``TRITONSERVER_ERROR_UNSUPPORTED``: also what cannot apply here (GPU memory)."""


class AlreadyExistsError(TritonError):
    """``TRITONSERVER_ERROR_ALREADY_EXISTS``."""


class CancelledError(TritonError):
    """``TRITONSERVER_ERROR_CANCELLED``."""


_BY_CODE: dict[StatusCode, type[TritonError]] = {
    StatusCode.UNKNOWN: UnknownError,
    StatusCode.INTERNAL: InternalError,
    StatusCode.NOT_FOUND: NotFoundError,
    StatusCode.INVALID_ARG: InvalidArgumentError,
    StatusCode.UNAVAILABLE: UnavailableError,
    StatusCode.UNSUPPORTED: UnsupportedError,
    StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    StatusCode.CANCELLED: CancelledError,
}


def triton_error(error: WorkbenchError) -> TritonError:
    """The Triton exception for an engine error, same text.

    A request for a model name the server does not know is ``InvalidArgumentError`` as in
    Triton's C API (``FindModelIdentifier``: INVALID_ARG), where the v2 frontends answer
    NOT_FOUND; a known model without the version asked for stays ``NotFoundError``."""
    if isinstance(error, ModelNotFound) and error.message.endswith("' is not found"):
        return InvalidArgumentError(error.message)
    return _BY_CODE.get(error.code, TritonError)(error.message)


__all__ = ["AlreadyExistsError", "CancelledError", "InternalError", "InvalidArgumentError", "NotFoundError",
           "TritonError", "UnavailableError", "UnknownError", "UnsupportedError", "triton_error"]
