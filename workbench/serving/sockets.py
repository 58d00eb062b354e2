"""Listening sockets for the v2 ports, bound before any service runs (no framework imported:
the dashboard's ``workbench serve`` launcher checks ports with it too)."""

from __future__ import annotations

import socket


def bind_socket(address: str, port: int) -> socket.socket:
    """A listening TCP socket with TCP_NODELAY set (small responses must not wait on Nagle).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((address, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


__all__ = ["bind_socket"]
