"""``shut_listeners``: only the listening sockets on the port are shut, nothing leaks, and a
connection the owner has not accepted yet is not reset."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from workbench.serving import listeners
from workbench.serving.listeners import shut_listeners


def test_only_the_ports_listener_is_shut_and_no_descriptor_leaks(tmp_path) -> None:
    with open(tmp_path / "a-file", "w") as not_a_socket, socket.socket() as other, socket.socket() as target:
        assert not_a_socket.fileno() >= 0
        other.bind(("127.0.0.1", 0))
        other.listen()
        target.bind(("127.0.0.1", 0))
        target.listen()
        before = len(os.listdir("/proc/self/fd"))
        assert shut_listeners(target.getsockname()[1]) == 1
        assert len(os.listdir("/proc/self/fd")) == before  # every duplicate closed, files included
        with socket.create_connection(other.getsockname(), timeout=5):
            pass  # the other port still accepts
        refused = socket.socket()
        try:
            refused.settimeout(5)
            assert refused.connect_ex(target.getsockname()) != 0
        finally:
            refused.close()


def test_a_connection_queued_before_the_shut_is_accepted_not_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client (nginx) connected and wrote its request; the owner's accept loop is late.
    Before, the shut reset the queued connection (the client read ECONNRESET: a 502)."""
    monkeypatch.setattr(listeners, "ACCEPT_WAIT_S", 30.0)  # a bound only: the owner is 50 ms late
    with socket.socket() as target:
        target.bind(("127.0.0.1", 0))
        target.listen()
        client = socket.create_connection(target.getsockname(), timeout=5)
        client.sendall(b"request")
        accepted: list[socket.socket] = []

        def late_owner() -> None:
            time.sleep(0.05)  # simulates a busy accept thread, not a wait for a result
            accepted.append(target.accept()[0])

        owner = threading.Thread(target=late_owner)
        owner.start()
        assert listeners.queued_connections(target) == 1
        assert shut_listeners(target.getsockname()[1]) == 1
        owner.join()
        with accepted[0] as connection, client:
            assert connection.recv(7) == b"request"
            connection.sendall(b"answer")
            assert client.recv(6) == b"answer"
