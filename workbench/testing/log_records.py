"""Waiting on a log message instead of a sleep: :func:`watching` attaches a handler to one
logger and sets an event when a message holding a fragment is logged (on any thread)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator


class Records(logging.Handler):
    """The messages of one logger; ``seen`` is set when one holds ``fragment``."""

    def __init__(self, fragment: str) -> None:
        super().__init__(logging.DEBUG)
        self.fragment = fragment
        self.seen = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if self.fragment in record.getMessage():
            self.seen.set()


@contextlib.contextmanager
def watching(logger: str, fragment: str) -> Iterator[Records]:
    """:class:`Records` of ``logger`` (set to DEBUG meanwhile) while the block runs."""
    handler = Records(fragment)
    target = logging.getLogger(logger)
    target.addHandler(handler)
    old = target.level
    target.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        target.removeHandler(handler)
        target.setLevel(old)


__all__ = ["Records", "watching"]
