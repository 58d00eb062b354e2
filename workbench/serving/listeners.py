"""Refusing new connections on a port whose listening socket a library owns (grpc-core's gRPC
listener): :func:`shut_listeners`."""

from __future__ import annotations

import os
import socket


def shut_listeners(port: int) -> int:
    """Shut down this process's listening TCP sockets bound to ``port`` (any address), so
    that new connections to it are refused while connections already accepted go on.

    The owner's accept loop sees an error and stops accepting (grpc-core logs "Closing
    acceptor. Failed accept4: Invalid argument" once). Linux only (``/proc/self/fd``);
    elsewhere nothing is shut.

    Returns:
        How many listening sockets were shut down.
    """
    shut = 0
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return 0
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
        with sock:
            try:
                if (sock.type == socket.SOCK_STREAM
                        and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                        and sock.getsockname()[1] == port):
                    sock.shutdown(socket.SHUT_RDWR)
                    shut += 1
            except OSError:
                continue
    return shut


__all__ = ["shut_listeners"]
