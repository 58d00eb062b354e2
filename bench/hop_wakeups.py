"""Wake-up primitives for the Python backend's call link, measured alone (issue 34).

    python3 bench/hop_wakeups.py [--size 4608] [--count 20000] [--rounds 2]

Two processes (a fork) pass one message back and forth ``--count`` times, ``--size`` bytes
each way (4608 B: a batch of 16 requests of one FP32 [1,64] row plus headers):

* ``sock``: the message through a ``socketpair`` (8-byte length + body, buffered reads: the
  call socket the backend used before);
* ``shmsock`` / ``shmpipe`` / ``shmefd``: the message copied through a shared mapping, and an
  8-byte socket send / a 1-byte pipe write / an ``eventfd`` write as the wake-up.

Prints wall µs per round trip and CPU µs per round trip of each process (``getrusage``;
the CPU figures are the ones to compare on a shared machine). Standard library only.
"""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import socket
import struct
import time
from collections.abc import Callable
from typing import Any


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run(mode: str, size: int, count: int) -> str:
    payload = b"x" * size
    shm = mmap.mmap(-1, 4 * size + 4096)
    header = struct.Struct("<Q")
    if mode == "sock":
        a, b = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            reader = b.makefile("rb", buffering=256 * 1024)
            for _ in range(count):
                head = reader.read(8)
                body = reader.read(header.unpack(head)[0])
                b.sendall(head + body)
            os._exit(0)
        reader = a.makefile("rb", buffering=256 * 1024)
        start, cpu0 = time.perf_counter(), cpu_s(resource.RUSAGE_SELF)
        for _ in range(count):
            a.sendall(header.pack(size) + payload)
            reader.read(header.unpack(reader.read(8))[0])
    else:
        send_a: Callable[[], Any]
        recv_a: Callable[[], Any]
        send_b: Callable[[], Any]
        recv_b: Callable[[], Any]
        if mode == "shmsock":
            a, b = socket.socketpair()
            send_a, recv_a = (lambda: a.send(b"\0" * 8)), (lambda: a.recv(8))
            send_b, recv_b = (lambda: b.send(b"\0" * 8)), (lambda: b.recv(8))
        elif mode == "shmpipe":
            r1, w1 = os.pipe()
            r2, w2 = os.pipe()
            send_a, recv_b = (lambda: os.write(w1, b"\0")), (lambda: os.read(r1, 1))
            send_b, recv_a = (lambda: os.write(w2, b"\0")), (lambda: os.read(r2, 1))
        else:
            e1, e2 = os.eventfd(0), os.eventfd(0)
            send_a, recv_b = (lambda: os.eventfd_write(e1, 1)), (lambda: os.eventfd_read(e1))
            send_b, recv_a = (lambda: os.eventfd_write(e2, 1)), (lambda: os.eventfd_read(e2))
        pid = os.fork()
        if pid == 0:
            for _ in range(count):
                recv_b()
                shm[size:2 * size] = shm[:size]
                send_b()
            os._exit(0)
        start, cpu0 = time.perf_counter(), cpu_s(resource.RUSAGE_SELF)
        for _ in range(count):
            shm[:size] = payload
            send_a()
            recv_a()
            _ = shm[size:2 * size]  # the copy out
    wall = time.perf_counter() - start
    mine = cpu_s(resource.RUSAGE_SELF) - cpu0
    child0 = cpu_s(resource.RUSAGE_CHILDREN)
    os.waitpid(pid, 0)
    child = cpu_s(resource.RUSAGE_CHILDREN) - child0
    return (f"{mode:8s} {size:6d} B: {wall / count * 1e6:6.1f} µs/rt wall, CPU parent {mine / count * 1e6:5.1f} "
            f"+ child {child / count * 1e6:5.1f} = {(mine + child) / count * 1e6:5.1f} µs/rt")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4608)
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    for _ in range(a.rounds):
        for mode in ("sock", "shmsock", "shmpipe", "shmefd"):
            print(run(mode, a.size, a.count), flush=True)


if __name__ == "__main__":
    main()
