"""Progress of a tuning run on a terminal or in a log: what ``workbench tune`` writes to
stderr while it measures (no dependency: the base install has no tqdm).

On a terminal one status line is rewritten in place at every event (``\\r``, cleared to the
end of the line, cut to the terminal's width); each finished point, skipped or failed
setting also stays as a line of its own above it. Anywhere else (a pipe, a CI log) every
event is one plain line. Notebooks get a tqdm bar instead (:func:`workbench.tuning.tune`).
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from workbench.tuning.lab import TuneEvent

#: events that leave a line of their own on a terminal (the others only update the status)
KEPT = ("point", "skip", "failed", "done")


class ProgressLine:
    """A ``TuneEvent`` callback writing to ``stream`` (see the module docstring).

    Args:
        stream: where to write (stderr for the CLI).
        tty: rewrite one line in place; None: when ``stream`` is a terminal.
    """

    def __init__(self, stream: TextIO, tty: bool | None = None) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._status = False

    def __call__(self, event: TuneEvent) -> None:
        line = self.line(event)
        if not self.tty:
            self.stream.write(line + "\n")
        else:
            width = max(shutil.get_terminal_size().columns - 1, 20)
            self.stream.write("\r\x1b[K")
            if event.kind in KEPT:
                self.stream.write(line + "\n")
                self._status = False
            else:
                self.stream.write(line[:width])
                self._status = True
        self.stream.flush()

    def line(self, event: TuneEvent) -> str:
        """``tune [3/12 points, 41 s] load: loading instance_count=2``."""
        count = f"{event.points}/{event.planned}" if event.planned else f"{event.points}"
        elapsed = time.monotonic() - self.started
        return f"tune [{count} points, {elapsed:.0f} s] {event.kind}: {event.text}"

    def close(self) -> None:
        """End a status line left on the terminal (so what follows starts on a line of its own)."""
        if self.tty and self._status:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._status = False


__all__ = ["ProgressLine"]
