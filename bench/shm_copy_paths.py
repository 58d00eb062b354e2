"""Issue 20, target 4: the ways to move 64 MiB between a server buffer and a tmpfs (/dev/shm) object.

Times, in one process and one minute, each way the server could copy a system shared-memory region:

* ``pread fresh`` / ``pwrite``: the descriptor path (no mapping), one thread or split in two halves;
* ``pvm read fresh`` / ``pvm write``: ``process_vm_readv`` / ``process_vm_writev`` on the process itself,
  between a buffer and the process's own ``MAP_SHARED`` mapping of the object (a truncated object gives
  EFAULT, not SIGBUS), one thread or two;
* ``... reused``: the same (pread or process_vm) into a buffer that was already touched (no page faults on the
  destination);
* ``memcpy``: ``np.copyto`` from/to the mapping (what a plain mapping would cost; forbidden in the
  server: SIGBUS on a truncated object), and ``np.copyto`` between two touched arrays (the copy limit).

Run under the benchmark lock::

    flock /tmp/bench.lock /work/main/.venv/bin/python bench/shm_copy_paths.py --mib 64 --reps 9

Prints a Markdown table of median ms per way.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import threading
import time
import uuid

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _pvm(call, local: int, remote: int, size: int) -> None:
    lv, rv = _IoVec(local, size), _IoVec(remote, size)
    done = call(os.getpid(), ctypes.byref(lv), 1, ctypes.byref(rv), 1, 0)
    if done != size:
        raise OSError(ctypes.get_errno(), "short process_vm copy")


def _address(array: np.ndarray) -> int:
    return array.ctypes.data


def _split(fn, size: int) -> None:
    half = size // 2
    second = threading.Thread(target=fn, args=(half, size - half))
    second.start()
    fn(0, half)
    second.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    size = args.mib << 20
    path = f"/dev/shm/wb_copy_paths_{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8).data, 0)
        mapping = mmap.mmap(fd, size)
        mapped = np.frombuffer(mapping, np.uint8)
        base = _address(mapped)
        source = np.ones(size, np.uint8)
        reused = np.ones(size, np.uint8)
        readv, writev = _libc.process_vm_readv, _libc.process_vm_writev
        for call in (readv, writev):
            call.restype = ctypes.c_ssize_t

        def pread_fresh():
            out = np.empty(size, np.uint8)
            os.preadv(fd, [out.data], 0)

        def pread_fresh_2():
            out = np.empty(size, np.uint8)
            _split(lambda at, n: os.preadv(fd, [out.data[at:at + n]], at), size)

        def pvm_read(out: np.ndarray, threads: int):
            if threads == 1:
                _pvm(readv, _address(out), base, size)
            else:
                _split(lambda at, n: _pvm(readv, _address(out) + at, base + at, n), size)

        ways = {
            "copy limit (np.copyto touched -> touched)": lambda: np.copyto(reused, source),
            "pread fresh, 1 thread": pread_fresh,
            "pread fresh, 2 threads": pread_fresh_2,
            "pread reused, 2 threads": lambda: _split(
                lambda at, n: os.preadv(fd, [reused.data[at:at + n]], at), size),
            "pvm read fresh, 1 thread": lambda: pvm_read(np.empty(size, np.uint8), 1),
            "pvm read fresh, 2 threads": lambda: pvm_read(np.empty(size, np.uint8), 2),
            "pvm read reused, 1 thread": lambda: pvm_read(reused, 1),
            "pvm read reused, 2 threads": lambda: pvm_read(reused, 2),
            "memcpy from mapping, fresh (forbidden)": lambda: np.copyto(np.empty(size, np.uint8), mapped),
            "pwrite, 1 thread": lambda: os.pwrite(fd, source.data, 0),
            "pwrite, 2 threads": lambda: _split(lambda at, n: os.pwrite(fd, source.data[at:at + n], at), size),
            "pvm write, 1 thread": lambda: _pvm(writev, _address(source), base, size),
            "pvm write, 2 threads": lambda: _split(
                lambda at, n: _pvm(writev, _address(source) + at, base + at, n), size),
            "memcpy into mapping (forbidden)": lambda: np.copyto(mapped, source),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.reps):  # interleaved: every way sees the same minutes
            for name, way in ways.items():
                start = time.perf_counter()
                way()
                times[name].append((time.perf_counter() - start) * 1e3)
        limit = statistics.median(times["copy limit (np.copyto touched -> touched)"])
        print(f"| way ({args.mib} MiB) | median ms | min ms | / copy limit |")
        print("|---|---:|---:|---:|")
        for name, values in times.items():
            med = statistics.median(values)
            print(f"| {name} | {med:.1f} | {min(values):.1f} | {med / limit:.2f} |")
        ways.clear()  # the lambdas hold the mapping's numpy view: drop them, then the view
        mapped = np.empty(0, np.uint8)
        mapping.close()
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
