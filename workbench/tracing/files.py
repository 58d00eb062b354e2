"""Triton's trace files: one JSON list per file (``TraceManager::TraceFile``).

With ``log_frequency`` 0 every trace goes into ``PATH``: the file is opened at the first
trace (``[`` then the records), each further trace is appended after a ``,`` and flushed,
and the closing ``]`` is written when the server stops. Rolling files ``PATH.<index>``
(``log_frequency`` N, or a ``count`` that ran out) are each written whole: ``[records]``.
"""

from __future__ import annotations

import itertools
import logging
from typing import IO

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
        self._stream: IO[bytes] | None = None
        self._closed = False

    def save(self, records: list[Record], to_index_file: bool) -> None:
        """Write ``records`` to the next ``<name>.<index>`` file, or append them to ``name``
        (nothing once closed: the file is complete)."""
        if not records or self._closed:
            return
        body = dump_records(records)
        try:
            if to_index_file:
                with open(f"{self.name}.{next(self._index)}", "wb") as out:
                    out.write(b"[" + body + b"]")
                return
            if self._stream is None:
                self._stream = open(self.name, "wb")  # noqa: SIM115 - open until close()
                self._stream.write(b"[" + body)
            else:
                self._stream.write(b"," + body)
            self._stream.flush()
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def close(self) -> None:
        """Write the closing ``]`` of ``name`` (when anything was written) and close it."""
        self._closed = True
        if self._stream is not None:
            try:
                self._stream.write(b"]")
                self._stream.close()
            except OSError as exc:
                log.error("failed creating trace file: %s", exc)
            self._stream = None


__all__ = ["TraceFile", "dump_records"]
