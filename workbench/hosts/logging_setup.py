"""Log lines in tritonserver's format: ``I1130 05:46:11.123456 1234 server.py:88] message``."""

from __future__ import annotations

import logging
import os
import time


class TritonFormatter(logging.Formatter):
    """``<E|W|I><MMDD> <hh:mm:ss.uuuuuu> <pid> <file>:<line>] <msg>`` (Triton's default format)."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname[:1] if record.levelno >= logging.WARNING else "I"
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"{level}{stamp}.{micros:06d} {os.getpid()} {record.filename}:{record.lineno}] {text}"


def configure_logging(verbose: int) -> None:
    """Send workbench logs to stderr; ``verbose > 0`` adds debug lines and uvicorn's access log."""
    handler = logging.StreamHandler()
    handler.setFormatter(TritonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose > 0 else logging.INFO)
    for noisy in ("uvicorn", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose > 0 else logging.WARNING)
