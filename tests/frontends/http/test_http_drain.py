"""A draining `workbench serve` (SIGTERM) behind a proxy that keeps keep-alive connections:
a request the proxy sends on an idle connection at the moment the drain starts is answered
(with ``Connection: close``), not lost to a connection the server closes under it (nginx's
"recv() failed (104: Connection reset by peer)" and a 502 it cannot retry: infer is a POST).
New connections are refused at once, so the proxy moves to another replica."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from workbench.testing.process import ServerProcess
from workbench.testing.reload import write_add_sub

BODY = (b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[' + b",".join([b"1"] * 16)
        + b']},{"name":"INPUT1","shape":[1,16],"datatype":"FP32","data":[' + b",".join([b"2"] * 16) + b"]}]}")
REQUEST = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))


def read_response(sock: socket.socket) -> bytes:
    """Everything until the peer closes (or 10 s)."""
    sock.settimeout(10)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def read_one(sock: socket.socket) -> bytes:
    """One response (head and its Content-Length body)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.lower().split(b"\r\n")
                      if line.startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head


@pytest.fixture
def server(tmp_path: Path):
    write_add_sub(tmp_path)
    process = ServerProcess([f"--model-repository={tmp_path}", "--allow-grpc=false",
                             "--allow-metrics=false", "--log-verbose=1"])
    yield process
    process.stop(signal.SIGKILL)


def test_live_keepalive_connection_is_served_through_the_drain(server: ServerProcess) -> None:
    """Triton's ``HTTPServer::Stop`` (L0_lifecycle ``test_shutdown_with_live_connection``): a
    connection open when the drain starts, idle, is still served; the drain waits for it,
    counting down. Its response carries ``Connection: close`` and the connection ends."""
    with socket.create_connection(("127.0.0.1", server.port)) as idle:
        idle.sendall(REQUEST)
        assert read_one(idle).startswith(b"HTTP/1.1 200")  # now idle, kept alive
        since = len(server.lines)
        server.process.send_signal(signal.SIGINT)
        server.wait_for_log("Timeout 30: Found 1 HTTP service connections", since=since)
        with pytest.raises(ConnectionRefusedError):  # the listener is closed
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        assert server.process.poll() is None  # an idle connection holds the drain
        idle.sendall(REQUEST)  # the live connection still serves ...
        head = read_one(idle)
        assert head.startswith(b"HTTP/1.1 200"), head
        # ... and ends after that response (beyond Triton, which keeps it alive: a proxy's
        # pooled connection would hold the drain for the whole exit timeout)
        assert b"connection: close" in head.lower()
        assert read_response(idle) == b""
        assert server.process.wait(30) == 0  # the server closed it: the drain goes on
    assert "Waiting for in-flight requests to complete." in server.log
    assert server.log.count("Timeout 30: ") == 1
