"""CPU time per thread of a running server (and of any other pids) over one perf_analyzer run.

    .venv/bin/python bench/cpu_split.py --server-pid PID -- PERF_ANALYZER_ARGS...

Reads /proc/<pid>/task/*/stat (utime+stime) before and after the perf_analyzer run (started here, its own CPU
time from its /proc entry just before it exits is not visible, so it is taken from resource usage of children),
and prints CPU seconds per server thread name, per second of wall time.
"""
import argparse
import importlib
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
#: CPU time of processes and threads from /proc, loaded from this folder
proc_cpu: Any = importlib.import_module("proc_cpu")


def threads(pid: int) -> dict[str, float]:
    return {f"{name}:{tid}": cpu for tid, (name, cpu) in proc_cpu.thread_cpu_s(pid).items()}


ap = argparse.ArgumentParser()
ap.add_argument("--server-pid", type=int, required=True)
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
t0, w0 = threads(a.server_pid), time.time()
subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
t1, w1 = threads(a.server_pid), time.time()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
wall = w1 - w0
print(f"wall {wall:.1f} s; perf_analyzer {(ru.ru_utime + ru.ru_stime) / wall:.2f} cores")
total = 0.0
for k in sorted(t1, key=lambda k: -(t1[k] - t0.get(k, 0))):
    d = (t1[k] - t0.get(k, 0)) / wall
    total += d
    if d >= 0.005:
        print(f"  server thread {k}: {d:.2f} cores")
print(f"server total {total:.2f} cores")
