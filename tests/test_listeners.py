"""``shut_listeners``: only the listening sockets on the port are shut, and nothing leaks."""

from __future__ import annotations

import os
import socket

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
