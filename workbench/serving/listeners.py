"""This process's listening sockets on a port, including those a library owns (grpc-core's
gRPC listener): :func:`own_listeners` finds them, :func:`shut_listeners` refuses new
connections on them."""

from __future__ import annotations

import os
import socket


def own_listeners(port: int) -> list[socket.socket]:
    """Copies (``dup``) of this process's listening TCP sockets bound to ``port`` (any
    address), found through ``/proc/self/fd``: Linux only, ``[]`` elsewhere. The caller
    closes the copies (closing one never closes the listener: the owner's descriptor stays)."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    for name in names:
        try:
            copy = os.dup(int(name))
        except (OSError, ValueError):
            continue  # closed since the listing
        try:
            sock = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)  # not a socket
            continue
        try:
            if (sock.type == socket.SOCK_STREAM
                    and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    and sock.getsockname()[1] == port):
                found.append(sock)
                continue
        except OSError:
            pass
        sock.close()
    return found


def shut_listeners(port: int) -> int:
    """Shut down this process's listening TCP sockets bound to ``port`` (any address), so
    that new connections to it are refused while connections already accepted go on.

    The owner's accept loop sees an error and stops accepting (grpc-core logs "Closing
    acceptor. Failed accept4: Invalid argument" once, at error level; ``workbench serve``
    drops that line: :mod:`workbench.serving.stderr_filter`). Linux only (``/proc/self/fd``);
    elsewhere nothing is shut.

    Returns:
        How many listening sockets were shut down.
    """
    shut = 0
    for sock in own_listeners(port):
        with sock:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                shut += 1
            except OSError:
                continue
    return shut


__all__ = ["own_listeners", "shut_listeners"]
