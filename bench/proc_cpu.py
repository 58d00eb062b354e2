"""CPU time of processes and threads read from Linux ``/proc``, for the bench scripts.

Every number is user + system time (``utime`` + ``stime``, fields 14 and 15 of ``proc_pid_stat(5)``) in
seconds, as the kernel counts it in clock ticks (``SC_CLK_TCK``, read once at import). A process or thread
that ends between listing and reading is skipped. Standard library only (python3 >= 3.10); the scripts in
``bench/`` import it from their own folder (``python3 bench/x.py`` puts ``bench/`` on ``sys.path``).

- ``process_cpu_s(pid)``: one process, all its threads (``/proc/PID/stat``).
- ``thread_cpu_s(pid)``: each thread of one process, with its name (``/proc/PID/task/TID/stat``).
- ``group_thread_cpu_s(pgid)``: each thread of every process in a process group.
- ``tree_cpu_s(pid)``: a process, its live descendants, and the children it has reaped.
"""

from __future__ import annotations

import os
from pathlib import Path

#: clock ticks per second of ``/proc/*/stat`` times (100 where ``sysconf`` is missing: not Linux)
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# indexes in the fields after ``comm``'s closing parenthesis (field 3, ``state``, is index 0)
_PPID, _PGRP, _UTIME, _STIME, _CUTIME, _CSTIME = 1, 2, 11, 12, 13, 14


def _stat(path: str | Path) -> tuple[str, list[str]] | None:
    """(``comm``, the fields after it) of a ``stat`` file; None if it is gone (the task ended)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    close = text.rindex(")")  # comm may itself hold spaces and parentheses
    return text[text.index("(") + 1 : close], text[close + 2 :].split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[_UTIME]) + int(fields[_STIME])) / TICK


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def process_cpu_s(pid: int | str = "self") -> float:
    """CPU seconds of process ``pid`` (``"self"``: this one), all its threads, not its children.

    Raises ``OSError`` if there is no such process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return _cpu(fields)


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """Thread id -> (thread name, CPU seconds) for every thread of process ``pid`` (its main thread has
    ``tid == pid``). Raises ``OSError`` if there is no such process."""
    out: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = _stat(f"/proc/{pid}/task/{tid}/stat")
        if stat is not None:
            out[int(tid)] = (stat[0], _cpu(stat[1]))
    return out


def group_thread_cpu_s(pgid: int) -> dict[tuple[int, int], tuple[str, float]]:
    """(pid, tid) -> (thread name, CPU seconds) for every thread of every live process in process group
    ``pgid`` (a server started in its own session and the processes it spawned: python-backend stubs)."""
    out: dict[tuple[int, int], tuple[str, float]] = {}
    for pid in _pids():
        stat = _stat(f"/proc/{pid}/stat")
        if stat is None or int(stat[1][_PGRP]) != pgid:
            continue
        try:
            threads = thread_cpu_s(pid)
        except OSError:
            continue
        out.update(((pid, tid), value) for tid, value in threads.items())
    return out


def tree_cpu_s(pid: int) -> tuple[float, float, float]:
    """(CPU seconds of process ``pid`` itself, of its live descendants, of the children it has reaped and
    waited for: ``cutime`` + ``cstime``). A process that is gone counts 0."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    reaped = 0.0
    for current in _pids():
        stat = _stat(f"/proc/{current}/stat")
        if stat is None:
            continue
        fields = stat[1]
        children.setdefault(int(fields[_PPID]), []).append(current)
        times[current] = _cpu(fields)
        if current == pid:
            reaped = (int(fields[_CUTIME]) + int(fields[_CSTIME])) / TICK
    descendants, todo = 0.0, list(children.get(pid, []))
    while todo:
        current = todo.pop()
        descendants += times.get(current, 0.0)
        todo += children.get(current, [])
    return times.get(pid, 0.0), descendants, reaped
