"""Triton's scheduler test hooks: environment variables that hold a scheduler back.

Triton core reads them where a scheduler starts (``dynamic_batch_scheduler.cc``,
``sequence_batch_scheduler.cc``), with C's ``atoi``; so does the workbench, at model load:

- ``TRITONSERVER_DELAY_SCHEDULER=N``: the dynamic batcher forms no batch until N requests
  are queued, then proceeds as usual for good; the sequence batchers likewise until N
  requests of sequences holding a slot are queued.
- ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M``: with the former set, the ``direct`` sequence
  batcher also waits until M requests wait in the backlog (sequences without a slot).

They make batching tests deterministic (requests queue up before the first batch forms);
unset, 0 or not a number means off. A negative number is off too (Triton's ``size_t`` would
hold forever).
"""

from __future__ import annotations

import os
import re

DELAY_SCHEDULER = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_SCHEDULER = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"

_ATOI = re.compile(r"\s*([+-]?\d+)")


def hook_count(name: str) -> int:
    """The count the hook ``name`` holds a scheduler for (0 = off): the environment
    variable's leading integer, as ``atoi`` reads it; unset, unreadable or negative -> 0."""
    match = _ATOI.match(os.environ.get(name, ""))
    return max(0, int(match.group(1))) if match else 0


__all__ = ["BACKLOG_DELAY_SCHEDULER", "DELAY_SCHEDULER", "hook_count"]
