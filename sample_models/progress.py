"""Progress lines of the sample-model builds (``build.py``): on stdout, flushed at once, so
that no step of ``make models`` over ~10 s is silent (issue 35)."""

from __future__ import annotations


def say(model: str, text: str) -> None:
    """Print ``  <model>: <text>`` now (not when the output buffer fills)."""
    print(f"  {model}: {text}", flush=True)


def chunks(count: int, parts: int = 10, smallest: int = 64) -> list[tuple[int, int]]:
    """``(start, stop)`` of ``parts`` consecutive slices of ``range(count)`` (none shorter
    than ``smallest`` but the last): the units a long loop reports its progress by."""
    size = max(smallest, -(-count // parts))
    return [(start, min(start + size, count)) for start in range(0, count, size)]
