"""Listening sockets for the v2 ports, bound before any service runs (no framework imported:
the dashboard's ``workbench serve`` launcher checks ports with it too)."""

from __future__ import annotations

import socket


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def port_is_free(address: str, port: int) -> bool:
    """Whether ``address:port`` can be bound by a socket without ``SO_REUSEPORT`` now (no
    listener holds it, shared or not). The probe is bound and closed at once; port 0 is
    always free."""
    probe = socket.socket(_family(address), socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((address, port))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def bind_socket(address: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket with TCP_NODELAY set (small responses must not wait on Nagle).

    ``reuse_port``: set ``SO_REUSEPORT`` (tritonserver's ``--reuse-http-port``): the socket
    joins the port's group of listeners of the same user that set it too, and the kernel
    spreads new connections over them (:mod:`workbench.serving.reuseport` steers them).

    Raises:
        OSError: the address is in use (by a listener without ``SO_REUSEPORT`` when
            ``reuse_port``) or cannot be bound.
    """
    sock = socket.socket(_family(address), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((address, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


__all__ = ["bind_socket", "port_is_free"]
