"""Triton's trace files: one JSON list per file (``TraceManager::TraceFile``).

With ``log_frequency`` 0 every trace goes into ``PATH``: the file is created at the first
trace as ``[records]``, and each further trace replaces the closing ``]`` with
``,records]`` in one positioned write, so the file is a complete JSON list after every trace
(Triton's ``TraceFile`` leaves the list open, ``[records``, until the server stops; the
content in the end is the same). Rolling files ``PATH.<index>`` (``log_frequency`` N, or a
``count`` that ran out) are each written whole: ``[records]``.
"""

from __future__ import annotations

import itertools
import logging
import os

import orjson

from workbench.tracing.records import Record

log = logging.getLogger(__name__)


def dump_records(records: list[Record]) -> bytes:
    """The records as Triton writes them: JSON objects joined by ``,`` (no brackets)."""
    return b",".join(orjson.dumps(record) for record in records)


class TraceFile:
    """The trace output at ``name`` (shared by every setting that names that file).

    Write errors are logged ("failed creating trace file: ..."), never raised: a trace
    must not fail a request.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._index = itertools.count()
        self._fd: int | None = None
        #: the size of ``name`` (its last byte is the closing ``]``)
        self._end = 0
        self._closed = False

    def save(self, records: list[Record], to_index_file: bool) -> None:
        """Write ``records`` to the next ``<name>.<index>`` file, or add them to the list in
        ``name`` (nothing once closed: the file is complete)."""
        if not records or self._closed:
            return
        body = dump_records(records)
        try:
            if to_index_file:
                with open(f"{self.name}.{next(self._index)}", "wb") as out:
                    out.write(b"[" + body + b"]")
                return
            if self._fd is None:
                self._fd = os.open(self.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                self._write(b"[" + body + b"]", 0)
            else:  # over the closing "]": the list stays complete
                self._write(b"," + body + b"]", self._end - 1)
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def _write(self, data: bytes, offset: int) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view, offset = view[written:], offset + written
        self._end = offset

    def close(self) -> None:
        """Close ``name`` (its list is complete already); nothing is written after."""
        self._closed = True
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                log.error("failed creating trace file: %s", exc)
            self._fd = None


__all__ = ["TraceFile", "dump_records"]
