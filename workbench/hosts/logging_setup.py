"""Log lines in tritonserver's format: ``I1130 05:46:11.123456 1234 server.py:88] message``.

:func:`configure_logging` installs one handler on the root logger; :func:`apply_log_settings`
(registered as the engine's log-settings observer) applies Triton's log settings to it at
start-up and whenever ``/v2/logging`` changes them: ``log_info`` / ``log_warning`` /
``log_error`` switch each severity, ``log_verbose_level > 0`` adds debug lines,
``log_format`` picks the default or the ISO8601 line, ``log_file`` sends lines to a file.
"""

from __future__ import annotations

import logging
import os
import time

from workbench.common.results import LogSettings


class TritonFormatter(logging.Formatter):
    """``<E|W|I><MMDD> <hh:mm:ss.uuuuuu> <pid> <file>:<line>] <msg>`` (Triton's default format),
    or with ``iso8601`` ``<YYYY-MM-DDThh:mm:ssZ> <E|W|I> <pid> <file>:<line>] <msg>`` (UTC)."""

    def __init__(self, iso8601: bool = False) -> None:
        super().__init__()
        self.iso8601 = iso8601

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname[:1] if record.levelno >= logging.WARNING else "I"
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        where = f"{os.getpid()} {record.filename}:{record.lineno}] {text}"
        if self.iso8601:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            return f"{stamp} {level} {where}"
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        return f"{level}{stamp}.{micros:06d} {where}"


class SeverityFilter(logging.Filter):
    """Drops the severities that Triton's ``log_info`` / ``log_warning`` / ``log_error`` turn off
    (debug lines count as info, as Triton's verbose lines do)."""

    def __init__(self) -> None:
        super().__init__()
        self.info = self.warning = self.error = True

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return self.error
        if record.levelno >= logging.WARNING:
            return self.warning
        return self.info


_FORMATTER = TritonFormatter()
_FILTER = SeverityFilter()


def _handler(log_file: str) -> logging.Handler:
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler()
    handler.setFormatter(_FORMATTER)
    handler.addFilter(_FILTER)
    return handler


def _set_verbose(verbose: int) -> None:
    logging.getLogger().setLevel(logging.DEBUG if verbose > 0 else logging.INFO)
    for noisy in ("uvicorn", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose > 0 else logging.WARNING)


def configure_logging(verbose: int, log_file: str = "") -> None:
    """Send workbench logs to stderr (or ``log_file``); ``verbose > 0`` adds debug lines and
    uvicorn's access log."""
    logging.getLogger().handlers[:] = [_handler(log_file)]
    _set_verbose(verbose)


def apply_log_settings(settings: LogSettings) -> None:
    """Apply Triton log settings (the engine's ``log_settings()`` shape) to the handler that
    :func:`configure_logging` installed; a new ``log_file`` replaces it."""
    _FILTER.info, _FILTER.warning = settings["log_info"], settings["log_warning"]
    _FILTER.error = settings["log_error"]
    _FORMATTER.iso8601 = settings["log_format"] == "ISO8601"
    _set_verbose(settings["log_verbose_level"])
    root = logging.getLogger()
    current = [h for h in root.handlers if _FILTER in h.filters]
    wanted = os.path.abspath(settings["log_file"]) if settings["log_file"] else None
    if current and getattr(current[0], "baseFilename", None) == wanted:
        return
    for handler in current:
        root.removeHandler(handler)
        handler.close()
    root.addHandler(_handler(settings["log_file"]))
