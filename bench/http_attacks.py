"""The HTTP port under two body attacks of issue 30; prints Markdown table rows. Not a test.

``slow-bodies``: ``--connections`` (4,200) connections each send a POST head announcing 1000
bytes of body and one byte of it, then one more byte every ``--trickle`` (25) seconds; from
the moment they are all open, a probe opens a new connection for ``GET /v2/health/ready`` every
0.5 s for ``--duration`` (60) s. Prints the probe answers by status, when the first 200 came,
the slowest probe, and what the attackers were answered (408 evicted, 503 refused at the cap,
nothing: still holding their place).

``chunked``: for each route, one chunked body of ``--mib`` (512) MiB, sent in 1 MiB chunks as
fast as the server takes them while a thread reads the answer; the client stops sending once
an answer came (as curl does), or with ``--send-all`` goes on until the whole body is sent or
the server cuts the connection. Prints the answer, the seconds until it came, the MiB sent (until
the answer, or in all), when the server ended the connection, and the server's peak RSS growth
(``VmHWM`` from /proc, reset with ``clear_refs`` before each route).

``workbench serve`` runs on an empty repository in explicit mode, with the code in ``--code``
(default: this checkout, from ``PYTHONPATH``), so the same script measures an older commit:

    PYTHONPATH=$PWD python bench/http_attacks.py slow-bodies
    PYTHONPATH=$PWD python bench/http_attacks.py chunked --code /tmp/before
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import socket
import tempfile
import threading
import time

import httpx

from workbench.testing.attack import chunk, request_head
from workbench.testing.process import ServerProcess, memory_kib, reset_peak_memory

#: the routes that buffered a 512 MiB chunked body whole (issue 30, finding 6)
ROUTES = [
    ("POST", "/v2/logging"), ("POST", "/v2/trace/setting"), ("POST", "/v2/repository/index"),
    ("POST", "/v2/repository/models/m/load"), ("POST", "/v2/repository/models/m/unload"),
    ("POST", "/v2/systemsharedmemory/region/r/register"), ("POST", "/v2/models/m/trace/setting"),
    ("POST", "/v2/health/live"),
]


def status_of(answer: bytes) -> str:
    """``"413"`` from ``b"HTTP/1.1 413 ..."``; ``"-"`` when nothing came."""
    return answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "-"


# ----------------------------------------------------------------- slow bodies
def slow_bodies(server: ServerProcess, connections: int, trickle_s: float, duration_s: float) -> None:
    attackers: list[socket.socket] = []
    started = time.monotonic()
    for _ in range(connections):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with contextlib.suppress(OSError):  # refused at the cap: its answer is read at the end
            sock.sendall(request_head("POST", "/v2/repository/index", b"content-length: 1000") + b" ")
        attackers.append(sock)
    opened = time.monotonic() - started
    probes: collections.Counter[str] = collections.Counter()
    first_ok = None
    slowest = 0.0
    next_trickle = time.monotonic() + trickle_s
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        if time.monotonic() >= next_trickle:
            for sock in attackers:
                with contextlib.suppress(OSError):
                    sock.send(b" ")
            next_trickle += trickle_s
        asked = time.monotonic()
        try:
            code = str(httpx.get(f"http://127.0.0.1:{server.port}/v2/health/ready", timeout=5).status_code)
        except httpx.HTTPError as exc:
            code = type(exc).__name__
        slowest = max(slowest, time.monotonic() - asked)
        if code == "200" and first_ok is None:
            first_ok = duration_s - (end - time.monotonic())
        probes[code] += 1
        time.sleep(0.5)
    answers: collections.Counter[str] = collections.Counter()
    for sock in attackers:
        sock.setblocking(False)
        try:
            answers[status_of(sock.recv(4096))] += 1
        except BlockingIOError:
            answers["- (still open)"] += 1
        except OSError as exc:
            answers[type(exc).__name__] += 1
        sock.close()
    print(f"| {connections} conns, a byte per {trickle_s:g} s, opened in {opened:.1f} s | "
          f"{', '.join(f'{k}: {v}' for k, v in sorted(probes.items()))} | "
          f"{'-' if first_ok is None else f'{first_ok:.1f} s'} | {slowest:.2f} s | "
          f"{', '.join(f'{k}: {v}' for k, v in sorted(answers.items()))} |", flush=True)


# ----------------------------------------------------------------- chunked bodies
def chunked(server: ServerProcess, method: str, path: str, mib: int, send_all: bool) -> None:
    pid = server.process.pid
    before = memory_kib(pid)["VmRSS"]
    reset_peak_memory(pid)
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    received: list[bytes] = []
    answered_at: list[float] = []

    def read() -> None:
        with contextlib.suppress(OSError):
            while data := sock.recv(65536):
                if not received:
                    answered_at.append(time.monotonic())
                received.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    sent = 0
    piece = chunk(b"A" * 2**20)
    try:
        sock.sendall(request_head(method, path, b"transfer-encoding: chunked") + chunk(b'{"x":"'))
        for _ in range(mib):
            if received and not send_all:  # answered: stop sending
                break
            sock.sendall(piece)
            sent += 2**20
        else:
            sock.sendall(chunk(b'"}') + b"0\r\n\r\n")
    except OSError:
        pass  # the server closed the connection: it stopped taking the body
    sending = time.monotonic() - started
    reader.join(30)  # until the server ends the connection
    ended = "no (30 s)" if reader.is_alive() else f"{time.monotonic() - started:.1f} s"
    sock.close()
    after = memory_kib(pid)
    took = f"{answered_at[0] - started:.2f} s" if answered_at else "-"
    print(f"| {method} {path} | {status_of(b''.join(received))} | {took} | {sent / 2**20:.0f} MiB "
          f"in {sending:.1f} s | {ended} | {(after['VmHWM'] - before) / 1024:.0f} MB |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("attack", choices=["slow-bodies", "chunked"])
    parser.add_argument("--code", help="the checkout the server runs (its PYTHONPATH)")
    parser.add_argument("--connections", type=int, default=4200)
    parser.add_argument("--trickle", type=float, default=25.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--send-all", action="store_true", help="chunked: send on after an answer")
    parser.add_argument("flags", nargs="*", help="extra `workbench serve` flags")
    args = parser.parse_args()
    if args.code:  # `python -m` puts the working folder first on sys.path: run it there too
        os.environ["PYTHONPATH"] = args.code
        os.chdir(args.code)
    with tempfile.TemporaryDirectory() as repo:
        server = ServerProcess([f"--model-repository={repo}", "--model-control-mode=explicit",
                                "--allow-grpc=false", "--allow-metrics=false", *args.flags])
        try:
            if args.attack == "slow-bodies":
                print("| attack | health probes (status: count) | first 200 after | slowest probe "
                      "| attackers answered |")
                print("|---|---|---|---|---|")
                slow_bodies(server, args.connections, args.trickle, args.duration)
            else:
                print("| route | answer | answered after | body sent | connection ended after "
                      "| peak RSS growth |")
                print("|---|---|---|---|---|---|")
                for method, path in ROUTES:
                    chunked(server, method, path, args.mib, args.send_all)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
