"""Handing a port over between two listeners that share it with ``SO_REUSEPORT`` without
losing a connection (the switch to and from a headless ``workbench serve``,
:mod:`workbench.serving.switch`).

With ``SO_REUSEPORT`` the kernel spreads new connections over every listener of the port's
group, and a listener that closes resets the connections still queued on it (accepted by the
kernel, not yet by the server: the client sees "connection reset"). So the hand-over is:

1. :func:`steer` new connections to one listener of the group: a classic BPF program on the
   group returns that listener's index (``SO_ATTACH_REUSEPORT_CBPF``, no privilege needed).
   Indexes are the order of joining, and a listener that leaves gives its index to the last
   one: with two listeners, 0 is the older and 1 the newer.
2. :func:`wait_queues_empty` on the listener that goes: its queue (read from
   ``/proc/net/tcp``, whichever process owns it) only drains now; its server accepts what is
   left.
3. Close it.

An index beyond the group's size makes the kernel fall back to its hash, so a program left on
a group of one is harmless.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import struct
from collections.abc import Collection

#: ``setsockopt`` option attaching a classic BPF program to a ``SO_REUSEPORT`` group (Linux)
SO_ATTACH_REUSEPORT_CBPF = 51
#: the listener index of the older / newer of two listeners sharing a port
OLDER, NEWER = 0, 1
#: seconds the queues must stay empty before a listener counts as drained: longer than a
#: handshake on a LAN, so a connection whose SYN was steered here just before the hand-over
#: has landed in the queue (and is accepted) first
QUIET_S = 0.2


def steer(sock: socket.socket, index: int) -> None:
    """Send every new connection of ``sock``'s ``SO_REUSEPORT`` group to the listener at
    ``index`` (:data:`OLDER` or :data:`NEWER`; see the module docstring).

    Raises:
        OSError: not a ``SO_REUSEPORT`` socket, or the kernel has no such option (not Linux).
    """
    program = struct.pack("HBBI", 0x06, 0, 0, index)  # BPF_RET | BPF_K: return index
    code = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxP", 1, ctypes.addressof(code))  # struct sock_fprog
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)


def inode(sock: socket.socket) -> int:
    """The socket's inode number (how ``/proc/net/tcp`` names it)."""
    return os.fstat(sock.fileno()).st_ino


def _rows(port: int, state: str) -> list[list[str]]:
    """The ``/proc/net/tcp{,6}`` rows of sockets in ``state`` (hex, ``0A`` listening, ``01``
    established) whose local port is ``port``."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines, None)
                rows += [fields for fields in map(str.split, lines)
                         if len(fields) > 9 and fields[3] == state
                         and int(fields[1].rsplit(":", 1)[1], 16) == port]
        except OSError:
            continue
    return rows


def own_inodes() -> set[int]:
    """The inodes of this process's sockets (``/proc/self/fd``; empty elsewhere)."""
    found: set[int] = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def connections(port: int) -> set[int]:
    """The inodes of the established connections accepted on TCP ``port`` (any process)."""
    return {int(fields[9]) for fields in _rows(port, "01")}


def port_queues(port: int) -> dict[int, int]:
    """Every listener of TCP ``port`` in this network namespace (any process, IPv4 and
    IPv6), by inode: the connections established on it and not accepted yet (Linux:
    ``/proc/net/tcp``'s ``rx_queue`` of a listener is its accept queue); ``{}`` elsewhere."""
    return {int(fields[9]): int(fields[4].split(":")[1], 16) for fields in _rows(port, "0A")}


async def wait_queues_empty(port: int, inodes: Collection[int], *, others: bool = False,
                            timeout_s: float = 10.0, quiet_s: float = QUIET_S) -> bool:
    """Wait until no connection is queued on the listeners of ``port`` named by ``inodes``
    (``others``: on every listener of the port but those) and none was for ``quiet_s``
    seconds; their servers keep accepting meanwhile.

    Returns:
        True when drained; False when ``timeout_s`` passed first.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    quiet_since = loop.time()
    chosen = set(inodes)
    while loop.time() < deadline:
        queued = sum(count for ino, count in port_queues(port).items() if (ino in chosen) != others)
        if queued:
            quiet_since = loop.time()
        elif loop.time() - quiet_since >= quiet_s:
            return True
        await asyncio.sleep(0.01)
    return False


__all__ = ["NEWER", "OLDER", "QUIET_S", "SO_ATTACH_REUSEPORT_CBPF", "connections", "inode", "own_inodes",
           "port_queues", "steer", "wait_queues_empty"]
