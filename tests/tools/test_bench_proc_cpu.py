"""bench/proc_cpu.py (the bench scripts' CPU accounting from /proc): it reads this process, one of its threads
and a child that burns CPU the same as the kernel's own clocks do (``time.thread_time``, ``os.times`` in the
child), by process, by thread, by process group and by process tree (live and reaped)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("proc_cpu", ROOT / "bench" / "proc_cpu.py")
assert _spec is not None and _spec.loader is not None
proc_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proc_cpu)

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

#: /proc counts whole clock ticks; the clocks compared against are finer, and a little runs between reads
SLACK_S = 0.05
BURN_S = 0.3

# burns BURN_S of CPU, says how much it used (os.times: the same utime + stime), then waits for stdin to close
CHILD = f"""
import os, sys, time
while time.process_time() < {BURN_S}:
    pass
t = os.times()
print(t.user + t.system, flush=True)
sys.stdin.read()
"""


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_process_cpu_s_reads_this_process() -> None:
    _burn(0.1)
    before = os.times()
    mine, by_pid = proc_cpu.process_cpu_s(), proc_cpu.process_cpu_s(os.getpid())
    after = os.times()
    assert before.user + before.system - SLACK_S <= mine <= after.user + after.system + SLACK_S
    assert abs(by_pid - mine) <= SLACK_S
    with pytest.raises(OSError):
        proc_cpu.process_cpu_s(2**22 + 1)  # above pid_max: no such process


def test_thread_cpu_s_reads_each_thread_with_its_name() -> None:
    seen: dict[str, float] = {}
    burned, done = threading.Event(), threading.Event()

    def worker() -> None:
        _burn(BURN_S)
        seen["tid"], seen["cpu"] = threading.get_native_id(), time.thread_time()
        burned.set()
        done.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert burned.wait(60)
        threads = proc_cpu.thread_cpu_s(os.getpid())
    finally:
        done.set()
        thread.join()
    name, cpu = threads[int(seen["tid"])]
    assert seen["cpu"] - SLACK_S <= cpu <= seen["cpu"] + SLACK_S
    main_name, _ = threads[os.getpid()]
    assert main_name == Path("/proc/self/comm").read_text().strip()
    assert name  # the thread's own comm (Python may name it after the thread, or inherit the process's)


def test_a_child_is_read_by_pid_by_group_and_in_the_tree_then_as_reaped() -> None:
    _, _, reaped_before = proc_cpu.tree_cpu_s(os.getpid())
    # its own process group (pgid == pid); leaving the block closes its stdin (it exits) and waits for it
    with subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, start_new_session=True) as child:
        assert child.stdout is not None
        used = float(child.stdout.readline())
        assert used >= BURN_S - SLACK_S
        assert used - SLACK_S <= proc_cpu.process_cpu_s(child.pid) <= used + SLACK_S
        group = proc_cpu.group_thread_cpu_s(child.pid)
        assert (child.pid, child.pid) in group
        assert all(pid == child.pid for pid, _ in group)  # not this process: another group
        assert used - SLACK_S <= sum(cpu for _, cpu in group.values()) <= used + SLACK_S
        own, descendants, _ = proc_cpu.tree_cpu_s(os.getpid())
        assert abs(own - proc_cpu.process_cpu_s()) <= SLACK_S
        assert descendants >= used - SLACK_S
        assert proc_cpu.tree_cpu_s(child.pid) == (pytest.approx(used, abs=SLACK_S), 0.0, 0.0)
    _, _, reaped_after = proc_cpu.tree_cpu_s(os.getpid())
    assert reaped_after - reaped_before >= used - SLACK_S  # waited for: now in cutime + cstime
    assert proc_cpu.group_thread_cpu_s(child.pid) == {}
    assert proc_cpu.tree_cpu_s(child.pid) == (0.0, 0.0, 0.0)
