"""``pb_utils.Logger``: a model's log lines, written into the server's log.

As in Triton's python_backend, ``LogLevel`` is an enum nested in ``Logger`` whose values are
also exported onto it (``pb_utils.Logger.INFO`` is ``pb_utils.Logger.LogLevel.INFO``; this
module's ``LogLevel`` is also ``pb_utils.LogLevel``, which Triton does not have). The
stub sends every line with the model file and line that logged it; the server writes it
as Triton's ``TRITONSERVER_LogMessage`` does: INFO / WARNING / ERROR lines when
``--log-info`` / ``--log-warning`` / ``--log-error`` are on, VERBOSE lines only at
``--log-verbose`` 1 or more.

Runs inside the stub process: the standard library only.
"""

from __future__ import annotations

import enum
import sys
from typing import Any

from workbench.backends.python import pb_runtime
from workbench.backends.python.pb_args import check_str, incompatible


class LogLevel(enum.Enum):
    """Severity of a model's log line (Triton's ``pb_utils.Logger.LogLevel``)."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    def __int__(self) -> int:
        return int(self.value)


_Level = LogLevel  # the enum by a name that Logger's own ``LogLevel`` attribute does not hide


class Logger:
    """Log lines into the server's log (Triton's ``pb_utils.Logger``), tagged with the model
    file and line that logged them. Outside a stub, lines go to stderr.

    Raises (every method):
        TypeError: ``message`` is not a ``str``, or ``level`` is not a ``Logger.LogLevel``
            (an ``int`` or ``None`` too, as Triton's binding refuses them).
    """

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _Level = _Level.INFO) -> None:
        text = check_str("log", "message", message)
        if not isinstance(level, _Level):
            raise incompatible("log", "level", "a pb_utils.Logger.LogLevel", level)
        _send(text, level)

    @staticmethod
    def log_info(message: str) -> None:
        _send(check_str("log_info", "message", message), LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _send(check_str("log_warn", "message", message), LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _send(check_str("log_error", "message", message), LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _send(check_str("log_verbose", "message", message), LogLevel.VERBOSE)


def _send(message: str, level: LogLevel) -> None:
    frame: Any = sys._getframe(1)
    while frame.f_code.co_filename == __file__ and frame.f_back is not None:
        frame = frame.f_back
    if pb_runtime.runtime is None:
        print(f"[{level.name}] {message}", file=sys.stderr)
        return
    pb_runtime.runtime.log(level.name, message, frame.f_code.co_filename, frame.f_lineno)


__all__ = ["LogLevel", "Logger"]
