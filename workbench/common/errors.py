"""One error hierarchy for the whole engine.

Every error carries one of Triton's eight status codes (``tritonserver.h``:
``TRITONSERVER_Error_Code``); each frontend translates the code once
(``workbench.frontends.status``). Nothing here imports a web or RPC library.

::

    WorkbenchError                    (INTERNAL)
    ├── UnknownError                  (UNKNOWN)
    ├── InternalError                 (INTERNAL)
    │   └── ModelLoadError            (INTERNAL)   a backend could not load a model instance
    ├── NotFound                      (NOT_FOUND)
    │   └── ModelNotFound             (NOT_FOUND)  unknown model / version
    ├── InvalidArgument               (INVALID_ARG)
    │   ├── InvalidModelConfig        (INVALID_ARG) config.pbtxt parse / validation error
    │   └── ConfigConflict            (INVALID_ARG) a config write based on another file version
    ├── Unavailable                   (UNAVAILABLE)
    │   ├── ModelNotReady             (UNAVAILABLE) version exists but is not READY
    │   └── ServerNotReady            (UNAVAILABLE)
    ├── Unsupported                   (UNSUPPORTED)
    ├── AlreadyExists                 (ALREADY_EXISTS)
    └── Cancelled                     (CANCELLED)
"""

from __future__ import annotations

import enum


class StatusCode(enum.Enum):
    """Triton's error codes (``TRITONSERVER_ERROR_*``)."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


class WorkbenchError(Exception):
    """Base of every error the engine raises on purpose.

    Args:
        message: the text sent to clients unchanged (Triton's wording where a
            client may match on it).
    """

    code: StatusCode = StatusCode.INTERNAL
    #: True when the engine refused the request before any backend saw it (unknown model,
    #: version not ready, a request that fails validation): what Triton's
    #: ``TRITONSERVER_ServerInferAsync`` returns itself, which a Python model's BLS call
    #: reports as "Model <name> - Error when running inference: <reason>"
    before_execution: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UnknownError(WorkbenchError):
    code = StatusCode.UNKNOWN


class InternalError(WorkbenchError):
    code = StatusCode.INTERNAL


class ModelLoadError(InternalError):
    """A backend failed to create a model instance (bad file, missing device, ...)."""


class NotFound(WorkbenchError):
    code = StatusCode.NOT_FOUND


class ModelNotFound(NotFound):
    """Unknown model, or unknown version of a known model (HTTP 404)."""


class InvalidArgument(WorkbenchError):
    code = StatusCode.INVALID_ARG


class InvalidModelConfig(InvalidArgument):
    """A model config that cannot be parsed or fails validation.

    The message names the file and, for parse errors, the line and column.
    """


class ConfigConflict(InvalidArgument):
    """A config write (or revert) refused because the file is not the one its text was read
    from: it changed since (another tab, an editor), or the text was read from another
    model's file. Nothing is written. A workbench error (Triton has no config-write API);
    the Jupyter handlers answer it with 409 Conflict."""


class Unavailable(WorkbenchError):
    code = StatusCode.UNAVAILABLE


class ModelNotReady(Unavailable):
    """The model version exists but is not READY (HTTP 503)."""


class ServerNotReady(Unavailable):
    """The server is starting or shutting down."""


class Unsupported(WorkbenchError):
    code = StatusCode.UNSUPPORTED


class DecoupledNotSupported(Unsupported):
    """A decoupled model asked for through a one-response API did not produce exactly one
    response; each frontend words it as Triton does (HTTP 501 / gRPC UNIMPLEMENTED)."""


class AlreadyExists(WorkbenchError):
    code = StatusCode.ALREADY_EXISTS


class Cancelled(WorkbenchError):
    code = StatusCode.CANCELLED


def request_prefix(request_id: str) -> str:
    """Triton's prefix of a request's error text: ``[request id: <id>] `` (``<id_unknown>``
    for a request without one), as its core and backends write it."""
    return f"[request id: {request_id or '<id_unknown>'}] "
